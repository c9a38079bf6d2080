// Package busypoll reads sockets by polling them for a short while before
// letting the goroutine sleep.
//
// At light load a proxy's request makes two network hops, and at each the
// reading thread parks in the kernel and is woken when the bytes arrive.
// On virtual machines such a wake-up costs tens of microseconds — as much
// as the round trip itself. A reader that polls the socket for the few
// microseconds until the reply lands skips that wake-up. Polling burns CPU,
// so it is kept to where it is free: one reader polls at a time, only while
// the process serves no other request and has served one at a time for a
// while (under load, moments of idleness come and go, and a poller would
// take the CPU the next requests need), only with a second CPU to spare,
// and never for longer than the budget. Between reads the poller yields
// its CPU: the process it waits for (Redis, the client) is often woken on
// that very CPU, and must run at once, not after the budget. A connection whose last
// wait outlasted the budget (an idle client, a distant server) stops
// polling until a wait is short again.
package busypoll

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// Poller shares the polling budget of one process. The zero value and a
// nil *Poller never poll.
type Poller struct {
	budget     time.Duration
	inProgress atomic.Int64 // requests in progress (Begin/End)
	overlapped atomic.Bool  // requests overlapped since a reader last looked
	busyUntil  atomic.Int64 // no polling before this (nanoseconds since start)
	polling    atomic.Bool  // a reader is polling
	polled     atomic.Int64 // reads that polled
	caught     atomic.Int64 // of those, reads whose data came while polling
}

// Stats are counts since start: reads that polled, and how many of them
// found their data while polling (the rest went to sleep after all).
func (p *Poller) Stats() (polled, caught int64) {
	if p == nil {
		return 0, 0
	}
	return p.polled.Load(), p.caught.Load()
}

// New returns a Poller that polls for at most budget per read, or nil
// (never poll) when budget is not positive or Go has a single CPU: then
// a polling reader would hold the only one.
func New(budget time.Duration) *Poller {
	if budget <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	return &Poller{budget: budget}
}

// quietFor is how many budgets polling stays off once requests overlapped.
const quietFor = 100

// start is the origin of busyUntil's clock (monotonic).
var start = time.Now()

// Begin marks a request in progress: from the moment its command is read
// to the moment its reply is written.
func (p *Poller) Begin() {
	// Under load this runs for every request: no clock read here, and the
	// flag is written only when it changes.
	if p != nil && p.inProgress.Add(1) > 1 && !p.overlapped.Load() {
		p.overlapped.Store(true)
	}
}

// Quiet reports whether reads may poll now: requests have come one at
// a time for a while (a nil Poller: never).
func (p *Poller) Quiet() bool {
	return p != nil && p.inProgress.Load() <= 1 && !p.overlapped.Load() &&
		int64(time.Since(start)) >= p.busyUntil.Load()
}

// End marks a request done.
func (p *Poller) End() {
	if p != nil {
		p.inProgress.Add(-1)
	}
}

// Wrap returns c reading with polling when c is a TCP connection (other
// connections are returned as they are). The connection polls only while
// at most maxInProgress requests are in progress: 1 for a backend
// connection (the request it serves), 0 for a client connection.
func (p *Poller) Wrap(c net.Conn, maxInProgress int64) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if p == nil || !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	pc := &conn{TCPConn: tc, p: p, raw: raw, max: maxInProgress}
	pc.pollFn = pc.poll
	return pc
}

type conn struct {
	*net.TCPConn
	p    *Poller
	raw  syscall.RawConn
	max  int64
	cold bool // the last wait outlasted the budget

	// The polling read's state, in the connection rather than captured
	// by a closure: no allocation per read. pollFn is poll, bound once.
	pollFn        func(fd uintptr) bool
	buf           []byte
	begin         time.Time
	n             int
	rerr          error
	slept, caught bool // gave up polling; data came while polling
}

