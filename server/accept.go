package server

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// guardListener accepts clients for redcon: it keeps max_clients, backs
// off when the process runs out of file descriptors (redcon's own loop
// would retry at once, spinning a core), and wraps every connection in
// the framing guard (guard.go), after TLS on the TLS listener.
type guardListener struct {
	net.Listener
	s   *Server
	tls *tls.Config // nil: plain
}

// errMaxClients is the line a client past max_clients gets, as Redis's.
const errMaxClients = "-ERR max number of clients reached\r\n"

func (l guardListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if l.s.draining() {
				// Shutdown closed the listener: returning now would make
				// redcon close every connection before the waiting and
				// in-flight requests are answered.
				<-l.s.drain.stopped
				return nil, err
			}
			if !outOfFiles(err) {
				return nil, err
			}
			l.s.fds.outOfFiles(l.s, err)
			if l.s.fds.answerOne(l) {
				continue // a client past the limit got its error; the spare is back
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if n := l.s.clientCount.Add(1); n > int64(l.s.limits().MaxClients) {
			l.s.clientCount.Add(-1)
			l.reject(c)
			continue
		}
		var nc net.Conn
		if l.tls == nil {
			nc = l.s.loop.take(c)
		}
		if nc == nil {
			nc = l.s.opts.Poller.Wrap(c, 0) // polls only while no request is in progress
		}
		if l.tls != nil {
			nc = tls.Server(nc, l.tls)
		}
		return &guardedConn{Conn: nc, srv: l.s}, nil
	}
}

// reject answers a client past max_clients and closes its connection;
// over TLS after the handshake (on its own goroutine, bounded in time).
func (l guardListener) reject(c net.Conn) {
	l.s.stats.rejected.Add(1)
	if l.tls == nil {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(errMaxClients)) // a new socket's buffer is empty: this does not block
		_ = c.Close()
		return
	}
	go func() {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		tc := tls.Server(c, l.tls)
		if err := tc.Handshake(); err != nil {
			l.s.tlsHandshakeFailed(c.RemoteAddr(), err)
		} else {
			_, _ = tc.Write([]byte(errMaxClients))
		}
		_ = tc.Close()
	}()
}

// outOfFiles reports whether an accept failed for want of a file
// descriptor (the process's or the system's) or of kernel memory.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// fdReserve handles running out of file descriptors. It holds one spare
// descriptor: when accept fails, it frees the spare, accepts the waiting
// client with it, answers it "ERR max number of clients reached" and
// takes the spare back — so clients past the limit get an answer instead
// of hanging in the backlog, and the loop makes progress without
// spinning. When even that fails, the accept loop backs off.
type fdReserve struct {
	mu     sync.Mutex
	spare  *os.File
	logged time.Time
}

// open takes the spare descriptor (if not held) and reports whether it
// is held.
func (r *fdReserve) open() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spare == nil {
		r.spare, _ = os.Open(os.DevNull) // nil when even this fails: then only back-off helps
	}
	return r.spare != nil
}

func (r *fdReserve) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spare != nil {
		r.spare.Close()
		r.spare = nil
	}
}

// outOfFiles logs the first failure, then at most one line a minute.
func (r *fdReserve) outOfFiles(s *Server, err error) {
	s.stats.acceptErrors.Add(1)
	r.mu.Lock()
	now := time.Now()
	log := now.Sub(r.logged) > time.Minute
	if log {
		r.logged = now
	}
	r.mu.Unlock()
	if log {
		s.opts.Log.Error("out of file descriptors: new clients are answered 'max number of clients reached' and accepting backs off; raise the open-file limit (ulimit -n) or lower max_clients",
			"err", err, "clients", s.clientCount.Load())
	}
}

// answerOne uses the spare descriptor to answer one waiting client. It
// reports whether it did (and has its spare back).
func (r *fdReserve) answerOne(l guardListener) bool {
	r.mu.Lock()
	if r.spare == nil {
		r.mu.Unlock()
		r.open() // perhaps a descriptor is free again
		return false
	}
	r.spare.Close()
	r.spare = nil
	r.mu.Unlock()
	c, err := l.Listener.Accept()
	if err == nil {
		l.s.stats.rejected.Add(1)
		if l.tls == nil {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte(errMaxClients))
		}
		_ = c.Close()
	}
	return r.open() && err == nil
}
