// Package server is rlproxy's front end: it accepts Redis-protocol
// connections (tidwall/redcon), keeps each client's state (protocol,
// name, authentication), answers the connection commands real clients
// send (PING, HELLO, AUTH, CLIENT, COMMAND, INFO, ...), and dispatches
// everything else through the command table. A handler's panic is
// answered as an error; it never takes the process down.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/tidwall/redcon"
)

// Options configure a Server.
type Options struct {
	// Listen is the address to accept clients on (e.g. 127.0.0.1:6380).
	Listen string
	// RequirePass, when set, is the password of the "default" user
	// (admin), which clients send with AUTH.
	RequirePass string
	// Users are the named users (users.go). With any user or RequirePass
	// set, clients must authenticate.
	Users []config.User
	// TLS configures the listener for clients over TLS (none when its
	// Listen is empty).
	TLS TLSOptions
	// Limits bound connections and requests (DefaultLimits when zero).
	Limits Limits
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
	own     map[string]bool // the server's own commands (connection, introspection)
	srv     *redcon.Server
	ln      net.Listener
	tlsSrv  *redcon.Server // nil without TLS
	tlsLn   net.Listener
	started time.Time
	stats   stats
	initErr error  // of the options given to New
	replID  string // INFO replication's master_replid: random, per process

	// What Reload changes live (reload.go).
	reloadMu    sync.Mutex
	live        atomic.Pointer[Limits]
	access      atomic.Pointer[access]
	tls         atomic.Pointer[tls.Config]
	clientCount atomic.Int64 // open client connections (max_clients)
	fds         fdReserve
	memory      memoryRelease
	authFails   authFailures

	nextID  atomic.Int64
	mu      sync.Mutex
	clients map[int64]*client
}

type stats struct {
	connections  atomic.Int64 // accepted, ever
	commands     atomic.Int64 // processed, ever
	panics       atomic.Int64 // recovered
	rejected     atomic.Int64 // connections refused: max_clients
	acceptErrors atomic.Int64 // accepts failed for want of file descriptors
}

// New builds a server answering the connection commands and the given
// commands (rlproxy's RL.* commands).
func New(o Options, cmds ...[]commands.Command) *Server {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Server{opts: o, started: time.Now(), clients: map[int64]*client{}}
	own := append(s.connectionCommands(), s.handshakeCommands()...)
	s.own = map[string]bool{}
	for _, c := range own {
		s.own[c.Name] = true
	}
	s.table = commands.NewTable(append([][]commands.Command{own}, cmds...)...)
	s.initErr = s.apply(o) // reported by Listen
	s.replID = randomID()
	s.srv = redcon.NewServerNetwork("tcp", o.Listen, s.handle, s.accept, s.closed)
	if o.TLS.Listen != "" {
		s.tlsSrv = redcon.NewServerNetwork("tcp", o.TLS.Listen, s.handle, s.accept, s.closed)
	}
	return s
}

// Listen binds the listening addresses (so Addr is known before Serve).
func (s *Server) Listen() error {
	if s.initErr != nil {
		return s.initErr
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Listen, err)
	}
	s.ln = ln
	if s.tlsSrv != nil {
		if s.tlsLn, err = net.Listen("tcp", s.opts.TLS.Listen); err != nil {
			ln.Close()
			return fmt.Errorf("tls_listen on %s: %w", s.opts.TLS.Listen, err)
		}
	}
	s.fds.open()
	return nil
}

// Addr is the bound address (after Listen).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// TLSAddr is the bound address of the TLS listener ("" without TLS).
func (s *Server) TLSAddr() string {
	if s.tlsLn == nil {
		return ""
	}
	return s.tlsLn.Addr().String()
}

// Serve accepts clients until Close. Every client's bytes pass a
// framing check (guard.go) before redcon parses them.
func (s *Server) Serve() error {
	if s.tlsSrv == nil {
		return s.srv.Serve(guardListener{Listener: s.ln, s: s})
	}
	tlsDone := make(chan error, 1)
	go func() { tlsDone <- s.tlsSrv.Serve(guardListener{Listener: s.tlsLn, s: s, tls: s.listenerTLS()}) }()
	err := s.srv.Serve(guardListener{Listener: s.ln, s: s})
	s.tlsSrv.Close()
	return errors.Join(err, <-tlsDone)
}

