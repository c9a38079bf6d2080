//go:build !unix

package passthrough

import "syscall"

// canPeek: without a non-blocking peek, every connection keeps a reader.
const canPeek = false

type peeker struct{}

func newPeeker(syscall.RawConn) *peeker { return &peeker{} }

func (*peeker) peerClosed() bool { return false }
