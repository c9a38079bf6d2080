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
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
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

func checkPassword(want, got string) bool {
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
