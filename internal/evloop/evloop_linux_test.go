//go:build linux

package evloop

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// reader is a Handler that reads its socket on each Ready and hands what
// it read (nil at the end: EOF or an error) to got.
type reader struct {
	fd  int
	got chan []byte
}

func (r *reader) Ready() {
	b := make([]byte, 64)
	n, err := unix.Read(r.fd, b)
	switch {
	case err == unix.EAGAIN:
	case n <= 0:
		r.got <- nil
	default:
		r.got <- b[:n]
	}
}

func pair(t *testing.T) (served, peer int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func next(t *testing.T, got chan []byte) []byte {
	t.Helper()
	select {
	case b := <-got:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not call Ready")
		return nil
	}
}

// The loop, parked in Go's poller while nothing is ready, calls Ready for
// each socket that becomes readable, again after it slept; a removed
// socket is no longer served; Close calls the sockets still served a last
// time, shut down, so their owners see the end.
func TestLoopServesReadySockets(t *testing.T) {
	l, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	a, peerA := pair(t)
	b, peerB := pair(t)
	ra, rb := &reader{fd: a, got: make(chan []byte, 8)}, &reader{fd: b, got: make(chan []byte, 8)}
	if err := l.Add(a, ra); err != nil {
		t.Fatal(err)
	}
	if err := l.Add(b, rb); err != nil {
		t.Fatal(err)
	}
	for i, msg := range []string{"one", "two"} {
		if i > 0 {
			time.Sleep(20 * time.Millisecond) // the loop parks meanwhile
		}
		_, _ = unix.Write(peerA, []byte(msg))
		if got := string(next(t, ra.got)); got != msg {
			t.Fatalf("a: read %q, want %q", got, msg)
		}
		_, _ = unix.Write(peerB, []byte(msg))
		if got := string(next(t, rb.got)); got != msg {
			t.Fatalf("b: read %q, want %q", got, msg)
		}
	}

	removed := make(chan struct{})
	l.mu.Lock()
	l.handlers[int32(b)] = readyFunc(func() { // swapped in: Remove is the loop goroutine's
		l.Remove(b)
		close(removed)
	})
	l.mu.Unlock()
	_, _ = unix.Write(peerB, []byte("x"))
	<-removed
	_, _ = unix.Write(peerB, []byte("y"))

	l.Close()
	if got := next(t, ra.got); got != nil {
		t.Fatalf("a after Close: read %q, want the end", got)
	}
	select {
	case got := <-rb.got:
		t.Fatalf("a removed socket was served: %q", got)
	case <-time.After(50 * time.Millisecond):
	}
	unix.Close(b)
}

type readyFunc func()

func (f readyFunc) Ready() { f() }

// aside is an Asider that reports each Aside and when its over closes.
type aside struct {
	reader
	asked chan (<-chan struct{})
}

func (a *aside) Aside(over <-chan struct{}) { a.asked <- over }

// While a Ready holds the loop, the Asiders it serves are asked to read
// aside, and their over closes when the hold ends: at done, or at the
// bound (then Hold reports false). Plain handlers are not asked.
func TestHoldAsksAsiders(t *testing.T) {
	l, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fd, _ := pair(t)
	a := &aside{reader: reader{fd: fd, got: make(chan []byte, 1)}, asked: make(chan (<-chan struct{}), 1)}
	plain, _ := pair(t)
	if err := l.Add(fd, a); err != nil {
		t.Fatal(err)
	}
	if err := l.Add(plain, &reader{fd: plain, got: make(chan []byte, 1)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	if !l.Hold(done, time.Hour) {
		t.Fatal("Hold with done closed reported the bound")
	}
	over := <-a.asked
	select {
	case <-over:
	default:
		t.Fatal("over still open after Hold returned")
	}
	if l.Hold(make(chan struct{}), time.Millisecond) {
		t.Fatal("Hold past its bound reported done")
	}
	<-a.asked
	l.Remove(fd)
	l.Hold(done, time.Hour)
	select {
	case <-a.asked:
		t.Fatal("a removed Asider was asked")
	default:
	}
}
