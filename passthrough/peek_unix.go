//go:build unix

package passthrough

import "syscall"

// canPeek: an idle connection's socket can be checked without reading.
const canPeek = true

// peeker checks an idle connection's socket without reading it. It is
// made once per connection, its callback bound once: a check allocates
// nothing (it runs before each command at light load). Checks of one
// connection do not overlap (conn.broken holds its mu).
type peeker struct {
	rc     syscall.RawConn
	fn     func(fd uintptr) bool
	b      [1]byte
	closed bool
}

func newPeeker(rc syscall.RawConn) *peeker {
	p := &peeker{rc: rc}
	p.fn = p.peek
	return p
}

func (p *peeker) peek(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	p.closed = n >= 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
	return true
}

// peerClosed reports whether the peer closed the socket, or sent what
// nobody asked for, as a non-blocking peek sees it.
func (p *peeker) peerClosed() bool {
	p.closed = false
	err := p.rc.Read(p.fn)
	return err != nil || p.closed
}
