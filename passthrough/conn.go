package passthrough

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/rlproxy/rlproxy/internal/evloop"
	"github.com/rlproxy/rlproxy/internal/resp"
)

// waiter is a command written to a backend connection, waiting for its
// reply (done takes it). A (P|S)SUBSCRIBE or (P|S)UNSUBSCRIBE is
// answered by one confirmation frame per channel: confirms counts them
// down, and the frames are relayed together as its reply.
type waiter struct {
	s      *Session // whose command it is: flushed after a run of replies
	i      int      // its index in the Forward call that sent it
	reply  Reply    // Forward's reply; nil: nobody waits for it
	c      *conn    // where it was sent first
	cmd    []string // as sent (again, after a MOVED or ASK)
	proto  int
	pinned bool   // sent on the client's pinned connection
	answer []byte // the reply to give in place of the backend's

	confirms  int
	unsubAll  bool // an unsubscribe from all: confirms is set by its first confirmation
	frames    []byte
	early     []byte // pushes that came before its reply: relayed first, as Redis sent them
	redirects int    // MOVED/ASK followed (cluster)
	block     bool   // a blocking command, or a reply being streamed: no reply timeout
	script    bool   // runs a script (EVAL, FCALL, ...)
	streamed  bool   // its reply went in parts (stream.go); done gets the last
}

// conn is one backend connection. Commands are written in order (one
// write for all that queued while the previous write was under way: many
// clients' commands share it) and a reader goroutine hands the replies
// back in the same order. Frames a command did not ask for (Pub/Sub
// messages, RESP3 pushes) go to the owner session's push.
type conn struct {
	nc   net.Conn
	addr string // the node's
	id   int64  // the backend's CLIENT ID (pinned connections; else 0)
	pool string // whose connections it is one of (Tenant.pool)

	mu    sync.Mutex
	out   []byte
	spare []byte
	// Commands with a big argument, before out: that argument is written
	// from the client's request where it lies, never copied (a 100 MB
	// SET costs one copy of its value, not two).
	parts   net.Buffers
	writing bool
	waiters []*waiter
	// The array waiters starts in when it is empty (end hands waiters
	// out once c.err is set, after which nothing is added).
	waiterMem []*waiter
	err       error // once set, the connection is done

	// owner is the session a pinned connection serves (nil on shared
	// ones): it takes the frames no command asked for (Pub/Sub messages,
	// RESP3 pushes) and sees every (un)subscribe confirmation.
	owner atomic.Pointer[Session]
	// subscribed: RESP2 arrays may be Pub/Sub messages (set by the session
	// when it sends a subscribe, cleared when no subscription is left).
	subscribed atomic.Bool

	r *bufio.Reader
	// A lazy connection (a shared one, not under TLS) has no reader while
	// no reply is awaited: the sender that makes it busy reads (reading),
	// inline or on a new goroutine. Whether Redis closed it meanwhile is
	// checked on the socket (peek) before it is used.
	lazy    bool
	peek    *peeker
	reading bool

	// With the event loop on (passthrough_loop), a shared connection is
	// read by the loop (Ready) on the goroutine that reads the clients:
	// under load no goroutine wakes another between a command and its
	// reply. A reply bigger than the read buffer is read by a goroutine,
	// which then gives the connection back (inLoop false meanwhile).
	loop   *evloop.Loop
	lr     *loopReader
	fd     int
	inLoop bool // mu

	// The watchdog's view (its goroutine only): the head waiter it saw
	// last, and when it first saw it there.
	watched   *waiter
	watchedAt time.Time
}

// dialOptions say how to reach the backend and open a connection.
type dialOptions struct {
	addr     string
	username string
	password string
	db       int
	tls      *tls.Config
	timeout  time.Duration
	poller   *busypoll.Poller
	loop     *evloop.Loop // reads a lazy connection (not under TLS) when set
}

