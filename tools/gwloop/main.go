//go:build linux

// Command gwloop is the prototype of the gateway's event loop: a minimal
// forwarder that serves client sockets from one locked OS thread in
// epoll_wait, as twemproxy does, over one shared backend connection. It
// exists to measure what such a loop costs per forwarded command against
// today's goroutine-per-client gateway (tools/bench/gwloop-bench.sh); it
// forwards RESP arrays unchecked and is not the product.
//
// Two backends sides are tried:
//   - loop (default): the backend socket is one more fd of the same epoll:
//     one thread does everything, nothing wakes another thread;
//   - goroutine (-backend-goroutine): the backend connection is a Go
//     net.Conn read by a goroutine that writes the replies straight to the
//     client fds, as the product's backend connections work today.
//
// -raw makes the loop's epoll_wait a raw system call (at most 100 ms, so
// a garbage collection's preemption is never held up for long): the
// thread keeps its P, so the runtime's monitor never sleeps deeply.
package main

import (
	"flag"
	"log"
	"net"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/rlproxy/rlproxy/internal/resp"
	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:6390", "address to serve clients on")
	backend := flag.String("backend", "127.0.0.1:6379", "the Redis to forward to")
	goroutine := flag.Bool("backend-goroutine", false, "read the backend on a goroutine (the product's way) instead of in the loop")
	flag.BoolVar(&raw, "raw", false, "epoll_wait as a raw system call: the loop keeps its P")
	flag.Parse()
	l, err := newLoop(*listen, *backend, *goroutine)
	if err != nil {
		log.Fatal(err)
	}
	l.run()
}

// client is one client socket.
type client struct {
	fd     int
	in     []byte // a request not complete yet
	out    []byte // replies not written yet (the socket was full)
	dirty  bool   // on the loop's list of clients to write
	outOn  bool   // EPOLLOUT is asked for
	closed bool
}

type loop struct {
	ep, lfd int
	clients []*client // by fd
	events  []unix.EpollEvent
	buf     []byte

	mu    sync.Mutex // the goroutine backend: fifo and clients' out
	fifo  []*client  // whose reply comes next, in order
	dirty []*client

	bfd    int      // the in-loop backend socket
	bnc    net.Conn // the goroutine backend
	bout   []byte
	boutOn bool // EPOLLOUT is asked for on bfd
	bin    []byte
}

func newLoop(listen, backend string, goroutine bool) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &loop{ep: ep, events: make([]unix.EpollEvent, 256), buf: make([]byte, 64<<10), bfd: -1}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	if l.lfd, err = dupFd(ln.(*net.TCPListener)); err != nil {
		return nil, err
	}
	ln.Close()
	if err := l.watch(l.lfd, unix.EPOLLIN); err != nil {
		return nil, err
	}
	bc, err := net.Dial("tcp", backend)
	if err != nil {
		return nil, err
	}
	if goroutine {
		l.bnc = bc
		go l.readBackendConn()
		return l, nil
	}
	if l.bfd, err = dupFd(bc.(*net.TCPConn)); err != nil {
		return nil, err
	}
	bc.Close()
	return l, l.watch(l.bfd, unix.EPOLLIN)
}

// dupFd takes a non-blocking copy of a Go socket's descriptor, so that
// Go's own poller forgets it once the original is closed.
func dupFd(sc interface {
	SyscallConn() (syscall.RawConn, error)
}) (int, error) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	err = rc.Control(func(f uintptr) {
		fd, derr = unix.Dup(int(f))
	})
	if err == nil {
		err = derr
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	return fd, err
}

func (l *loop) watch(fd int, ev uint32) error {
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: ev, Fd: int32(fd)})
}

func (l *loop) run() {
	runtime.LockOSThread()
	for {
		var n int
		var err error
		if raw {
			n, err = rawEpollWait(l.ep, l.events, 100)
		} else {
			n, err = unix.EpollWait(l.ep, l.events, -1)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range l.events[:n] {
			fd := int(ev.Fd)
			switch {
			case fd == l.lfd:
				l.accept()
			case fd == l.bfd:
				if ev.Events&unix.EPOLLOUT != 0 {
					l.flushBackend()
				}
				if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
					l.readBackend()
				}
			default:
				c := l.clients[fd]
				if c == nil {
					continue
				}
				if ev.Events&unix.EPOLLOUT != 0 {
					l.mu.Lock()
					l.write(c)
					l.mu.Unlock()
				}
				if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
					l.readClient(c)
				}
			}
		}
		l.flushBackend()
		l.mu.Lock()
		l.flushClients()
		l.mu.Unlock()
	}
}

