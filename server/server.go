// Package server is rlproxy's front end: it accepts Redis-protocol
// connections (tidwall/redcon), keeps each client's state (protocol,
// name, authentication), answers the connection commands real clients
// send (PING, HELLO, AUTH, CLIENT, COMMAND, INFO, ...), and dispatches
// everything else through the command table. A handler's panic is
// answered as an error; it never takes the process down.
package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/tidwall/redcon"
)

// Options configure a Server.
type Options struct {
	// Listen is the address to accept clients on (e.g. 127.0.0.1:6380).
	Listen string
	// RequirePass, when set, is the password clients must AUTH with.
	RequirePass string
	// Version is rlproxy's version, shown by INFO.
	Version string
	// Log receives connection errors and recovered panics.
	Log *slog.Logger
	// Info adds sections to INFO (e.g. backends, limiters).
	Info []InfoSection
	// Poller, when set, is told of every request in progress and lets
	// client connections poll for the next request before sleeping (see
	// package busypoll).
	Poller *busypoll.Poller
}

// InfoSection is one "# Name" section of INFO.
type InfoSection struct {
	Name string
	// Lines returns "field:value" lines.
	Lines func() []string
}

// Server serves one listening address.
type Server struct {
	opts    Options
	table   *commands.Table
	srv     *redcon.Server
	ln      net.Listener
	started time.Time
	stats   stats

	nextID  atomic.Int64
	mu      sync.Mutex
	clients map[int64]*client
}

type stats struct {
	connections atomic.Int64 // accepted, ever
	commands    atomic.Int64 // processed, ever
	panics      atomic.Int64 // recovered
}

// New builds a server answering the connection commands and the given
// commands (rlproxy's RL.* commands).
func New(o Options, cmds ...[]commands.Command) *Server {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Server{opts: o, started: time.Now(), clients: map[int64]*client{}}
	s.table = commands.NewTable(append([][]commands.Command{s.connectionCommands()}, cmds...)...)
	s.srv = redcon.NewServerNetwork("tcp", o.Listen, s.handle, s.accept, s.closed)
	return s
}

// Listen binds the listening address (so Addr is known before Serve).
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Listen, err)
	}
	s.ln = ln
	return nil
}

// Addr is the bound address (after Listen).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve accepts clients until Close. Every client's bytes pass a
// framing check (guard.go) before redcon parses them.
func (s *Server) Serve() error { return s.srv.Serve(guardListener{s.ln, s.opts.Poller}) }

// Close stops accepting and closes every client connection. Called
// before Serve, it closes the listener, so a later Serve returns at once.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && s.ln != nil {
		return s.ln.Close() // redcon: "not serving" yet
	}
	return nil
}

// client is the state of one connection.
type client struct {
	id      int64
	addr    string
	laddr   string
	created time.Time
	// mu guards what other connections read (CLIENT LIST): the
	// connection's own goroutine writes these under it and reads them
	// without it.
	mu      sync.Mutex
	name    string
	libName string // CLIENT SETINFO LIB-NAME
	libVer  string // CLIENT SETINFO LIB-VER
	proto   int    // 2 or 3
	lastAt  time.Time
	lastCmd [2]string // the latest command's first two words, for CLIENT INFO cmd=
	authed  bool
	quit    bool
	buf     []byte           // replies of the pipeline being answered
	cmds    []redcon.Command // the pipeline being answered, reused
	calls   [][]string       // its arguments, reused
	pending sync.WaitGroup   // a reply on its way by itself (callAsync)
	ctx     context.Context
	cancel  context.CancelFunc
	conn    net.Conn
}

func (c *client) Name() string { return c.name }

// watchEvery is how often a waiting client's socket is checked.
const watchEvery = 50 * time.Millisecond

