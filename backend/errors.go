package backend

import (
	"errors"
	"fmt"

	"github.com/rlproxy/rlproxy/internal/oneline"
)

// ErrUnavailable marks errors where a backend could not be reached or did
// not answer in time, as opposed to an error reply from Redis.
var ErrUnavailable = errors.New("backend unavailable")

// replyError is an error reply from a backend, shown in one line.
type replyError struct {
	msg string
	err error
}

func (e *replyError) Error() string { return e.msg }
func (e *replyError) Unwrap() error { return e.err }

type unavailableError struct {
	node string
	err  error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("backend %s unavailable: %s", e.node, oneLine(e.err.Error()))
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

func oneLine(s string) string { return oneline.Scrub(s) }
