// Package oneline keeps text that goes into a RESP error or status line on
// one line: a CR or LF would end the frame early and the rest would be
// read as the next reply.
package oneline

import "strings"

var breaks = strings.NewReplacer("\r", " ", "\n", " ")

// Scrub returns s with every CR and LF turned into a space.
func Scrub(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return breaks.Replace(s)
}
