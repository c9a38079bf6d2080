//go:build linux

package server

import (
	"io"
	"net"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rlproxy/rlproxy/internal/evloop"
	"golang.org/x/sys/unix"
)

// The event loop (passthrough_loop) reads the sockets of the gateway's
// clients from one goroutine over an epoll set (package evloop): no
// goroutine wakes per request, no read finds nothing. It runs what
// forwards without a state change (GET, SET, ...; on the client's pinned
// connection when it has one: after SELECT, in MULTI, subscribed) and
// the handshake (AUTH, HELLO, CLIENT SETNAME, PING, ECHO), all through
// the same code as the goroutine path (forward, call, the reply queue).
// It also reads the shared backend connections (Gateway.ReadInLoop), so
// that under load a command and its reply cost no goroutine's wake-up.
// A command it does not run (MULTI, SUBSCRIBE, BLPOP, INFO, RL.SETRATE) goes, with
// the whole commands after it, to the client's goroutine (redcon's,
// which waits in Read), and the loop serves no one else until the first
// is on its way to Redis (feed), nor reads that client again before its
// goroutine is done (await): arrival order holds across clients, as
// Redis's one thread keeps it. Bytes the loop does not parse (an inline
// or malformed command, a request over loopMaxRequest), a command decided
// in batches (RL.ACQUIRE: stopBatch), or a client that does not take its
// replies as fast as they come, give the socket back
// to its goroutine for good, with the bytes the loop read ahead: the
// guard and redcon then judge them as if they had just come.

// loopMaxRequest is the most the loop holds of a request not yet whole;
// a bigger one (a big SET) goes to the goroutine path, which streams
// big arguments (bigarg.go).
const loopMaxRequest = 64 << 10

// handBackHold is the most the loop waits for a command it fed a
// client's goroutine to reach its backend connection (or for that
// goroutine to be done) before it serves other clients again.
const handBackHold = time.Second

// clientLoop is the server's event loop.
type clientLoop struct {
	s      *Server
	loop   *evloop.Loop
	buf    []byte     // the loop's read buffer
	calls  [][]string // run's plain commands, reused
	starts []int      // where each begins in run's bytes
}

func (s *Server) startLoop() error {
	if !s.opts.Loop || s.opts.Forward == nil {
		return nil
	}
	var spin evloop.Spinner // polls at light load, as the goroutine path's reads do
	if sp := s.opts.Poller.Spinner(); sp != nil {
		spin = sp
	}
	l, err := evloop.Start(spin)
	if err != nil {
		return err
	}
	s.loop = &clientLoop{s: s, loop: l, buf: make([]byte, 64<<10)}
	// The shared backend connections' replies too, unless the loop
	// serves no client (timeout set: see take): then the clients'
	// goroutines read them, polling at light load, as without a loop.
	if r, ok := s.opts.Forward.(interface{ ReadInLoop(*evloop.Loop) }); ok && s.limits().Timeout == 0 {
		r.ReadInLoop(l)
	}
	return nil
}

func (s *Server) stopLoop() {
	if s.loop != nil {
		s.loop.loop.Close()
	}
}

// take makes c a socket of the loop, or returns nil (it stays c): under
// TLS, with an idle timeout (the loop keeps no clock), or when the loop
// cannot take it.
func (l *clientLoop) take(c net.Conn) net.Conn {
	if l == nil || l.s.limits().Timeout > 0 {
		return nil
	}
	local, remote := c.LocalAddr(), c.RemoteAddr()
	fd, err := evloop.Take(c)
	if err != nil {
		return nil
	}
	return &loopConn{l: l, fd: fd, local: local, remote: remote, fed: make(chan []byte, 1), back: make(chan []byte, 1)}
}

// loopServe starts serving a client whose socket the loop took, once its
// state exists (accept).
func (s *Server) loopServe(g *guardedConn) {
	lc, ok := g.Conn.(*loopConn)
	if !ok {
		return
	}
	g.client.looped = true
	g.client.willWait = lc.willWait
	lc.g = g
	lc.mu.Lock()
	err := lc.l.loop.Add(lc.fd, lc)
	lc.armed = err == nil
	lc.mu.Unlock()
	if err != nil {
		lc.giveBack(nil) // to its goroutine at once
	}
}

