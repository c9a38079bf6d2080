package oneline

import "testing"

func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		"":            "",
		"plain":       "plain",
		"a\r\nb":      "a  b",
		"\nx\r":       " x ",
		"no break \t": "no break \t",
	} {
		if got := Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}