// dial connects and prepares a connection for protocol proto: HELLO 3
// for RESP3 clients, AUTH and SELECT as the backend's URL says. A lazy
// one (shared) is read only while replies are awaited.
func dial(ctx context.Context, o dialOptions, proto int, lazy bool) (*conn, error) {
	d := net.Dialer{Timeout: o.timeout}
	nc, err := d.DialContext(ctx, "tcp", o.addr)
	if err != nil {
		return nil, err
	}
	looped := lazy && o.tls == nil && o.loop != nil
	if !looped {
		nc = o.poller.Wrap(nc, 1) // polls for the reply of the one request in progress
	}
	if o.tls != nil {
		tc := tls.Client(nc, o.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	var setup [][]string
	switch {
	case proto == 3 && o.password != "":
		setup = append(setup, []string{"HELLO", "3", "AUTH", userOrDefault(o.username), o.password})
	case proto == 3:
		setup = append(setup, []string{"HELLO", "3"})
	case o.password != "" && o.username != "":
		setup = append(setup, []string{"AUTH", o.username, o.password})
	case o.password != "":
		setup = append(setup, []string{"AUTH", o.password})
	}
	if o.db != 0 {
		setup = append(setup, []string{"SELECT", strconv.Itoa(o.db)})
	}
	if !lazy { // pinned: CLIENT UNBLOCK of its client needs its id
		setup = append(setup, []string{"CLIENT", "ID"})
	}
	var id int64
	r := bufio.NewReaderSize(nc, 32<<10)
	if len(setup) > 0 {
		var b []byte
		for _, cmd := range setup {
			b = resp.AppendCommand(b, cmd...)
		}
		_ = nc.SetDeadline(time.Now().Add(o.timeout))
		if _, err := nc.Write(b); err != nil {
			nc.Close()
			return nil, err
		}
		for _, cmd := range setup {
			f, err := readFrame(r)
			if cmd[0] == "CLIENT" && err == nil {
				id, _ = strconv.ParseInt(strings.Trim(string(f), ":\r\n"), 10, 64) // 0 if refused
				continue
			}
			if err == nil && len(f) > 0 && f[0] == '-' {
				err = fmt.Errorf("%s: %s", cmd[0], f[1:len(f)-2])
			}
			if err != nil {
				nc.Close()
				return nil, err
			}
		}
		_ = nc.SetDeadline(time.Time{})
	}
	c := &conn{nc: nc, addr: o.addr, r: r, id: id}
	if looped {
		if err := c.readInLoop(o.loop); err != nil {
			nc.Close()
			return nil, err
		}
		return c, nil
	}
	if sc, ok := nc.(syscall.Conn); ok && lazy && canPeek {
		if rc, err := sc.SyscallConn(); err == nil {
			c.peek, c.lazy = newPeeker(rc), true
		}
	}
	if !c.lazy {
		c.reading = true
		go c.read()
	}
	return c, nil
}

func userOrDefault(u string) string {
	if u == "" {
		return "default"
	}
	return u
}

// send writes commands; each reply comes through its waiter. On a broken
// connection every waiter is answered the error at once. On a shared
// connection with commands in flight, send only queues them: the reader
// writes them once the replies it reads run out (writeQueued), with every
// command queued meanwhile, so under load many clients' commands go to
// Redis in one write per round trip, written by a goroutine that is
// awake anyway. inline (the
// caller is the client's own goroutine, at light load) lets the caller
// read the replies itself when nobody reads the connection: one
// goroutine then polls for the reply and, right after, for the client's
// next request, with no wake-up of another goroutine in between.
func (c *conn) send(cmds [][]string, ws []*waiter, inline bool) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		for _, w := range ws {
			w.done(nil, err)
		}
		notifySent(ws)
		return
	}
	queue := c.lazy && c.reading && len(c.waiters) > 0
	for _, cmd := range cmds {
		c.parts, c.out = resp.AppendCommandViews(c.parts, c.out, bigArg, cmd...)
	}
	if len(c.waiters) == 0 {
		// Answered waiters leave from the front: start again at the
		// front of the array rather than append past its end into a new one.
		c.waiters = c.waiterMem[:0]
	}
	c.waiters = append(c.waiters, ws...)
	if len(c.waiters) == len(ws) {
		c.waiterMem = c.waiters[:0]
	}
	if queue {
		c.mu.Unlock()
		notifySent(ws)
		return
	}
	// Nobody reads a lazy connection with no reply awaited: the waiters
	// just added are the first, and whoever added them starts reading
	// (once they are written).
	start := c.lazy && !c.reading
	c.reading = c.reading || start
	if !c.writeOut() {
		notifySent(ws)
		return
	}
	c.mu.Unlock()
	notifySent(ws)
	switch {
	case start && inline:
		c.readInline(len(ws))
	case start:
		go c.read()
	}
}

// notifySent runs the NotifySent functions of the sessions whose
// commands were just sent (usually none: one atomic load a command).
func notifySent(ws []*waiter) {
	for _, w := range ws {
		if w.s != nil && w.s.sent.Load() != nil {
			w.s.notifySent()
		}
	}
}

// bigArg is the size from which an argument is written where it lies
// rather than copied into out.
const bigArg = 64 << 10

