//go:build !linux

package evloop

import (
	"errors"
	"net"
)

// Handler is what the loop calls when a socket it serves is readable.
type Handler interface {
	Ready()
}

// Loop is not available here: Start fails and callers keep a goroutine
// per socket.
type Loop struct{}

// Supported reports whether this platform has the loop.
const Supported = false

var errUnsupported = errors.New("evloop: only on Linux")

// Spinner lets the loop poll before it parks.
type Spinner interface {
	Spin(ready func() bool) bool
}

// Start fails: there is no loop on this platform.
func Start(Spinner) (*Loop, error) { return nil, errUnsupported }

func (l *Loop) Add(fd int, h Handler) error { return errUnsupported }
func (l *Loop) Remove(fd int)               {}
func (l *Loop) Done(fd int)                 {}
func (l *Loop) Close()                      {}

// Take fails: there is no loop on this platform.
func Take(c net.Conn) (int, error) { return -1, errUnsupported }

// Give fails: there is no loop on this platform.
func Give(fd int) (net.Conn, error) { return nil, errUnsupported }