func (l *loop) accept() {
	for {
		fd, _, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		for fd >= len(l.clients) {
			l.clients = append(l.clients, nil)
		}
		c := &client{fd: fd}
		l.mu.Lock()
		l.clients[fd] = c
		l.mu.Unlock()
		if l.watch(fd, unix.EPOLLIN|unix.EPOLLRDHUP) != nil {
			l.close(c)
		}
	}
}

// readClient makes one read (the fd is ready: level-triggered, what is
// left is reported again) and queues every complete command.
func (l *loop) readClient(c *client) {
	n, err := unix.Read(c.fd, l.buf)
	if n <= 0 {
		if err != unix.EAGAIN {
			l.mu.Lock()
			l.close(c)
			l.mu.Unlock()
		}
		return
	}
	b := l.buf[:n]
	if len(c.in) > 0 {
		c.in = append(c.in, b...)
		b = c.in
	}
	l.mu.Lock()
	for {
		f := resp.FrameIn(b, 512<<20)
		if f == 0 {
			break
		}
		l.bout = append(l.bout, b[:f]...)
		l.fifo = append(l.fifo, c)
		b = b[f:]
	}
	l.mu.Unlock()
	c.in = append(c.in[:0], b...)
}

func (l *loop) flushBackend() {
	if len(l.bout) == 0 {
		return
	}
	if l.bnc != nil {
		l.mu.Lock()
		out := l.bout
		l.bout = nil
		l.mu.Unlock()
		if _, err := l.bnc.Write(out); err != nil {
			log.Fatal(err)
		}
		return
	}
	n, err := unix.Write(l.bfd, l.bout)
	if n > 0 {
		l.bout = append(l.bout[:0], l.bout[n:]...)
	}
	if err != nil && err != unix.EAGAIN {
		log.Fatal(err)
	}
	if full := len(l.bout) > 0; full != l.boutOn {
		l.boutOn = full
		ev := uint32(unix.EPOLLIN)
		if full {
			ev |= unix.EPOLLOUT
		}
		_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, l.bfd, &unix.EpollEvent{Events: ev, Fd: int32(l.bfd)})
	}
}

// readBackend reads replies in the loop and queues each on its client.
func (l *loop) readBackend() {
	n, err := unix.Read(l.bfd, l.buf)
	if n <= 0 {
		if err != unix.EAGAIN {
			log.Fatal("backend closed: ", err)
		}
		return
	}
	l.bin = append(l.bin, l.buf[:n]...)
	l.bin = l.bin[l.route(l.bin):]
}

// route hands each complete reply in b to its client; it returns the
// bytes used. Called with mu held or from the loop alone.
func (l *loop) route(b []byte) int {
	used := 0
	for {
		f := resp.FrameIn(b[used:], 512<<20)
		if f == 0 {
			return used
		}
		c := l.fifo[0]
		l.fifo = l.fifo[1:]
		if !c.closed {
			c.out = append(c.out, b[used:used+f]...)
			if !c.dirty {
				c.dirty = true
				l.dirty = append(l.dirty, c)
			}
		}
		used += f
	}
}

// readBackendConn is the goroutine backend: it reads replies and writes
// them to the clients itself.
func (l *loop) readBackendConn() {
	buf := make([]byte, 64<<10)
	var pending []byte
	for {
		n, err := l.bnc.Read(buf)
		if err != nil {
			log.Fatal("backend closed: ", err)
		}
		pending = append(pending, buf[:n]...)
		l.mu.Lock()
		pending = pending[l.route(pending):]
		l.flushClients()
		l.mu.Unlock()
	}
}

// flushClients writes every client with replies waiting. Called with mu.
func (l *loop) flushClients() {
	for _, c := range l.dirty {
		c.dirty = false
		l.write(c)
	}
	l.dirty = l.dirty[:0]
}

// write writes what the socket takes; the rest waits for EPOLLOUT.
// Called with mu.
func (l *loop) write(c *client) {
	if c.closed || len(c.out) == 0 {
		return
	}
	n, err := unix.Write(c.fd, c.out)
	if n > 0 {
		c.out = append(c.out[:0], c.out[n:]...)
	}
	if err != nil && err != unix.EAGAIN {
		l.close(c)
		return
	}
	if full := len(c.out) > 0; full != c.outOn {
		c.outOn = full
		ev := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
		if full {
			ev |= unix.EPOLLOUT
		}
		_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: ev, Fd: int32(c.fd)})
	}
}

// close drops a client; replies still due to it are read and dropped.
// Called with mu.
func (l *loop) close(c *client) {
	if c.closed {
		return
	}
	c.closed = true
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	_ = unix.Close(c.fd)
	l.clients[c.fd] = nil
}

// raw: the loop waits with rawEpollWait.
var raw bool

// rawEpollWait is epoll_wait made as a raw system call: the runtime does
// not take the thread's P meanwhile (see internal/evloop's monitor keeper).
func rawEpollWait(ep int, events []unix.EpollEvent, msec int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