// loopConn is a client socket the loop serves; after the hand-back, the
// net.Conn it became. The loop reads it (armed) and gives its goroutine
// what it does not run itself (fed); while the goroutine waits for an
// earlier reply the socket leaves the loop's set, and the goroutine arms
// it again when it reads on. Only the one that has it closes the
// descriptor — the loop's goroutine while armed, else Close or Read — so
// its number is not reused under a read; writers (the reply queue)
// write it under mu.
type loopConn struct {
	l             *clientLoop
	g             *guardedConn
	fd            int
	local, remote net.Addr
	fed           chan []byte // whole commands for the goroutine to run
	back          chan []byte // the hand-back: the bytes read ahead; closed: the client left
	pending       []byte      // the loop's: the start of a request not whole yet

	mu      sync.Mutex
	armed   bool          // fd is in the loop's set
	busy    bool          // the goroutine runs what it was fed
	waits   bool          // ... and waits for an earlier reply (willWait)
	idle    chan struct{} // closed when it no longer is busy, or waits
	real    net.Conn      // after the hand-back
	ahead   []byte        // fed, or read ahead by the loop, for Read
	ended   bool          // fd is closed (or became real's)
	closing bool          // Close was called
}

// Ready reads what the socket has (one read: the loop calls again while
// more is there) and runs the whole commands in it.
func (lc *loopConn) Ready() {
	l := lc.l
	if lc.g.client.replies.backedUp() {
		// It does not read its replies: its goroutine reads no more
		// requests until they are written (or it is closed past
		// passthrough_client_buffer), as every client's does.
		lc.giveBack(lc.pending)
		return
	}
	if !lc.await() {
		return // its goroutine arms it again when it reads on
	}
	n, err := unix.Read(lc.fd, l.buf)
	if n <= 0 {
		if err == unix.EAGAIN || err == unix.EINTR {
			return
		}
		lc.end()
		return
	}
	// The calls' arguments are views of b (as of redcon's buffer): a new
	// one for every read.
	b := make([]byte, len(lc.pending)+n)
	copy(b[copy(b, lc.pending):], l.buf[:n])
	lc.pending = nil
	used, why := l.run(lc.g.client, b)
	switch rest := b[used:]; {
	case why == stopCommand:
		lc.feed(rest)
	case why == stopBytes || why == stopBatch || len(rest) > loopMaxRequest:
		lc.giveBack(rest)
	default:
		lc.pending = rest
	}
}

// await holds the other clients while the goroutine runs what it was
// fed (their requests came after this one's): Redis would run this
// client's next request before theirs. When the goroutine waits for an
// earlier reply instead (as a Redis client blocked in BLPOP, its next
// request runs once that is answered), it takes the socket out of the
// loop's set, for the goroutine to arm again, and reports false.
func (lc *loopConn) await() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.busy && !lc.waits {
		idle := make(chan struct{})
		lc.idle = idle
		lc.mu.Unlock()
		if !lc.l.loop.Hold(idle, handBackHold) {
			lc.l.s.stats.loopHoldsExpired.Add(1)
		}
		lc.mu.Lock()
	}
	if lc.busy {
		lc.disarm() // decided under mu: Read arms it again after this
		return false
	}
	return true
}

// willWait is the client's goroutine's, before it waits for an earlier
// reply: the loop need not wait for it.
func (lc *loopConn) willWait() {
	lc.mu.Lock()
	if lc.busy {
		lc.waits = true
		lc.wake()
	}
	lc.mu.Unlock()
}

// wake lets a loop held in await go on (mu held).
func (lc *loopConn) wake() {
	if lc.idle != nil {
		close(lc.idle)
		lc.idle = nil
	}
}

// giveBack gives the socket back to its goroutine for good, with the
// bytes read ahead: the guard and redcon judge them as if they had just
// come.
func (lc *loopConn) giveBack(rest []byte) {
	lc.mu.Lock()
	lc.disarm()
	if !lc.ended { // else Close closed it
		lc.ended = true
		lc.real, lc.ahead = lc.give(rest)
	}
	lc.mu.Unlock()
	lc.back <- nil
}

// give makes the descriptor a net.Conn of Go's poller again (mu held),
// with the bytes read ahead; nil when it is closed.
func (lc *loopConn) give(rest []byte) (net.Conn, []byte) {
	if !lc.closing {
		if nc, err := evloop.Give(lc.fd); err == nil {
			return lc.l.s.opts.Poller.Wrap(nc, 0), rest
		}
	}
	unix.Close(lc.fd)
	return nil, nil
}

// disarm takes the socket out of the loop's set (the loop's goroutine,
// mu held).
func (lc *loopConn) disarm() {
	lc.l.loop.Remove(lc.fd)
	lc.armed = false
}