// Close stops accepting and closes every client connection. Called
// before Serve, it closes the listeners, so a later Serve returns at once.
func (s *Server) Close() error {
	defer s.fds.close()
	if s.tlsSrv != nil {
		if err := s.tlsSrv.Close(); err != nil && s.tlsLn != nil {
			s.tlsLn.Close()
		}
	}
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
	user    atomic.Pointer[user] // who it runs as; nil before AUTH
	quit    bool
	// inflight counts requests answered by themselves (callAsync): a
	// client waiting for one is not idle (timeout).
	inflight atomic.Int32
	tracking string           // CLIENT TRACKING: "" (off), "on", "optin" or "optout"
	buf      []byte           // replies of the pipeline being answered
	cmds     []redcon.Command // the pipeline being answered, reused
	calls    [][]string       // its arguments, reused
	pending  sync.WaitGroup   // a reply on its way by itself (callAsync)
	ctx      context.Context
	cancel   context.CancelFunc
	conn     net.Conn
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
		ctx:     ctx,
		cancel:  cancel,
		conn:    conn.NetConn(),
	}
	if !s.access.Load().required {
		c.login(everyone)
	}
	if g, ok := c.conn.(*guardedConn); ok {
		g.beforeError = c.pending.Wait // a reply on its way goes first
		g.client = c
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
// once per pipeline. A run of neighbouring calls of a command with a
// Batch handler (RL.ACQUIRE) goes to it at once, so they can share
// backend calls instead of paying one round trip each.
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
	if len(calls) == 1 && s.callAsync(c, calls[0]) {
		return // its reply ends the request when it goes out
	}
	defer s.opts.Poller.End()
	c.buf = c.buf[:0]
	for i := 0; i < len(calls) && !c.quit; {
		j := i + 1
		if batch := s.batchable(c, calls[i]); batch != nil {
			for j < len(calls) && s.batchable(c, calls[j]) != nil && strings.EqualFold(calls[j][0], calls[i][0]) {
				j++
			}
			if j-i > 1 {
				for _, reply := range s.callBatch(c, batch, calls[i:j]) {
					c.buf = appendReply(c.buf, reply, c.proto)
				}
				i = j
				continue
			}
		}
		c.buf = appendReply(c.buf, s.call(c, calls[i]), c.proto)
		i = j
	}
	s.writeReplies(conn, c)
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

// runnable returns the command of a call that may skip the ordinary path
// (batch, async): a known command, from an authenticated client, with the
// right arity. Anything else takes the ordinary path and its error.
func (s *Server) runnable(c *client, args []string) *commands.Command {
	cmd := s.table.Lookup(args[0])
	if cmd == nil || !c.authed || !cmd.ArityOK(len(args)) || s.permit(c, cmd, nil, args) != nil {
		return nil
	}
	return cmd
}

// batchable returns the batch handler of a call that may join a batch.
func (s *Server) batchable(c *client, args []string) commands.BatchHandler {
	if cmd := s.runnable(c, args); cmd != nil {
		return cmd.Batch
	}
	return nil
}

// callAsync starts a lone call of a command with an async handler: the
// reply is written to the socket by whichever goroutine decides it, and
// the connection goes back to reading at once. That spares a sleep and a
// wake-up per request — most of a request's cost beyond its socket I/O
// when clients do not pipeline. The next command of this client waits
// for the reply to be out (handle). It returns false when the call takes
// the ordinary path.
func (s *Server) callAsync(c *client, args []string) (started bool) {
	cmd := s.runnable(c, args)
	if cmd == nil || cmd.Async == nil {
		return false
	}
	var once sync.Once // a handler that panics after replying must not reply twice
	reply := func(v any) {
		once.Do(func() {
			// c.buf is free: handle waits for this reply before using it.
			c.buf = appendReply(c.buf[:0], v, c.proto)
			// A write error means the client is gone: its reader sees it too.
			c.conn.Write(c.buf) //nolint:errcheck
			s.opts.Poller.End()
			c.inflight.Add(-1)
			c.pending.Done()
		})
	}
	c.pending.Add(1)
	c.inflight.Add(1)
	defer func() {
		if p := recover(); p != nil {
			reply(s.recovered(args[0], p))
			started = true
		}
		if started {
			s.stats.commands.Add(1)
		}
	}()
	if !cmd.Async(c.ctx, c, args, reply) {
		c.inflight.Add(-1)
		c.pending.Done()
		return false
	}
	return true
}

// callBatch runs calls through a batch handler, recovering from panics.
func (s *Server) callBatch(c *client, batch commands.BatchHandler, calls [][]string) (replies []any) {
	s.stats.commands.Add(int64(len(calls)))
	defer func() {
		if p := recover(); p != nil {
			err := s.recovered(calls[0][0], p)
			replies = make([]any, len(calls))
			for i := range replies {
				replies[i] = err
			}
		}
	}()
	return batch(c.ctx, c, calls)
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
	var sub *commands.Command
	if len(cmd.Sub) > 0 && (len(args) > 1 || cmd.Handler == nil) {
		if sub = cmd.SubCommand(args[1]); sub == nil {
			return fmt.Errorf("unknown subcommand '%s'. Try %s HELP.", quoteArg(args[1]), strings.ToUpper(args[0]))
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