// Read polls for data up to the budget, then waits as net.Conn does.
// Reads of one connection come from one goroutine at a time (as with any
// net.Conn read loop), so cold needs no lock.
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 || (!c.cold && !c.p.acquire(c.max)) {
		return c.TCPConn.Read(b) // under load: not even a clock read
	}
	begin := time.Now()
	if c.cold {
		n, err := c.TCPConn.Read(b)
		if time.Since(begin) < c.p.budget {
			c.cold = false
		}
		return n, err
	}
	c.buf, c.begin, c.n, c.rerr, c.slept, c.caught = b, begin, 0, nil, false, false
	err := c.raw.Read(c.pollFn)
	n, rerr, slept, caught := c.n, c.rerr, c.slept, c.caught
	c.buf, c.rerr = nil, nil // the caller's buffer is not kept
	c.p.polled.Add(1)
	if caught {
		c.p.caught.Add(1)
	}
	if !slept {
		c.p.polling.Store(false)
	} else if time.Since(begin) > c.p.budget {
		c.cold = true
	}
	if err != nil {
		return 0, err // deadline or closed connection, from the runtime poller
	}
	if rerr != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// poll is the polling read's callback (raw.Read): it reads until data
// comes or the budget is spent, then lets the runtime park the reader.
func (c *conn) poll(fd uintptr) bool {
	for i := 0; ; i++ {
		c.n, c.rerr = read(int(fd), c.buf)
		if c.rerr != syscall.EAGAIN {
			c.caught = !c.slept
			return true
		}
		if c.slept {
			return false // woken by the poller but nothing there: wait again
		}
		yield()
		if i%8 == 7 && (time.Since(c.begin) > c.p.budget || c.p.inProgress.Load() > c.max) {
			c.slept = true
			c.p.polling.Store(false)
			return false // let the runtime park us until data arrives
		}
	}
}

// acquire takes the single polling slot if no more than max requests
// are in progress and none overlapped in the last quietFor budgets.
func (p *Poller) acquire(max int64) bool {
	if p.inProgress.Load() > max {
		return false
	}
	now := int64(time.Since(start))
	if p.overlapped.Swap(false) {
		p.busyUntil.Store(now + int64(quietFor*p.budget))
		return false
	}
	return now >= p.busyUntil.Load() && p.polling.CompareAndSwap(false, true)
}

// read is one non-blocking read, retried when a signal interrupts it.
func read(fd int, b []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, b)
		if err != syscall.EINTR {
			if n < 0 {
				n = 0
			}
			return n, err
		}
	}
}

// Spinner polls for an event loop (package evloop) as a connection's
// Read does for its goroutine: before the loop parks, it checks the
// loop's sockets again and again for up to the budget, while the process
// is quiet (at most one request in progress). After a wait that outlasted
// the budget (an idle proxy) it stops until a wait is short again.
// Only the loop's goroutine calls it.
type Spinner struct {
	p          *Poller
	cold       bool
	declinedAt time.Time
}

// Spinner returns the loop's spinner (nil: never polls).
func (p *Poller) Spinner() *Spinner {
	if p == nil {
		return nil
	}
	return &Spinner{p: p}
}

// Busy reports whether more than one request is in progress (the
// loop's monitor keeper works only then). Any goroutine may call it.
func (s *Spinner) Busy() bool { return s != nil && s.p.inProgress.Load() > 1 }

// Spin calls ready (a check that never blocks) until it reports true or
// the budget is spent, and reports whether it did.
func (s *Spinner) Spin(ready func() bool) bool {
	if s == nil || s.p.inProgress.Load() > 1 {
		return false // under load: not even a clock read
	}
	if s.cold {
		// The time since the last decline is about how long the loop
		// then waited: short again, it polls again next time.
		if time.Since(s.declinedAt) < s.p.budget {
			s.cold = false
		}
		s.declinedAt = time.Now()
		return false
	}
	if !s.p.acquire(1) {
		return false
	}
	begin := time.Now()
	defer s.p.polling.Store(false)
	s.p.polled.Add(1)
	for i := 0; ; i++ {
		if ready() {
			s.p.caught.Add(1)
			return true
		}
		yield()
		if i%8 == 7 && (time.Since(begin) > s.p.budget || s.p.inProgress.Load() > 1) {
			s.cold = time.Since(begin) > s.p.budget
			s.declinedAt = time.Now()
			return false
		}
	}
}