// writeOut writes the queued commands, unless another goroutine is
// writing them (mu held; let go while writing). It reports false, with
// mu let go, when the write failed and the connection is done.
func (c *conn) writeOut() bool {
	for (len(c.out) > 0 || c.parts != nil) && !c.writing && c.err == nil {
		c.writing = true
		b, parts := c.out, c.parts
		c.out, c.parts = c.spare[:0], nil
		c.mu.Unlock()
		var err error
		if parts == nil {
			_, err = c.nc.Write(b)
		} else {
			parts = append(parts, b)
			_, err = parts.WriteTo(c.nc)
		}
		c.mu.Lock()
		c.writing = false
		c.spare = b[:0]
		if err != nil {
			c.mu.Unlock()
			c.fail(err)
			return false
		}
	}
	return true
}

// writeQueued writes the commands send queued while others were in
// flight, and reports false when the connection broke.
func (c *conn) writeQueued() bool {
	c.mu.Lock()
	if !c.writeOut() {
		return false
	}
	c.mu.Unlock()
	return true
}

// read hands each frame to the waiter at the head, in order. Replies
// are filled quietly and each client's are written once the frames read
// so far are handed out (flushing), so a pipeline's replies go to the
// client in one write; then the commands queued meanwhile are written.
// On a lazy connection it ends when no reply is awaited.
func (c *conn) read() {
	var got flushing
	for c.readOne(&got) {
		if c.r.Buffered() == 0 {
			got.flush()
			if !c.writeQueued() || (c.lazy && c.stopReading()) {
				return
			}
		}
	}
}

// readInline reads the replies of the n commands just sent to a lazy
// connection nobody was reading (so they are the first), writes the
// commands queued meanwhile, then hands the reading to a goroutine if
// other clients' replies are awaited.
func (c *conn) readInline(n int) {
	var got flushing
	defer got.flush()
	for range n {
		if !c.readOne(&got) {
			return
		}
	}
	got.flush()
	if !c.writeQueued() {
		return
	}
	if c.r.Buffered() > 0 || !c.stopReading() {
		go c.read()
	}
}

// readOne reads a frame and hands it to its waiter, adding the waiter's
// session to got; on a broken connection it fails it (every waiter is
// answered) and reports false.
func (c *conn) readOne(got *flushing) bool {
	if streamed, err := c.stream(got); err != nil || streamed {
		if err != nil {
			got.flush()
			c.fail(err)
		}
		return err == nil
	}
	f, err := nextFrame(c.r) // valid until the next read: deliver's callees copy what they keep
	if err != nil {
		got.flush()
		c.fail(err)
		return false
	}
	s, ok := c.deliver(f)
	if !ok {
		got.flush()
		c.fail(errors.New("a reply nobody asked for"))
		return false
	}
	got.add(s)
	return true
}

// stopReading ends the reading of a lazy connection when no reply is
// awaited, and reports whether it did.
func (c *conn) stopReading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) > 0 || c.err != nil {
		return false
	}
	c.reading = false
	return true
}

// flushing are the sessions that got replies not yet written, in the
// order they got them. The first few are kept in an array (the value
// lives on its reader's stack: no allocation for a run of few sessions).
type flushing struct {
	few  [8]*Session
	n    int
	more []*Session // past the first len(few)
}

func (f *flushing) add(s *Session) {
	if s == nil || slices.Contains(f.few[:f.n], s) || slices.Contains(f.more, s) {
		return
	}
	if f.n < len(f.few) {
		f.few[f.n] = s
		f.n++
		return
	}
	f.more = append(f.more, s)
}

func (f *flushing) flush() {
	for i := range f.n {
		f.few[i].flush()
		f.few[i] = nil
	}
	for i, s := range f.more {
		s.flush()
		f.more[i] = nil
	}
	f.n = 0
	f.more = f.more[:0]
}