// feed gives the whole commands at the start of rest (the first is one
// the loop does not run) to the client's goroutine and holds the other
// clients until the first is on its way to Redis: Redis runs commands in the order
// they came (an UNSUBSCRIBE, then another client's PUBLISH), and the
// goroutine would otherwise come after commands the loop reads
// meanwhile. The goroutine says so once that command is written to its
// backend connection, refused, or one of rlproxy's own, or when it
// waits for an earlier reply first (or the client is closed); the bound
// is for a goroutine that does not run, not for a command that waits.
func (lc *loopConn) feed(rest []byte) {
	whole := 0
	for whole < len(rest) {
		_, n, ok := loopCommand(rest[whole:])
		if !ok {
			// Bytes the loop does not parse follow: the goroutine reads
			// on from them, and the socket, itself.
			lc.giveBack(rest)
			return
		}
		if n == 0 {
			break
		}
		whole += n
	}
	lc.pending = rest[whole:] // a part of a command
	lc.mu.Lock()
	lc.busy = true
	lc.mu.Unlock()
	sent := make(chan struct{})
	f := sync.OnceFunc(func() { close(sent) })
	lc.g.client.handBack.Store(&f)
	lc.fed <- rest[:whole]
	if !lc.l.loop.Hold(sent, handBackHold) {
		lc.l.s.stats.loopHoldsExpired.Add(1)
	}
}

// end closes the socket of a client that left (the loop's goroutine).
func (lc *loopConn) end() {
	lc.mu.Lock()
	lc.ended = true
	lc.l.loop.Done(lc.fd)
	lc.mu.Unlock()
	close(lc.back)
}

// stop says why run stopped before the end of what was read.
type stop int

const (
	stopNone    stop = iota // it ran every whole command (the rest is a part of one)
	stopBytes               // bytes the loop does not parse (inline, malformed, a big argument): the guard and redcon judge them
	stopCommand             // a whole command the loop does not run: its goroutine runs it
	// RL.ACQUIRE and the like (a Batch handler): a client that calls them
	// is served by its goroutine from then on, which reads and batches
	// its requests itself, as fast as it did before the loop (handing
	// each to it cost RL.* through the gateway 14-17% of its throughput).
	// Their order with other clients' Redis commands does not matter.
	stopBatch
)

// run runs the whole commands at the start of b and returns how many
// bytes they took, and why it stopped short (the plain commands before
// that are forwarded first).
func (l *clientLoop) run(c *client, b []byte) (used int, why stop) {
	s, q := l.s, c.replies
	s.drain.busy.Add(1)
	defer s.drain.busy.Add(-1)
	q.hold() // the replies of what this read brought go out together
	defer q.releaseAsync()
	for why == stopNone && used < len(b) {
		args, n, whole := loopCommand(b[used:])
		switch {
		case !whole:
			why = stopBytes
		case n == 0:
			return l.sendOr(c, used, stopNone) // the rest comes with a later read
		case !c.authed && !preAuthFits(args):
			why = stopBytes // the guard refuses it
		case s.forwards(c, args) && s.opts.Forward.Stateless(args) && !q.deciding():
			l.calls = append(l.calls, args)
			l.starts = append(l.starts, used)
			used += n
		case s.loopOwns(c, args):
			// As on the goroutine path, it runs once the commands before
			// it are answered: here only when they are at once (the
			// handshake, before any forwarded command).
			if at, w := l.sendOr(c, used, stopNone); w != stopNone || !q.idle() {
				return at, stopCommand
			}
			s.stats.loopCommands.Add(1)
			s.seen(c, args)
			s.opts.Poller.Begin()
			if v := s.call(c, args); !c.muted(args) {
				q.add(v, c.proto)
			}
			s.opts.Poller.End()
			used += n
		case s.batchable(c, args) != nil:
			why = stopBatch
		default:
			why = stopCommand
		}
	}
	return l.sendOr(c, used, why)
}

// sendOr forwards the plain commands run gathered (l.calls, reused: the
// forward keeps each command's arguments, not the list) and returns
// used and why. When one of them must first wait for the client's
// earlier replies on another backend connection (which the loop itself
// reads), those before it are forwarded, and it and the rest go to the
// client's goroutine: sendOr returns where it starts, and stopCommand.
func (l *clientLoop) sendOr(c *client, used int, why stop) (int, stop) {
	if len(l.calls) == 0 {
		return used, why
	}
	fwd := l.s.session(c)
	k := fwd.Sendable(c.proto, l.calls)
	if k < len(l.calls) {
		used, why = l.starts[k], stopCommand
	}
	if k > 0 {
		l.s.stats.loopCommands.Add(int64(k))
		l.s.seen(c, l.calls[k-1])
		fwd.LoopCalls(true)
		l.s.forward(c, l.calls[:k])
		fwd.LoopCalls(false)
	}
	clear(l.calls)
	l.calls, l.starts = l.calls[:0], l.starts[:0]
	return used, why
}

