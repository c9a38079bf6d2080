package server

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/tidwall/match"
)

// With the gateway, COMMAND describes the Redis behind rlproxy plus
// rlproxy's own commands (RL.*, CL.THROTTLE, GCRA, ...), as a Redis with
// a module would: the backend's reply, with rlproxy's entries added.
// rlproxy's connection commands (PING, CLIENT, INFO, ...) are Redis's
// too: the backend's entries describe them.

// gatewayCommand answers COMMAND [COUNT|INFO|DOCS|LIST|GETKEYS ...] from
// the backend and rlproxy's table; ok is false when rlproxy answers
// alone (no gateway, or a user who may not reach Redis).
func (s *Server) gatewayCommand(c *client, args []string) (any, bool) {
	if s.opts.Forward == nil || s.opts.Embedded || s.forwardable(c, args) != nil {
		return nil, false
	}
	sub := ""
	if len(args) > 1 {
		sub = strings.ToUpper(args[1])
	}
	mine := s.limiterCommands()
	switch sub {
	case "", "INFO":
		if len(args) > 2 {
			return s.commandInfoOf(c, args[2:]), true
		}
		var extra []byte
		for _, cmd := range mine {
			extra = appendReply(extra, cmd.Info(), c.proto)
		}
		return s.extended(c, args, len(mine), extra), true
	case "COUNT":
		frame := s.ask(c, args)
		n, err := strconv.ParseInt(strings.TrimSpace(string(bytes.TrimPrefix(frame, []byte(":")))), 10, 64)
		if frame[0] != ':' || err != nil {
			return rawFrame(frame), true
		}
		return n + int64(len(mine)), true
	case "LIST":
		pattern := "*"
		if len(args) == 5 && strings.EqualFold(args[2], "FILTERBY") && strings.EqualFold(args[3], "PATTERN") {
			pattern = args[4]
		} else if len(args) > 2 {
			return rawFrame(s.ask(c, args)), true // MODULE, ACLCAT: none of rlproxy's
		}
		var extra []byte
		n := 0
		for _, cmd := range mine {
			if name := strings.ToLower(cmd.Name); match.Match(name, pattern) {
				extra = appendReply(extra, name, c.proto)
				n++
			}
		}
		return s.extended(c, args, n, extra), true
	case "DOCS":
		var theirs []string
		var extra []byte
		n := 0
		for _, cmd := range mine {
			if len(args) == 2 || slices.ContainsFunc(args[2:], func(a string) bool { return strings.EqualFold(a, cmd.Name) }) {
				extra = appendReply(appendReply(extra, strings.ToLower(cmd.Name), c.proto), cmd.Docs(), c.proto)
				n++
			}
		}
		for _, name := range args[2:] {
			if cmd := s.table.Lookup(name); cmd == nil || s.own[cmd.Name] {
				theirs = append(theirs, name)
			}
		}
		if c.proto == 2 { // a flat array of name, docs pairs
			n *= 2
		}
		if len(args) > 2 && len(theirs) == 0 {
			return rawFrame(extendFrame(appendReply(nil, commands.Map{}, c.proto), n, extra)), true
		}
		return s.extended(c, append(args[:2:2], theirs...), n, extra), true
	case "GETKEYS", "GETKEYSANDFLAGS":
		if len(args) > 3 {
			if cmd := s.table.Lookup(args[2]); cmd != nil && !s.own[cmd.Name] {
				return []any{args[3]}, true // the limiter's name is the first key
			}
		}
	}
	return rawFrame(s.ask(c, args)), true
}

// limiterCommands are rlproxy's own commands, those Redis does not have.
func (s *Server) limiterCommands() []*commands.Command {
	var out []*commands.Command
	for _, cmd := range s.table.All() {
		if !s.own[cmd.Name] {
			out = append(out, cmd)
		}
	}
	return out
}

// commandInfoOf answers COMMAND INFO name...: rlproxy's entries for its
// commands, the backend's for the others (nil for unknown names).
func (s *Server) commandInfoOf(c *client, names []string) any {
	var b []byte
	for _, name := range names {
		if cmd := s.table.Lookup(name); cmd != nil && !s.own[cmd.Name] {
			b = appendReply(b, cmd.Info(), c.proto)
			continue
		}
		frame := s.ask(c, []string{"COMMAND", "INFO", name})
		if !bytes.HasPrefix(frame, []byte("*1\r\n")) {
			return rawFrame(frame) // an error
		}
		b = append(b, frame[4:]...)
	}
	return rawFrame(append(fmt.Appendf(nil, "*%d\r\n", len(names)), b...))
}

// extended asks the backend args and adds n elements (of a RESP3 map:
// pairs), encoded in extra, to its aggregate reply.
func (s *Server) extended(c *client, args []string, n int, extra []byte) any {
	return rawFrame(extendFrame(s.ask(c, args), n, extra))
}

// extendFrame adds n elements (pairs, to a RESP3 map) encoded in extra to
// an array or map frame; any other frame (an error) is returned as is.
func extendFrame(frame []byte, n int, extra []byte) []byte {
	i := bytes.Index(frame, []byte("\r\n"))
	if i < 1 || (frame[0] != '*' && frame[0] != '%') {
		return frame
	}
	count, err := strconv.Atoi(string(frame[1:i]))
	if err != nil || count < 0 {
		return frame
	}
	out := fmt.Appendf(nil, "%c%d\r\n", frame[0], count+n)
	return append(append(out, frame[i+2:]...), extra...)
}
