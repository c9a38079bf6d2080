//go:build unix

package passthrough

import "syscall"

// canPeek: an idle connection's socket can be checked without reading.
const canPeek = true

// peerClosed reports whether the peer closed the socket, or sent what
// nobody asked for, as a non-blocking peek sees it.
func peerClosed(rc syscall.RawConn) bool {
	var b [1]byte
	closed := false
	err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n >= 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
		return true
	})
	return err != nil || closed
}
