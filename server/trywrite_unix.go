//go:build unix

package server

import "syscall"

// tryWrite writes what the socket takes at once, without waiting, and
// returns how many bytes (0 on any error: the blocking write that
// follows reports it).
func tryWrite(rc syscall.RawConn, b []byte) int {
	var n int
	err := rc.Write(func(fd uintptr) bool {
		for {
			var werr error
			if n, werr = syscall.Write(int(fd), b); werr != syscall.EINTR {
				return true
			}
		}
	})
	if err != nil || n < 0 {
		return 0
	}
	return n
}
