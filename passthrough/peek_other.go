//go:build !unix

package passthrough

import "syscall"

// canPeek: without a non-blocking peek, every connection keeps a reader.
const canPeek = false

func peerClosed(syscall.RawConn) bool { return false }
