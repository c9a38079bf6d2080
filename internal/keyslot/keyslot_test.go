package keyslot

import "testing"

func TestOf(t *testing.T) {
	// Answers of CLUSTER KEYSLOT on redis-server 7.0 (the first two are in
	// the Redis documentation).
	for key, want := range map[string]int{
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"123456789":     12739,
		"foo":           12182,
		"{a%7Db:0}:c":   6947,
		"":              0,
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}
