//go:build unix

package passthrough

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
)

// loopReader is what the bufio.Reader of a connection the event loop
// reads reads from: without waiting while the loop serves it
// (errWouldBlock when the socket has nothing), through Go's poller while
// a goroutine reads a reply too big for the buffer.
type loopReader struct {
	nc     net.Conn
	rc     syscall.RawConn
	nowait atomic.Bool
	fn     func(fd uintptr) bool // read's, bound once: a read allocates nothing
	p      []byte
	n      int
	err    error
}

func newLoopReader(nc net.Conn, rc syscall.RawConn) *loopReader {
	r := &loopReader{nc: nc, rc: rc}
	r.fn = r.read
	r.nowait.Store(true)
	return r
}

func (r *loopReader) Read(p []byte) (int, error) {
	if !r.nowait.Load() {
		return r.nc.Read(p)
	}
	r.p = p
	err := r.rc.Read(r.fn) // fn never asks to wait
	r.p = nil
	switch {
	case err != nil:
		return 0, err
	case r.n > 0:
		return r.n, nil
	case r.err == syscall.EAGAIN || r.err == syscall.EINTR:
		return 0, errWouldBlock // the loop calls again when there is more
	case r.err != nil:
		return 0, r.err
	}
	return 0, io.EOF
}

func (r *loopReader) read(fd uintptr) bool {
	r.n, r.err = syscall.Read(int(fd), r.p)
	return true
}

// descriptor returns the socket's descriptor number (for the loop's set).
func descriptor(rc syscall.RawConn) (int, error) {
	fd := -1
	err := rc.Control(func(f uintptr) { fd = int(f) })
	return fd, err
}