// deliver gives a frame to its waiter (and returns the waiter's
// session), or to the owner's push.
func (c *conn) deliver(f []byte) (*Session, bool) {
	if s := c.owner.Load(); s != nil {
		if kind, channel, push, ok := pubsubFrame(f); ok && (push || c.subscribed.Load() || c.confirming()) {
			switch kind {
			case "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe":
				// An unsubscribe from all gets one confirmation per
				// subscription it ends: those confirmed before it.
				subs := s.subscriptions(strings.Replace(kind, "unsubscribe", "subscribe", 1))
				s.confirmed(c, kind, channel)
				c.mu.Lock()
				if len(c.waiters) > 0 && c.waiters[0].unsubAll {
					c.waiters[0].confirms, c.waiters[0].unsubAll = max(subs, 1), false
				}
				if len(c.waiters) > 0 && c.waiters[0].confirms > 0 {
					w := c.waiters[0]
					w.frames = append(w.frames, f...)
					if w.confirms--; w.confirms == 0 {
						c.waiters = c.waiters[1:]
						c.mu.Unlock()
						w.done(w.frames, nil)
						return w.s, true
					}
					c.mu.Unlock()
					return nil, true
				}
				c.mu.Unlock()
				s.push(f) // e.g. a shard channel's slot moved
				return nil, true
			case "message", "pmessage", "smessage", "invalidate":
				c.pushed(s, f)
				return nil, true
			}
			if push {
				c.pushed(s, f)
				return nil, true
			}
		}
	}
	c.mu.Lock()
	if len(c.waiters) == 0 {
		c.mu.Unlock()
		return nil, false
	}
	w := c.waiters[0]
	c.waiters[0] = nil
	c.waiters = c.waiters[1:]
	c.mu.Unlock()
	w.done(f, nil)
	return w.s, true
}

// pushed relays a frame no command asked for (a message, a RESP3 push).
// It goes out before the reply of the command awaited now, where Redis
// put it (a RESP3 client's PUBLISH to its own channel gets the message
// first), unless that command blocks: then at once.
func (c *conn) pushed(s *Session, f []byte) {
	c.mu.Lock()
	if len(c.waiters) > 0 && !c.waiters[0].block && c.waiters[0].reply != nil {
		w := c.waiters[0]
		if w.confirms > 0 {
			w.frames = append(w.frames, f...)
		} else {
			w.early = append(w.early, f...)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	s.push(f)
}

// confirming reports whether the command awaiting the next reply is an
// (un)subscribe: its confirmations are Pub/Sub frames even when no
// subscription is left (UNSUBSCRIBE of channels never subscribed, or of
// several: the first confirmation may leave none).
func (c *conn) confirming() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) > 0 && c.waiters[0].confirms > 0
}

// fail ends the connection: every waiter is answered that it broke.
func (c *conn) fail(err error) {
	c.end(fmt.Errorf("passthrough backend connection broken: %w", err))
}

// end ends the connection: every waiter is answered err.
func (c *conn) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	ws := c.waiters
	c.waiters = nil
	inLoop := c.inLoop
	c.inLoop = false
	c.mu.Unlock()
	if inLoop {
		c.loop.Remove(c.fd) // before its number can be another socket's
	}
	c.nc.Close()
	var got flushing
	for _, w := range ws {
		w.done(nil, c.err)
		got.add(w.s)
	}
	got.flush()
	if s := c.owner.Load(); s != nil {
		s.pinBroken(c, len(ws) > 0)
	}
}

// broken reports whether the connection is done. An idle lazy
// connection that Redis closed (its timeout, CLIENT KILL, a restart) is
// found so here, so that the next command goes on a new one.
func (c *conn) broken() bool {
	c.mu.Lock()
	// Checked with mu held: no command can be sent meanwhile, so any
	// byte there is one nobody asked for.
	idle := !c.reading || c.loop != nil && len(c.waiters) == 0
	gone := c.lazy && idle && c.peek != nil && c.err == nil && c.peek.peerClosed()
	err := c.err
	c.mu.Unlock()
	if gone {
		c.fail(io.EOF)
		return true
	}
	return err != nil
}

// idle reports whether no reply is awaited.
func (c *conn) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) == 0 && c.err == nil
}

func (c *conn) close() { c.fail(errors.New("closed")) }

// overdue reports whether the command at the head has waited for its
// reply for timeout or more, as the watchdog sees it at now: the head
// is timed from the first tick that saw it there, so a command queued
// behind a blocking one is timed from when that one returned. A
// blocking command is never overdue.
func (c *conn) overdue(now time.Time, timeout time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 || c.waiters[0].block || c.err != nil {
		c.watched = nil
		return false
	}
	if w := c.waiters[0]; w != c.watched {
		c.watched, c.watchedAt = w, now
		return false
	}
	return now.Sub(c.watchedAt) >= timeout
}

// scriptAhead reports whether the oldest command awaiting its reply runs
// a script: one sent now would wait until the script ends.
func (c *conn) scriptAhead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) > 0 && c.waiters[0].script
}

// blocked reports whether a blocking command awaits its reply.
func (c *conn) blocked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.waiters, func(w *waiter) bool { return w.block })
}
