package server

import (
	"errors"
	"net"
	"syscall"
)

// peerGone reports whether the client closed its side of conn, without
// consuming any byte it may have sent (MSG_PEEK): a pipelined command
// waiting to be read is not a disconnect.
func peerGone(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false // not a socket: cannot tell
	}
	gone := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0 // orderly shutdown by the peer
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			gone = false // still connected, nothing to read
		default:
			gone = true // reset or otherwise broken
		}
		return true
	})
	return gone || err != nil
}
