// Package server is rlproxy's front end: it accepts Redis-protocol
// connections (tidwall/redcon), keeps each client's state (protocol,
// name, authentication), answers the connection commands real clients
// send (PING, HELLO, AUTH, CLIENT, COMMAND, INFO, ...), and dispatches
// everything else through the command table. A handler's panic is
// answered as an error; it never takes the process down.
//
// Files by concern: server.go the listener and its options; client.go a
// connection's state (accept, close, Watch); dispatch.go how a client's
// commands run (handle, the batch path and the ordinary path, panics);
// connection.go the connection commands; info.go INFO; resp.go reply
// encoding; guard.go the framing check before redcon parses a request.
package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	// Forward, when set, is the gateway (passthrough): it runs every
	// command no table entry owns (forward.go).
	Forward Forwarder
	// Embedded says the gateway's backend is the embedded one: COMMAND
	// stays rlproxy's own (its COMMAND is a fixed Redis 5 table that
	// ignores subcommands, and redis-cli rejects that as COMMAND DOCS),
	// and scripts using a Lua library it lacks are refused (embedded.go).
	Embedded bool
	// ForwardBuffer bounds the bytes of forwarded commands' replies
	// queued for a client that does not read them
	// (passthrough_client_buffer): past it the client is closed. 0: no
	// bound.
	ForwardBuffer int
	// ForwardStall is how long a client may take none of a big forwarded
	// reply streamed to it while it holds ForwardBuffer bytes before it
	// is closed (passthrough_client_stall): the backend connection it shares
	// waits for it meanwhile.
	ForwardStall time.Duration
	// Loop serves the gateway's plain clients from an event loop
	// (passthrough_loop; Linux): see loop_linux.go.
	Loop bool
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
	// AdminOnly sections (backend addresses) are shown to admin users
	// only: like Redis, which gives INFO to users allowed it.
	AdminOnly bool
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
	loop    *clientLoop // nil: every client has a goroutine
	started time.Time
	stats   stats
	initErr error  // of the options given to New
	replID  string // INFO replication's master_replid: random, per process

	backendVersion atomic.Pointer[string] // the gateway backend's redis_version, once known (HELLO)

	// What Reload changes live (reload.go).
	reloadMu    sync.Mutex
	live        atomic.Pointer[Limits]
	access      atomic.Pointer[access]
	tls         atomic.Pointer[tls.Config]
	clientCount atomic.Int64 // open client connections (max_clients)
	fds         fdReserve
	memory      memoryRelease
	authFails   failures
	tlsFails    failures // handshakes

	nextID  atomic.Int64
	mu      sync.Mutex
	clients map[int64]*client

	// Graceful shutdown (shutdown.go).
	drain      drain
	drainOnce  sync.Once
	drainOnce2 sync.Once
}

type stats struct {
	connections  atomic.Int64 // accepted, ever
	commands     atomic.Int64 // processed, ever
	panics       atomic.Int64 // recovered
	rejected     atomic.Int64 // connections refused: max_clients
	acceptErrors atomic.Int64 // accepts failed for want of file descriptors
	bufferClosed atomic.Int64 // clients closed: passthrough_client_buffer
	loopCommands atomic.Int64 // commands the event loop read and ran
	// hand-backs whose command was not on its way to Redis within
	// handBackHold (the loop then served others again)
	loopHoldsExpired atomic.Int64
}

// New builds a server answering the connection commands and the given
// commands (rlproxy's RL.* commands).
func New(o Options, cmds ...[]commands.Command) *Server {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Server{opts: o, started: time.Now(), clients: map[int64]*client{},
		drain: drain{stopping: make(chan struct{}), stopped: make(chan struct{})}}
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
	if err := s.startLoop(); err != nil {
		s.opts.Log.Warn("passthrough_loop: no event loop, clients are served by goroutines", "err", err)
	}
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
	defer s.stopLoop()
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
