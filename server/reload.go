package server

import (
	"crypto/tls"
)

// Reload applies what can change while clients are connected: the
// limits, require_pass and users, and the TLS files (re-read even when
// their names did not change: certificates are renewed in place). The
// listening addresses stay as they are. On an error nothing changes.
//
// A client authenticated as a user that no longer exists is
// disconnected; one whose user changed gets the new rights at once.
func (s *Server) Reload(o Options) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.apply(o)
}

// apply is Reload, and New's setting of the same options.
func (s *Server) apply(o Options) error {
	lim := o.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	a, err := newAccess(o.RequirePass, o.Users)
	if err != nil {
		return err
	}
	var tlsCfg *tls.Config
	// Without a TLS listener in o (dropped on purpose: it closes at the
	// next restart), the listener keeps the certificates it has.
	if s.opts.TLS.Listen != "" && o.TLS.Listen != "" {
		files := o.TLS
		files.Listen = s.opts.TLS.Listen
		if tlsCfg, err = loadTLS(files); err != nil {
			return err
		}
		s.opts.TLS = files
	}
	s.opts.RequirePass, s.opts.Users, s.opts.Limits = o.RequirePass, o.Users, lim
	s.live.Store(&lim)
	s.access.Store(a)
	if tlsCfg != nil {
		s.tls.Store(tlsCfg)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		u := c.user.Load()
		if u == nil || u == everyone {
			continue // not authenticated yet; or connected when no one had to
		}
		if nu := a.users[u.name]; nu != nil {
			c.user.Store(nu)
		} else {
			c.conn.Close() // its user is gone
		}
	}
	return nil
}

// limits are the limits in force.
func (s *Server) limits() *Limits { return s.live.Load() }

// bigReply is the size from which a client's reply buffer is dropped
// once written, rather than kept for the rest of the connection's life.
const bigReply = 64 * 1024