// preAuthFits reports whether a command sent before AUTH is within
// Redis's limits then (10 arguments of 16 KiB); others go to the guard,
// which answers its protocol error.
func preAuthFits(args []string) bool {
	if len(args) > 10 {
		return false
	}
	for _, a := range args {
		if len(a) > 16<<10 {
			return false
		}
	}
	return true
}

// loopCommand parses the RESP command at the start of b into views of
// b. n is its length, 0 when it is not whole yet; whole is false when
// the loop does not take it (inline, empty, malformed, an argument over
// loopMaxRequest): the guard and redcon judge it.
func loopCommand(b []byte) (args []string, n int, whole bool) {
	if len(b) == 0 {
		return nil, 0, true
	}
	if b[0] != '*' {
		return nil, 0, false
	}
	count, i, ok := loopNumber(b, 1)
	if !ok || (i > 0 && (count < 1 || count > maxArgs)) {
		return nil, 0, false
	}
	if i == 0 {
		return nil, 0, true
	}
	args = make([]string, 0, min(count, 16)) // a count is only a claim till its arguments come
	for range count {
		if i >= len(b) {
			return nil, 0, true
		}
		if b[i] != '$' {
			return nil, 0, false
		}
		size, j, ok := loopNumber(b, i+1)
		if !ok || size > loopMaxRequest {
			return nil, 0, false // a big argument: the guard takes it out (bigarg.go)
		}
		if j == 0 || int64(len(b)-j) < size+2 {
			return nil, 0, true
		}
		end := j + int(size)
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0, false
		}
		args = append(args, unsafe.String(unsafe.SliceData(b[j:]), int(size)))
		i = end + 2
	}
	return args, i, true
}

// loopNumber reads the decimal number at b[i:] and its CRLF. next is the
// index after the CRLF, 0 when they are not all there yet; ok is false
// for anything but digits (a sign, a letter, too many digits).
func loopNumber(b []byte, i int) (v int64, next int, ok bool) {
	for start := i; i < len(b); i++ {
		switch c := b[i]; {
		case c >= '0' && c <= '9' && i-start < 12:
			v = v*10 + int64(c-'0')
		case c == '\r' && i > start:
			if i+1 == len(b) {
				return 0, 0, true
			}
			return v, i + 2, b[i+1] == '\n'
		default:
			return 0, 0, false
		}
	}
	return 0, 0, true
}

// Read is the goroutine's (redcon's): it gives what the loop fed it or,
// after the hand-back, the bytes the loop read ahead, then reads the
// socket. Fed commands run, it waits for the next (arming the socket
// again if it left the loop's set while it waited).
func (lc *loopConn) Read(p []byte) (int, error) {
	for {
		lc.mu.Lock()
		if len(lc.ahead) > 0 {
			n := copy(p, lc.ahead)
			lc.ahead = lc.ahead[n:]
			lc.mu.Unlock()
			return n, nil
		}
		if real := lc.real; real != nil {
			lc.mu.Unlock()
			return real.Read(p)
		}
		lc.busy, lc.waits = false, false
		lc.wake()
		if !lc.armed {
			if lc.ended {
				lc.mu.Unlock()
				return 0, net.ErrClosed
			}
			if lc.closing || lc.l.loop.Add(lc.fd, lc) != nil {
				// Closed meanwhile, or the loop stopped: nobody else has it.
				lc.ended = true
				unix.Close(lc.fd)
				lc.mu.Unlock()
				return 0, net.ErrClosed
			}
			lc.armed = true
		}
		lc.mu.Unlock()
		if err := lc.wait(); err != nil {
			return 0, err
		}
	}
}

