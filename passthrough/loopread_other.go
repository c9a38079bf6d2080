//go:build !unix

package passthrough

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
)

// loopReader: there is no event loop here (evloop.Start fails), so no
// connection is read by one.
type loopReader struct {
	nc     net.Conn
	nowait atomic.Bool
}

func newLoopReader(nc net.Conn, _ syscall.RawConn) *loopReader { return &loopReader{nc: nc} }

func (r *loopReader) Read(p []byte) (int, error) { return r.nc.Read(p) }

func descriptor(syscall.RawConn) (int, error) { return -1, errors.New("no event loop here") }
