package commands

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rlproxy/rlproxy/internal/oneline"
)

// Errors of argument parsing are worded like Redis's own; the server adds
// the "ERR " prefix to errors that do not start with an upper-case code.

// ErrSyntax: a word where none is expected (GCRA's options).
var ErrSyntax = errors.New("syntax error")

// ArityError: a command got the wrong number of arguments.
func ArityError(name string) error {
	return fmt.Errorf("wrong number of arguments for '%s' command", strings.ToLower(name))
}

// quote shows a user's argument inside an error (oneline.Quote: quoted,
// one line, bounded length).
func quote(s string) string { return oneline.Quote(s) }