// wait waits until the loop feeds the goroutine or hands the socket back
// (or the client left).
func (lc *loopConn) wait() error {
	select {
	case b := <-lc.fed:
		lc.mu.Lock()
		lc.ahead = b
		lc.mu.Unlock()
		return nil
	case _, ok := <-lc.back:
		if !ok {
			return io.EOF
		}
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.real == nil {
		return net.ErrClosed
	}
	return nil
}

// Write writes b whole; while the loop serves the socket, it waits for
// room with poll (the reply queue writes from a goroutine of its own
// when the client is slow, and closes it past passthrough_client_buffer).
func (lc *loopConn) Write(b []byte) (int, error) {
	written := 0
	for {
		lc.mu.Lock()
		if real := lc.real; real != nil {
			lc.mu.Unlock()
			n, err := real.Write(b[written:])
			return written + n, err
		}
		if lc.ended || lc.closing {
			lc.mu.Unlock()
			return written, net.ErrClosed
		}
		n, err := unix.Write(lc.fd, b[written:])
		lc.mu.Unlock()
		if n > 0 {
			written += n
		}
		if written == len(b) {
			return written, nil
		}
		switch err {
		case nil, unix.EINTR:
		case unix.EAGAIN:
			// Bounded, so that a Close meanwhile is seen (and a number
			// closed and reused under it costs one needless wake-up).
			_, _ = unix.Poll([]unix.PollFd{{Fd: int32(lc.fd), Events: unix.POLLOUT}}, 100)
		default:
			return written, err
		}
	}
}

// Close shuts the socket down; the loop sees the end and closes it (or,
// handed back, the Read that takes it).
func (lc *loopConn) Close() error {
	if lc.g != nil {
		if f := lc.g.client.handBack.Swap(nil); f != nil {
			(*f)() // it will run no command: the loop need not wait for it
		}
	}
	lc.mu.Lock()
	if real := lc.real; real != nil {
		lc.mu.Unlock()
		return real.Close()
	}
	switch {
	case lc.ended:
	case !lc.armed:
		// Neither the loop nor a Read has it (it was fed, or is being
		// handed back): closed here.
		lc.ended = true
		unix.Close(lc.fd)
	case !lc.closing:
		_ = unix.Shutdown(lc.fd, unix.SHUT_RDWR) // the loop reads the end and closes it
	}
	lc.closing = true
	lc.mu.Unlock()
	return nil
}

func (lc *loopConn) LocalAddr() net.Addr  { return lc.local }
func (lc *loopConn) RemoteAddr() net.Addr { return lc.remote }

// The deadlines hold after the hand-back; the loop serves no client with
// an idle timeout, and lingering after a protocol error happens after it.
func (lc *loopConn) SetDeadline(t time.Time) error { return lc.deadline(net.Conn.SetDeadline, t) }
func (lc *loopConn) SetReadDeadline(t time.Time) error {
	return lc.deadline(net.Conn.SetReadDeadline, t)
}
func (lc *loopConn) SetWriteDeadline(t time.Time) error {
	return lc.deadline(net.Conn.SetWriteDeadline, t)
}

func (lc *loopConn) deadline(set func(net.Conn, time.Time) error, t time.Time) error {
	lc.mu.Lock()
	real := lc.real
	lc.mu.Unlock()
	if real == nil {
		return nil
	}
	return set(real, t)
}

// CloseWrite half-closes (the guard's lingering close).
func (lc *loopConn) CloseWrite() error {
	lc.mu.Lock()
	real := lc.real
	lc.mu.Unlock()
	if cw, ok := real.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return net.ErrClosed
}

// SyscallConn is the reply queue's way to write without waiting
// (tryWrite) and the waiters' way to see a client leave (peerGone).
func (lc *loopConn) SyscallConn() (syscall.RawConn, error) { return loopRaw{lc}, nil }

// loopRaw runs a function on the socket's descriptor, under mu (or on
// the net.Conn's after the hand-back).
type loopRaw struct{ lc *loopConn }

func (r loopRaw) do(f func(fd uintptr), via func(syscall.RawConn) error) error {
	lc := r.lc
	lc.mu.Lock()
	real := lc.real
	if real == nil {
		defer lc.mu.Unlock()
		if lc.ended || lc.closing {
			return net.ErrClosed
		}
		f(uintptr(lc.fd))
		return nil
	}
	lc.mu.Unlock()
	sc, ok := real.(syscall.Conn)
	if !ok {
		return net.ErrClosed
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return via(rc)
}

func (r loopRaw) Control(f func(fd uintptr)) error {
	return r.do(f, func(rc syscall.RawConn) error { return rc.Control(f) })
}
func (r loopRaw) Read(f func(fd uintptr) bool) error {
	return r.do(func(fd uintptr) { f(fd) }, func(rc syscall.RawConn) error { return rc.Read(f) })
}
func (r loopRaw) Write(f func(fd uintptr) bool) error {
	return r.do(func(fd uintptr) { f(fd) }, func(rc syscall.RawConn) error { return rc.Write(f) })
}
