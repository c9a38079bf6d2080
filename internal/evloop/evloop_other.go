//go:build !linux

package evloop

import (
	"errors"
	"net"
	"time"
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

// Spinner lets the loop poll before it parks; Busy reports load.
type Spinner interface {
	Spin(ready func() bool) bool
	Busy() bool
}

// Start fails: there is no loop on this platform.
func Start(Spinner) (*Loop, error) { return nil, errUnsupported }

func (l *Loop) Add(fd int, h Handler) error { return errUnsupported }
func (l *Loop) Remove(fd int)               {}
func (l *Loop) Done(fd int)                 {}
func (l *Loop) Close()                      {}

// Asider is a Handler that can be read aside while the loop is held.
type Asider interface {
	Handler
	Aside(over <-chan struct{})
}

// Hold has no loop to hold here.
func (l *Loop) Hold(done <-chan struct{}, max time.Duration) bool { return false }

// Take fails: there is no loop on this platform.
func Take(c net.Conn) (int, error) { return -1, errUnsupported }

// Give fails: there is no loop on this platform.
func Give(fd int) (net.Conn, error) { return nil, errUnsupported }
