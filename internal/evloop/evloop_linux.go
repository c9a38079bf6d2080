//go:build linux

// Package evloop serves many sockets from one goroutine over an epoll
// set, as twemproxy serves them from one thread, instead of a goroutine
// per socket.
//
// A goroutine per client costs, per request, a read that finds nothing
// (Go reads until EAGAIN before it parks), a wake-up of the goroutine
// through the scheduler, and the runtime's monitor; on a virtual machine
// those dominate a forwarded command's CPU. The loop makes one
// level-triggered read per ready socket and calls its owner there.
//
// A client socket is taken out of Go's poller (Take) while the loop
// serves it and given back as a net.Conn (Give) when its owner needs a
// goroutine again. Only the loop's goroutine closes a served descriptor
// (Done), so its number is never reused while the loop may still read
// it. A socket that stays in Go's poller (a backend connection, read
// through its syscall.RawConn) may be served too: its owner removes it
// before closing it.
package evloop

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handler is what the loop calls, on its goroutine, when a socket it
// serves is readable or hung up. It must not block.
type Handler interface {
	Ready()
}

// Asider is a Handler that can be read by a goroutine of its own while
// the loop is held (Hold): a backend connection whose replies the
// holder may be waiting for. Aside is called on the loop's goroutine;
// the handler takes itself out of the loop and comes back (Add) once
// over is closed.
type Asider interface {
	Handler
	Aside(over <-chan struct{})
}

// Spinner lets the loop poll its sockets for a while before it parks
// (package busypoll: at light load, a wake-up costs as much as the round
// trip to Redis). Spin calls ready until it reports true or it gives up.
// Busy, which any goroutine may call, reports whether the process is
// under load (more than one request in progress): the monitor keeper
// (monitor_linux.go) works only then.
type Spinner interface {
	Spin(ready func() bool) bool
	Busy() bool
}

// Loop is one goroutine, an epoll set and the sockets it serves.
type Loop struct {
	spin Spinner // nil: park at once

	ep   int
	file *os.File        // ep, in Go's poller: the goroutine parks there while nothing is ready
	raw  syscall.RawConn // file's
	wake int             // an eventfd: Close wakes the loop with it

	mu       sync.Mutex
	handlers map[int32]Handler
	asiders  map[int32]Asider // the handlers that are Asiders
	closed   bool
}

// Supported reports whether this platform has the loop.
const Supported = true

// Start creates a loop and its goroutine; spin, when not nil, polls
// before the loop parks.
func Start(spin Spinner) (*Loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, err
	}
	// An epoll set is itself pollable: in Go's poller, the loop's
	// goroutine parks until one of its sockets is ready, like any other
	// goroutine waiting on a socket. A thread of its own blocked in
	// epoll_wait instead kept the runtime's monitor awake (it takes the P
	// of a thread blocked in a system call) and cost a thread hand-off
	// per wake-up: twice the context switches per request.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, err
	}
	file := os.NewFile(uintptr(ep), "evloop")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		unix.Close(wake)
		return nil, err
	}
	l := &Loop{spin: spin, ep: ep, file: file, raw: raw, wake: wake, handlers: map[int32]Handler{}, asiders: map[int32]Asider{}}
	if spin != nil { // without one, nothing tells the keeper of load
		keepMonitorAwake(l)
	}
	go l.run()
	return l, nil
}

// Add serves fd (non-blocking, from Take): h.Ready is called while it is
// readable. Any goroutine may call it.
func (l *Loop) Add(fd int, h Handler) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("evloop: closed")
	}
	l.handlers[int32(fd)] = h
	if a, ok := h.(Asider); ok {
		l.asiders[int32(fd)] = a
	}
	err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)})
	if err != nil {
		delete(l.handlers, int32(fd))
		delete(l.asiders, int32(fd))
	}
	return err
}

// Remove stops serving fd and leaves it open (to be given back). Any
// goroutine may call it; a Ready of fd under way may still end after it.
func (l *Loop) Remove(fd int) {
	l.mu.Lock()
	delete(l.handlers, int32(fd))
	delete(l.asiders, int32(fd))
	l.mu.Unlock()
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, fd, nil)
}

// Hold keeps the loop from serving anyone (it is called from a Ready)
// until done is closed or max has passed, and reports whether done was.
// Meanwhile the Asiders are read by goroutines of their own: what the
// holder waits for may depend on a reply one of them brings.
func (l *Loop) Hold(done <-chan struct{}, max time.Duration) bool {
	l.mu.Lock()
	aside := make([]Asider, 0, len(l.asiders))
	for _, a := range l.asiders {
		aside = append(aside, a)
	}
	l.mu.Unlock()
	over := make(chan struct{})
	defer close(over)
	for _, a := range aside {
		a.Aside(over)
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Done stops serving fd and closes it. Only the loop's goroutine may call it.
func (l *Loop) Done(fd int) {
	l.Remove(fd)
	_ = unix.Close(fd)
}

// Close stops the loop; the sockets still served are shut down, and
// their handlers called a last time (they read the end and call Done).
func (l *Loop) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

func (l *Loop) run() {
	var w waiting
	w.events = make([]unix.EpollEvent, 128)
	poll := w.poll // made once: a closure per wait would be an allocation per wake-up
	ready := func() bool { return poll(uintptr(l.ep)) }
	for {
		// What is ready now, without blocking; else (after polling a
		// while, at light load) park in Go's poller until the set is
		// readable (it has a ready socket).
		if l.spin == nil || !l.spin.Spin(ready) {
			if err := l.raw.Read(poll); err != nil {
				w.err = err
			}
		}
		if w.err != nil {
			panic("evloop: epoll_wait: " + w.err.Error()) // only EBADF/EFAULT/EINVAL: a bug
		}
		events := w.events[:w.n]
		for _, ev := range events {
			if int(ev.Fd) == l.wake {
				l.shutdown()
				return
			}
			l.mu.Lock()
			h := l.handlers[ev.Fd]
			l.mu.Unlock()
			if h != nil {
				h.Ready()
			}
		}
	}
}

// waiting is the loop's wait for ready sockets: poll takes what is ready
// without blocking and reports whether there was anything.
type waiting struct {
	events []unix.EpollEvent
	n      int
	err    error
}

func (w *waiting) poll(fd uintptr) bool {
	w.n, w.err = unix.EpollWait(int(fd), w.events, 0)
	if w.err == unix.EINTR {
		w.n, w.err = 0, nil
	}
	return w.n > 0 || w.err != nil
}

// shutdown ends what the loop still serves, and the loop.
func (l *Loop) shutdown() {
	l.mu.Lock()
	left := make(map[int32]Handler, len(l.handlers))
	for fd, h := range l.handlers {
		left[fd] = h
	}
	l.mu.Unlock()
	for fd, h := range left {
		_ = unix.Shutdown(int(fd), unix.SHUT_RDWR)
		h.Ready()
	}
	unix.Close(l.wake)
	l.file.Close()
	forget(l)
}

// Take removes a TCP connection from Go's poller and returns its
// descriptor, non-blocking, for the loop (c is closed).
func Take(c net.Conn) (int, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return -1, errors.New("evloop: not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	tc.Close() // Go's poller forgets the socket; fd keeps it open
	return fd, nil
}

// Give returns a descriptor the loop no longer serves to Go's poller as
// a net.Conn (fd is closed: the connection has its own).
func Give(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	return net.FileConn(f)
}
