package server

import (
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/internal/oneline"
	"github.com/tidwall/redcon"
)

// handle runs the commands a client sent together (one pipeline, as far
// as it has been read); their replies go out in order through the
// client's reply queue (replies.go), in one write when they are decided
// at once. A command with a Batch handler (RL.ACQUIRE) always goes
// through it (callBatch): a run of neighbouring calls of it at once, so
// they can share backend calls instead of paying one round trip each;
// their slots are filled by whichever goroutine decides them, so the
// connection goes back to reading at once. That spares a sleep and a
// wake-up per request — most of a request's cost beyond its socket I/O
// when clients do not pipeline. A client's commands still run in order:
// a command waits until the ones before it are decided.
func (s *Server) handle(conn redcon.Conn, cmd redcon.Command) {
	c := conn.Context().(*client)
	s.drain.busy.Add(1)
	defer s.drain.busy.Add(-1)
	c.cmds = append(append(c.cmds[:0], cmd), conn.ReadPipeline()...)
	calls := argStrings(c.calls[:0], c.cmds)
	if g, ok := c.conn.(*guardedConn); ok && len(g.bigs) > 0 {
		g.restore(calls)
	}
	c.calls = calls
	clear(c.cmds) // calls keep what they need of them
	defer clear(c.calls)
	s.seen(c, calls[len(calls)-1])
	if f := c.handBack.Swap(nil); f != nil {
		s.handedBack(c, calls[0], *f)
		defer (*f)() // a command refused before it was sent (a looped client's forward never waits for replies)
	}
	q := c.replies
	q.hold()
	forwarded := false
	for i := 0; i < len(calls) && !c.quit; {
		if s.forwards(c, calls[i]) {
			forwarded = true
			j := i + 1
			// A PING after forwarded commands goes with them: after a
			// SUBSCRIBE in the run it is answered in the Pub/Sub shape.
			for j < len(calls) && (s.forwards(c, calls[j]) || strings.EqualFold(calls[j][0], "PING")) {
				j++
			}
			// Only the loop needs to know ahead that the forward waits
			// (Sendable routes every call: not for every client).
			if c.willWait != nil && s.forwardWaits(c, calls[i:j]) {
				c.waits()
			}
			q.waitUnforwarded()
			s.forward(c, calls[i:j])
			i = j
			continue
		}
		if q.waiting() {
			c.waits()
			q.waitFilled() // a client's commands run in order
		}
		cmd := s.batchable(c, calls[i])
		if cmd == nil {
			if !s.loopOwns(c, calls[i]) {
				c.waits() // it may wait (RL.LEASE, BLOCK)
			}
			// The poller counts each request once, where it is decided
			// (here, or in a batch or forward): a lone request counted
			// twice would read as two at once and switch polling off.
			s.opts.Poller.Begin()
			if v := s.call(c, calls[i]); !c.muted(calls[i]) {
				q.add(v, c.proto)
			}
			s.opts.Poller.End()
			i++
			continue
		}
		j := i + 1
		for j < len(calls) && s.batchable(c, calls[j]) == cmd && !s.forwards(c, calls[j]) {
			j++
		}
		s.drain.busy.Add(int64(j - i))
		first := q.reserve(j-i, c.proto, false)
		c.mute(first, calls[i:j])
		for range j - i {
			s.opts.Poller.Begin()
		}
		// The run's replies go out together, once the last is in (a
		// lone call's at once).
		left := new(atomic.Int64)
		left.Store(int64(j - i))
		s.callBatch(c, cmd, calls[i:j], func(k int, v any) {
			q.fillQuiet(first+uint64(k), v)
			if left.Add(-1) == 0 {
				q.write()
			}
			s.opts.Poller.End()
			s.drain.busy.Add(-1)
		})
		i = j
	}
	if len(calls) > 1 && !forwarded && q.waiting() {
		c.waits()
		// A pipeline's replies go out in one write from this goroutine,
		// the client's own: left to the goroutine that decided a batch,
		// the writes to every client of that batch would queue up on it
		// (a lone call's reply is still written by whoever decides it).
		q.waitFilled()
	}
	if c.looped {
		q.releaseAsync() // its goroutine never waits on a write: the loop may be waiting for it (await)
	} else {
		q.release()
	}
	if c.quit {
		q.waitWritten()
		conn.Close()
	}
}

// loopOwns reports whether the loop runs one of rlproxy's own commands
// itself: the handshake real clients send, whose handlers never wait.
func (s *Server) loopOwns(c *client, args []string) bool {
	cmd := s.table.Lookup(args[0])
	if cmd == nil {
		return false
	}
	switch cmd.Name {
	case "AUTH", "PING", "ECHO":
		return true
	case "HELLO":
		// It asks the backend's version the first time, when the client
		// may reach Redis (after its AUTH argument, if any): a wait for a
		// reply only the loop itself would read.
		return s.backendVersion.Load() != nil || len(args) <= 2 && s.forwardable(c, []string{"INFO"}) != nil
	case "CLIENT":
		if len(args) < 2 {
			return false
		}
		sub := cmd.SubCommand(args[1])
		return sub != nil && (sub.Name == "SETNAME" || sub.Name == "GETNAME" || sub.Name == "ID" || sub.Name == "SETINFO")
	}
	return false
}

