package server

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// failures counts failures of one kind (AUTH, TLS handshakes) and logs
// them, one line a second at most, with how many failed since the last
// line: a client that fails in a loop cannot flood the log.
type failures struct {
	count      atomic.Int64
	mu         sync.Mutex
	lastLog    time.Time
	suppressed int64
}

// add counts one failure and logs msg with attrs at WARN unless a line
// was logged less than a second ago.
func (f *failures) add(log *slog.Logger, msg string, attrs ...any) {
	f.count.Add(1)
	f.mu.Lock()
	now := time.Now()
	if now.Sub(f.lastLog) < time.Second {
		f.suppressed++
		f.mu.Unlock()
		return
	}
	n := f.suppressed
	f.lastLog, f.suppressed = now, 0
	f.mu.Unlock()
	if n > 0 {
		attrs = append(attrs, "more_failures_since_last_line", n)
	}
	log.Warn(msg, attrs...)
}

// tlsHandshakeFailed counts and logs a client's failed TLS handshake
// (no certificate, an untrusted one, plain RESP on the TLS port, a
// connection closed or timed out before the handshake was done).
func (s *Server) tlsHandshakeFailed(addr net.Addr, err error) {
	s.tlsFails.add(s.opts.Log, "TLS handshake failed", "addr", addr.String(), "err", err)
}
