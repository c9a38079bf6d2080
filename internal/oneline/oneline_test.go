package oneline

import (
	"strings"
	"testing"
)

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

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "''",
		"abc":                     "'abc'",
		"a\r\nb":                  "'a  b'",
		strings.Repeat("x", 128):  "'" + strings.Repeat("x", 128) + "'",
		strings.Repeat("x", 129):  "'" + strings.Repeat("x", 128) + "...'",
		strings.Repeat("\n", 200): "'" + strings.Repeat(" ", 128) + "...'",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %q, want %q", in, got, want)
		}
	}
}
