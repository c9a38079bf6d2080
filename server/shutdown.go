package server

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// ErrShuttingDown is what a waiting client (RL.ACQUIRE or RL.LEASE with
// TIMEOUT/BLOCK) is answered when the proxy stops.
var ErrShuttingDown = errors.New("rlproxy is shutting down")

// drain is the state of a graceful shutdown.
type drain struct {
	stopping chan struct{} // closed when Shutdown begins: waiters leave
	stopped  chan struct{} // closed when the connections may be closed
	busy     atomic.Int64  // requests being handled (a reply on its way included)
}

// Shutdown stops the server gracefully: it stops accepting clients, ends
// every wait (the waiter's context ends with cause ErrShuttingDown, so its
// booked permits go back and it is answered with that error), lets the
// requests in flight finish until ctx ends, then closes every connection.
func (s *Server) Shutdown(ctx context.Context) error {
	s.drainOnce.Do(func() { close(s.drain.stopping) })
	// Stop accepting: new connections are refused by the OS. The accept
	// loop, told so, waits for stopped (redcon closes every connection
	// when its loop ends).
	if s.ln != nil {
		s.ln.Close()
	}
	if s.tlsLn != nil {
		s.tlsLn.Close()
	}
	if s.opts.Forward != nil {
		s.opts.Forward.Stop(ErrShuttingDown)
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for quiet := 0; quiet < 3; { // idle on three ticks in a row
		select {
		case <-ctx.Done():
			s.opts.Log.Warn("shutdown timeout: closing connections with requests in flight", "requests", s.drain.busy.Load())
			quiet = 3
		case <-t.C:
			if s.drain.busy.Load() == 0 {
				quiet++
			} else {
				quiet = 0
			}
		}
	}
	s.drainOnce2.Do(func() { close(s.drain.stopped) })
	if err := s.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// draining reports whether Shutdown has begun.
func (s *Server) draining() bool {
	select {
	case <-s.drain.stopping:
		return true
	default:
		return false
	}
}
