package server

import (
	"cmp"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/redcon"
)

// client is the state of one connection.
type client struct {
	id      int64
	addr    string
	laddr   string
	created time.Time
	// mu guards what other connections read (CLIENT LIST): the
	// connection's own goroutine writes these under it and reads them
	// without it.
	mu       sync.Mutex
	name     string
	libName  string // CLIENT SETINFO LIB-NAME
	libVer   string // CLIENT SETINFO LIB-VER
	proto    int    // 2 or 3
	lastAt   time.Time
	lastCmd  [2]string // the latest command's first two words, for CLIENT INFO cmd=
	authed   bool
	user     atomic.Pointer[user] // who it runs as; nil before AUTH
	quit     bool
	tracking string           // CLIENT TRACKING: "" (off), "on", "optin" or "optout"
	reply    replyMode        // CLIENT REPLY (clientreply.go)
	replies  *replies         // its replies, in order (replies.go)
	fwd      Session          // passthrough session (forward.go), under mu; nil until used
	fwdFor   Tenant           // whom fwd runs for
	cmds     []redcon.Command // the pipeline being answered, reused
	calls    [][]string       // its arguments, reused
	ctx      context.Context
	cancel   context.CancelFunc
	conn     net.Conn
	looped   bool // its socket was served by the event loop (loop_linux.go)
	// handBack, set when the loop hands the socket back at a command it
	// does not run, lets the loop go on once that command has gone to
	// its backend connection (or was answered here): see loop_linux.go.
	handBack atomic.Pointer[func()]
	// willWait, set by the loop, is called before the client's goroutine
	// waits for something that may take long (an earlier reply): the
	// loop then reads its later requests only once it reads on.
	willWait func()
	stopping <-chan struct{} // closed when the server shuts down (Watch)
}

func (c *client) Name() string { return c.name }

// waits is called before the client's goroutine waits (willWait).
func (c *client) waits() {
	if c.willWait != nil {
		c.willWait()
	}
}

// watchEvery is how often a waiting client's socket is checked.
const watchEvery = 50 * time.Millisecond

// Watch returns a context that ends when the client disconnects (checked
// every watchEvery) or when cancel is called. Handlers that wait use it
// so a gone client stops costing anything.
//
// When the server shuts down, the context ends at once with the cause
// ErrShuttingDown (context.Cause): the waiter gives its booked permits
// back and is answered with that error.
func (c *client) Watch(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.stopping:
				cancel(ErrShuttingDown)
				return
			case <-t.C:
				if peerGone(c.conn) {
					cancel(nil)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
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

		stopping: s.drain.stopping,
	}
	if !s.access.Load().required {
		c.login(everyone)
	}
	var w io.Writer = c.conn
	if g, ok := c.conn.(*guardedConn); ok {
		g.client = c
		w = g.Conn // redcon's own writes (a protocol error) go through g.Write
	}
	c.replies = newReplies(w, s.memory.soon)
	if sc, ok := w.(syscall.Conn); ok { // not under TLS
		c.replies.raw, _ = sc.SyscallConn()
	}
	c.replies.limit, c.replies.stall = s.opts.ForwardBuffer, cmp.Or(s.opts.ForwardStall, 5*time.Second)
	c.replies.over = func() {
		s.stats.bufferClosed.Add(1)
		s.opts.Log.Warn("client closed: passthrough_client_buffer exceeded (it does not read its replies)", "id", c.id, "addr", c.addr, "limit", s.opts.ForwardBuffer)
		c.conn.Close()
	}
	conn.SetContext(c)
	s.stats.connections.Add(1)
	s.mu.Lock()
	s.clients[c.id] = c
	s.mu.Unlock()
	if g, ok := c.conn.(*guardedConn); ok {
		s.loopServe(g)
	}
	return true
}

func (s *Server) closed(conn redcon.Conn, err error) {
	c, _ := conn.Context().(*client)
	if c == nil {
		return
	}
	c.cancel()
	c.endSession()
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
