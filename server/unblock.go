package server

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rlproxy/rlproxy/internal/oneline"
)

// clientUnblock answers CLIENT UNBLOCK id [TIMEOUT|ERROR] as Redis does,
// for rlproxy's clients: one blocked in a forwarded command (BLPOP, ...)
// waits on a backend connection of its own, so it is unblocked by
// CLIENT UNBLOCK of that connection on the backend, whose reply (1, or 0
// when it was no longer blocked) is the answer. Any other client: 0.
func (s *Server) clientUnblock(c *client, args []string) (any, error) {
	if len(args) > 4 {
		return nil, fmt.Errorf("unknown subcommand or wrong number of arguments for '%s'. Try CLIENT HELP.", oneline.Scrub(args[1]))
	}
	mode := "TIMEOUT"
	if len(args) == 4 {
		mode = strings.ToUpper(args[3])
		if mode != "TIMEOUT" && mode != "ERROR" {
			return nil, errors.New("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
		}
	}
	id, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		return nil, errors.New("value is not an integer or out of range")
	}
	s.mu.Lock()
	target := s.clients[id]
	s.mu.Unlock()
	var on int64
	if target != nil {
		target.mu.Lock()
		fwd := target.fwd
		target.mu.Unlock()
		if fwd != nil {
			on = fwd.BlockedOn()
		}
	}
	if on == 0 || s.opts.Forward == nil {
		return int64(0), nil
	}
	return rawFrame(s.ask(c, []string{"CLIENT", "UNBLOCK", strconv.FormatInt(on, 10), mode})), nil
}
