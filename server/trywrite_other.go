//go:build !unix

package server

import "syscall"

// tryWrite cannot write without waiting on this platform: the reply
// queue's own goroutine writes.
func tryWrite(syscall.RawConn, []byte) int { return 0 }