// Watch returns a context that ends when the client disconnects (checked
// every watchEvery) or when cancel is called. Handlers that wait use it
// so a gone client stops costing anything.
func (c *client) Watch(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if peerGone(c.conn) {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}

func (s *Server) accept(conn redcon.Conn) bool {
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Now()
	c := &client{
		id:      s.nextID.Add(1),
		addr:    conn.RemoteAddr(),
		laddr:   conn.NetConn().LocalAddr().String(),
		created: now,
		lastAt:  now,
		proto:   2,
		authed:  s.opts.RequirePass == "",
		ctx:     ctx,
		cancel:  cancel,
		conn:    conn.NetConn(),
	}
	if g, ok := c.conn.(*guardedConn); ok {
		g.beforeError = c.pending.Wait // a reply on its way goes first
	}
	conn.SetContext(c)
	s.stats.connections.Add(1)
	s.mu.Lock()
	s.clients[c.id] = c
	s.mu.Unlock()
	return true
}

func (s *Server) closed(conn redcon.Conn, err error) {
	c, _ := conn.Context().(*client)
	if c == nil {
		return
	}
	c.cancel()
	s.mu.Lock()
	delete(s.clients, c.id)
	s.mu.Unlock()
	if err != nil {
		s.opts.Log.Debug("client connection closed", "id", c.id, "addr", c.addr, "err", err)
	}
}

func (s *Server) connectedClients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// handle runs the commands a client sent together (one pipeline, as far
// as it has been read) and writes their replies in order; redcon flushes
// once per pipeline. A command with a Batch handler (RL.ACQUIRE) always
// goes through it (callBatch): a run of neighbouring calls of it at once,
// so they can share backend calls instead of paying one round trip each;
// a lone call as a batch of one whose reply is written by whichever
// goroutine decides it, so the connection goes back to reading at once.
// That spares a sleep and a wake-up per request — most of a request's
// cost beyond its socket I/O when clients do not pipeline. The next
// command of this client waits for that reply to be out (c.pending).
func (s *Server) handle(conn redcon.Conn, cmd redcon.Command) {
	c := conn.Context().(*client)
	c.pending.Wait() // replies go out in order
	s.opts.Poller.Begin()
	c.cmds = append(append(c.cmds[:0], cmd), conn.ReadPipeline()...)
	calls := c.calls[:0]
	for _, cmd := range c.cmds {
		calls = append(calls, argStrings(cmd.Args))
	}
	c.calls = calls
	s.seen(c, calls[len(calls)-1])
	defer func() {
		clear(c.cmds) // no reference into redcon's buffer outlives the call
		clear(c.calls)
	}()
	if len(calls) == 1 {
		if cmd := s.batchable(c, calls[0]); cmd != nil {
			c.pending.Add(1)
			s.callBatch(c, cmd, calls, func(_ int, v any) {
				// c.buf is free: handle waits for this reply before using it.
				c.buf = appendReply(c.buf[:0], v, c.proto)
				// A write error means the client is gone: its reader sees it too.
				c.conn.Write(c.buf) //nolint:errcheck
				s.opts.Poller.End()
				c.pending.Done()
			})
			return // its reply ends the request when it goes out
		}
	}
	defer s.opts.Poller.End()
	c.buf = c.buf[:0]
	for i := 0; i < len(calls) && !c.quit; {
		cmd := s.batchable(c, calls[i])
		if cmd == nil {
			c.buf = appendReply(c.buf, s.call(c, calls[i]), c.proto)
			i++
			continue
		}
		j := i + 1
		for j < len(calls) && s.batchable(c, calls[j]) == cmd {
			j++
		}
		replies := make([]any, j-i)
		var wg sync.WaitGroup
		wg.Add(j - i)
		s.callBatch(c, cmd, calls[i:j], func(k int, v any) { replies[k] = v; wg.Done() })
		wg.Wait()
		for _, reply := range replies {
			c.buf = appendReply(c.buf, reply, c.proto)
		}
		i = j
	}
	conn.WriteRaw(c.buf)
	if c.quit {
		conn.Close()
	}
}

// argStrings copies a command's arguments into strings sharing one
// allocation.
func argStrings(args [][]byte) []string {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	buf := make([]byte, 0, n)
	for _, a := range args {
		buf = append(buf, a...)
	}
	all := string(buf)
	out := make([]string, len(args))
	for i, a := range args {
		out[i], all = all[:len(a)], all[len(a):]
	}
	return out
}

// batchable returns the command of a call that goes through its Batch
// handler: a known command that has one, from an authenticated client,
// with the right arity. Anything else takes the ordinary path (call) and
// its error.
func (s *Server) batchable(c *client, args []string) *commands.Command {
	cmd := s.table.Lookup(args[0])
	if cmd == nil || cmd.Batch == nil || !c.authed || !cmd.ArityOK(len(args)) {
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
	return fmt.Errorf("internal error while running '%s'", quoteArg(command))
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
	if !cmd.ArityOK(len(args)) {
		return commands.ArityError(args[0])
	}
	if len(cmd.Sub) > 0 && (len(args) > 1 || cmd.Handler == nil) {
		sub := cmd.SubCommand(args[1])
		if sub == nil {
			return fmt.Errorf("unknown subcommand '%s'. Try %s HELP.", quoteArg(args[1]), strings.ToUpper(args[0]))
		}
		if !sub.ArityOK(len(args)) {
			return commands.ArityError(strings.ToLower(args[0]) + "|" + strings.ToLower(args[1]))
		}
		cmd = sub
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
	fmt.Fprintf(&b, "unknown command '%s', with args beginning with: ", quoteArg(args[0]))
	for _, a := range args[1:] {
		if b.Len() > 256 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", quoteArg(a))
	}
	return fmt.Errorf("%s", b.String())
}

// quoteArg bounds a user's argument shown in an error.
func quoteArg(s string) string {
	if len(s) > 128 {
		s = s[:128]
	}
	return oneLine(s)
}

func checkPassword(want, got string) bool {
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