// argStrings appends a pipeline's arguments to calls as strings, all in
// one new array (forwarded commands keep theirs after the call, for
// cluster redirections). The strings are views of redcon's bytes, not
// copies: reading from a connection, redcon gives each command a copy
// of its own (Command.Raw, which Args slice) and never writes it again
// (TestArgStringsOutliveTheReadBuffer fails on a redcon that would), and
// nothing in rlproxy writes an argument's bytes.
func argStrings(calls [][]string, cmds []redcon.Command) [][]string {
	n := 0
	for _, cmd := range cmds {
		n += len(cmd.Args)
	}
	all := make([]string, n)
	for _, cmd := range cmds {
		args := all[:len(cmd.Args):len(cmd.Args)]
		all = all[len(cmd.Args):]
		for j, a := range cmd.Args {
			args[j] = unsafe.String(unsafe.SliceData(a), len(a))
		}
		calls = append(calls, args)
	}
	return calls
}

// batchable returns the command of a call that goes through its Batch
// handler: a known command that has one, from an authenticated client,
// with the right arity. Anything else takes the ordinary path (call) and
// its error.
func (s *Server) batchable(c *client, args []string) *commands.Command {
	cmd := s.table.Lookup(args[0])
	if cmd == nil || cmd.Batch == nil || !c.authed || !cmd.ArityOK(len(args)) || s.permit(c, cmd, nil, args) != nil ||
		c.inSession(Session.InMulti) {
		return nil
	}
	return cmd
}

// callBatch starts calls of a command through its Batch handler; each
// reply comes through reply(i, v), exactly once per call. A handler that
// panics does not take the process down: the calls it has not answered
// get an error, and one it answered is not answered twice.
func (s *Server) callBatch(c *client, cmd *commands.Command, calls [][]string, reply func(i int, v any)) {
	s.stats.commands.Add(int64(len(calls)))
	var mu sync.Mutex
	answered := make([]bool, len(calls))
	once := func(i int, v any) {
		mu.Lock()
		first := !answered[i]
		answered[i] = true
		mu.Unlock()
		if first {
			reply(i, v)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err := s.recovered(calls[0][0], p)
			for i := range calls {
				once(i, err)
			}
		}
	}()
	cmd.Batch(c.ctx, c, calls, once)
}

// recovered logs a panic of command's handler and returns the error its
// caller gets instead of a reply.
func (s *Server) recovered(command string, p any) error {
	s.stats.panics.Add(1)
	s.opts.Log.Error("recovered from a panic in a command handler",
		"command", command, "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("internal error while running %s", oneline.Quote(command))
}

// call dispatches one command through the table, recovering from panics.
func (s *Server) call(c *client, args []string) (reply any) {
	s.stats.commands.Add(1)
	defer func() {
		if p := recover(); p != nil {
			reply = s.recovered(args[0], p)
		}
	}()
	cmd := s.table.Lookup(args[0])
	if cmd == nil {
		return unknownCommand(args)
	}
	if !c.authed && !noAuthNeeded[cmd.Name] {
		return errNoAuth
	}
	if !s.own[cmd.Name] && c.inSession(Session.InMulti) {
		s.session(c).Abort() // EXEC answers EXECABORT, as Redis after a refused command
		return fmt.Errorf("%s is not allowed inside MULTI", strings.ToUpper(args[0]))
	}
	if cmd.Name == "COMMAND" { // with the gateway: the backend's commands and rlproxy's
		if v, ok := s.gatewayCommand(c, args); ok {
			return v
		}
	}
	if !cmd.ArityOK(len(args)) {
		return commands.ArityError(args[0])
	}
	var sub *commands.Command
	if len(cmd.Sub) > 0 && (len(args) > 1 || cmd.Handler == nil) {
		if sub = cmd.SubCommand(args[1]); sub == nil {
			return fmt.Errorf("unknown subcommand %s. Try %s HELP.", oneline.Quote(args[1]), strings.ToUpper(args[0]))
		}
		if !sub.ArityOK(len(args)) {
			return commands.ArityError(strings.ToLower(args[0]) + "|" + strings.ToLower(args[1]))
		}
	}
	if err := s.permit(c, cmd, sub, args); err != nil {
		return err
	}
	if sub != nil {
		cmd = sub
	}
	if cmd.Handler == nil { // a Batch command that could not be batched: its error is its reply
		done := make(chan any, 1)
		cmd.Batch(c.ctx, c, [][]string{args}, func(_ int, v any) { done <- v })
		return <-done
	}
	v, err := cmd.Handler(c.ctx, c, args)
	if err != nil {
		return err
	}
	return v
}

// noAuthNeeded are the commands a client may send before AUTH.
var noAuthNeeded = map[string]bool{"AUTH": true, "HELLO": true, "QUIT": true, "RESET": true}

var errNoAuth = fmt.Errorf("NOAUTH Authentication required.")

// unknownCommand words the error like Redis does.
func unknownCommand(args []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown command %s, with args beginning with: ", oneline.Quote(args[0]))
	for _, a := range args[1:] {
		if b.Len() > 256 {
			break
		}
		fmt.Fprintf(&b, "%s ", oneline.Quote(a))
	}
	return fmt.Errorf("%s", b.String())
}
