package feed

import "testing"

// The announcements as the scripts write them, and what is not one.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		payload string
		want    Event
		ok      bool
	}{
		{"p", Event{Kind: Policies}, true},
		{LimiterMessage("k", 3), Event{Kind: Limiter, Name: "k", Shards: 3}, true},
		{"c 1 a name with spaces", Event{Kind: Limiter, Name: "a name with spaces", Shards: 1}, true},
		{"c 2 ", Event{}, false},
		{"c x k", Event{}, false},
		{"c -1 k", Event{}, false},
		{"c 1", Event{}, false},
		{"q", Event{}, false},
		{"", Event{}, false},
	} {
		got, ok := parse(c.payload)
		if ok != c.ok || got != c.want {
			t.Errorf("parse(%q) = %+v %v, want %+v %v", c.payload, got, ok, c.want, c.ok)
		}
	}
}
