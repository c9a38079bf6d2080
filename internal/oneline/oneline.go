// Package oneline keeps text that goes into a RESP error or status line on
// one line: a CR or LF would end the frame early and the rest would be
// read as the next reply. Quote is the one way a client's argument is
// shown inside an error.
package oneline

import "strings"

var breaks = strings.NewReplacer("\r", " ", "\n", " ")

// Scrub returns s with every CR and LF turned into a space (as Redis
// does to its error replies).
func Scrub(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return breaks.Replace(s)
}

// MaxQuoted is the most bytes of an argument Quote shows (Redis shows
// 128 of a command's arguments in "unknown command" errors).
const MaxQuoted = 128

// Quote shows a client's argument inside an error: in single quotes, on
// one line (Scrub), its first MaxQuoted bytes followed by "..." when it
// is longer.
func Quote(s string) string {
	more := ""
	if len(s) > MaxQuoted {
		s, more = s[:MaxQuoted], "..."
	}
	return "'" + Scrub(s) + more + "'"
}
