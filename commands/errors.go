package commands

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of argument parsing are worded like Redis's own; the server adds
// the "ERR " prefix to errors that do not start with an upper-case code.

// ErrSyntax: a word where none is expected (GCRA's options).
var ErrSyntax = errors.New("syntax error")

// ArityError: a command got the wrong number of arguments.
func ArityError(name string) error {
	return fmt.Errorf("wrong number of arguments for '%s' command", strings.ToLower(name))
}

// lineBreaks writes CR and LF as \r and \n, keeping an error on one line.
var lineBreaks = strings.NewReplacer("\r", "\\r", "\n", "\\n")

// quote shows a user's argument inside an error: one line, bounded length.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "..."
	}
	if strings.ContainsAny(s, "\r\n") {
		s = lineBreaks.Replace(s)
	}
	return "'" + s + "'"
}
