package busypoll

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection; the first is
// wrapped by p.
func pair(t *testing.T, p *Poller, maxInProgress int64) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return p.Wrap(c, maxInProgress), peer
}

func needPoller(t *testing.T, budget time.Duration) *Poller {
	t.Helper()
	p := New(budget)
	if p == nil {
		t.Skip("busy polling needs GOMAXPROCS >= 2")
	}
	return p
}

func readString(t *testing.T, c net.Conn) string {
	t.Helper()
	b := make([]byte, 64)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestReadCatchesDataWhilePolling(t *testing.T) {
	p := needPoller(t, time.Second) // long enough that the data surely comes first
	c, peer := pair(t, p, 0)
	go func() {
		time.Sleep(time.Millisecond)
		peer.Write([]byte("+PONG\r\n"))
	}()
	if got := readString(t, c); got != "+PONG\r\n" {
		t.Fatalf("read %q", got)
	}
	if polled, caught := p.Stats(); polled != 1 || caught != 1 {
		t.Fatalf("stats: polled %d caught %d, want 1 1", polled, caught)
	}
	if p.polling.Load() {
		t.Fatal("the polling slot was not given back")
	}
}

func TestReadSleepsAfterTheBudgetAndGoesCold(t *testing.T) {
	p := needPoller(t, 100*time.Microsecond)
	c, peer := pair(t, p, 0)
	go func() {
		time.Sleep(50 * time.Millisecond)
		peer.Write([]byte("late"))
	}()
	if got := readString(t, c); got != "late" {
		t.Fatalf("read %q", got)
	}
	if polled, caught := p.Stats(); polled != 1 || caught != 0 {
		t.Fatalf("stats: polled %d caught %d, want 1 0", polled, caught)
	}
	if !c.(*conn).cold {
		t.Fatal("a wait longer than the budget should stop polling")
	}
	// Cold: the next read does not poll; a quick one warms the conn up.
	// A read of data already there can still outlast the 100µs budget
	// when a loaded machine preempts it, so a few tries are allowed; a
	// connection that never warms up fails every one.
	for try := 1; ; try++ {
		peer.Write([]byte("now"))
		time.Sleep(10 * time.Millisecond) // already there when Read starts
		if got := readString(t, c); got != "now" {
			t.Fatalf("read %q", got)
		}
		if polled, _ := p.Stats(); polled != 1 {
			t.Fatalf("a cold connection polled (polled %d)", polled)
		}
		if !c.(*conn).cold {
			break
		}
		if try == 5 {
			t.Fatal("a short wait should resume polling")
		}
	}
}

func TestNoPollingWhileRequestsOverlap(t *testing.T) {
	p := needPoller(t, time.Millisecond)
	c, peer := pair(t, p, 1)
	polls := func() int64 {
		peer.Write([]byte("x"))
		readString(t, c)
		polled, _ := p.Stats()
		return polled
	}
	p.Begin() // the request this (backend) connection serves
	if polls() != 1 {
		t.Fatal("no polling with one request in progress")
	}
	p.Begin() // a second one: above this connection's limit of 1
	if polls() != 1 {
		t.Fatal("polled with two requests in progress")
	}
	p.End()
	if polls() != 1 {
		t.Fatal("polled right after requests overlapped")
	}
	time.Sleep(quietFor*time.Millisecond + 20*time.Millisecond)
	if polls() != 2 {
		t.Fatal("no polling once requests had stopped overlapping for a while")
	}
}

func TestOnePollerAtATime(t *testing.T) {
	p := needPoller(t, time.Second)
	if !p.acquire(0) {
		t.Fatal("could not take the free slot")
	}
	c, peer := pair(t, p, 0)
	peer.Write([]byte("x"))
	readString(t, c)
	if polled, _ := p.Stats(); polled != 0 {
		t.Fatal("a second reader polled while the slot was taken")
	}
}

func TestPollingStopsWhenACallStarts(t *testing.T) {
	p := needPoller(t, time.Hour)
	c, peer := pair(t, p, 0)
	go func() {
		time.Sleep(5 * time.Millisecond)
		p.Begin() // another request: the reader must stop polling
		time.Sleep(20 * time.Millisecond)
		peer.Write([]byte("x"))
	}()
	readString(t, c)
	if polled, caught := p.Stats(); polled != 1 || caught != 0 {
		t.Fatalf("stats: polled %d caught %d, want 1 0 (slept once a call started)", polled, caught)
	}
}

func TestDeadlineAndEOF(t *testing.T) {
	p := needPoller(t, time.Millisecond)
	c, peer := pair(t, p, 0)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Close()
	if _, err := c.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}

func TestOffWithoutBudgetOrSecondCPU(t *testing.T) {
	if New(0) != nil {
		t.Error("a zero budget should turn polling off")
	}
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	if New(time.Millisecond) != nil {
		t.Error("with one CPU a poller would starve everything else")
	}
	var p *Poller
	p.Begin()
	p.End()
	c, peer := pair(t, p, 0)
	if _, ok := c.(*net.TCPConn); !ok {
		t.Errorf("a nil Poller wrapped the connection: %T", c)
	}
	peer.Write([]byte("x"))
	readString(t, c)
}

// An event loop's spinner polls its check while the process is quiet
// and catches what comes within the budget; it does not poll under
// load, and after a wait past the budget it stops until a wait is short.
func TestSpinner(t *testing.T) {
	p := needPoller(t, time.Second)
	s := p.Spinner()
	var came atomic.Bool
	go func() {
		time.Sleep(time.Millisecond)
		came.Store(true)
	}()
	if !s.Spin(came.Load) {
		t.Fatal("the spinner gave up before the event, within a budget of 1s")
	}
	if polled, caught := p.Stats(); polled != 1 || caught != 1 || p.polling.Load() {
		t.Fatalf("stats: polled %d caught %d, slot held %v; want 1 1 false", polled, caught, p.polling.Load())
	}
	p.Begin()
	p.Begin()
	if s.Spin(func() bool { t.Fatal("checked with two requests in progress"); return true }) {
		t.Fatal("spun with two requests in progress")
	}
	p.End()
	p.End()

	p = needPoller(t, 100*time.Microsecond)
	s = p.Spinner()
	if s.Spin(func() bool { return false }) || !s.cold {
		t.Fatal("a wait past the budget should leave the spinner cold")
	}
	time.Sleep(10 * time.Millisecond) // a long wait: it stays cold
	never := func() bool { t.Fatal("a cold spinner checked"); return true }
	if s.Spin(never) || !s.cold {
		t.Fatal("a cold spinner after a long wait should stay cold")
	}
	// A wait under the budget warms it up (a loaded machine may stretch
	// one: a few tries).
	for try := 1; s.cold; try++ {
		if try == 20 {
			t.Fatal("short waits should end the cold")
		}
		s.Spin(never)
	}
	if !s.Spin(func() bool { return true }) {
		t.Fatal("a warm spinner did not catch a ready check")
	}
}
