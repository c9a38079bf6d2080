package proxy

import (
	"slices"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/server"
)

// frontDoor is the server's part of cfg: who may connect, how, and the
// limits on connections and requests.
func frontDoor(cfg config.Config) server.Options {
	return server.Options{
		Listen:      cfg.Listen,
		RequirePass: cfg.RequirePass,
		Users:       cfg.Users,
		TLS: server.TLSOptions{Listen: cfg.TLSListen, CertFile: cfg.TLSCertFile,
			KeyFile: cfg.TLSKeyFile, ClientCAFile: cfg.TLSClientCAFile},
		Limits: server.Limits{MaxClients: cfg.MaxClients, Timeout: cfg.Timeout,
			MaxRequestBytes: cfg.MaxRequestBytes, MaxNameLength: cfg.MaxNameLength},
	}
}

// frontDoorKeys are the keys Reload applies to the server at once.
var frontDoorKeys = []string{
	"require_pass", "users", "tls_cert_file", "tls_key_file", "tls_client_ca_file",
	"max_clients", "timeout", "max_request_bytes", "max_name_length",
}

// callerKeys are the keys the caller of Reload applies itself (the logger
// is cmd/rlproxy's).
var callerKeys = []string{"log_level"}

// Reload applies cfg (a reloaded config file, already validated) to the
// running proxy. The keys that can change live take effect at once —
// the front door's (users, limits, TLS certificates, which are re-read
// even when their file names did not change), the limiter side's
// (applyLimiterKeys) — and log_level is the caller's to apply. It
// returns the changed keys that need a restart. On an error nothing
// changes.
func (p *Proxy) Reload(cfg config.Config) (needRestart []string, err error) {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	if err := p.server.Reload(frontDoor(cfg)); err != nil {
		return nil, err
	}
	applied := p.applyLimiterKeys(p.cfg, cfg)
	for _, key := range config.Changed(p.cfg, cfg) {
		if !slices.Contains(frontDoorKeys, key) && !slices.Contains(callerKeys, key) && !slices.Contains(applied, key) {
			needRestart = append(needRestart, key)
		}
	}
	p.cfg = cfg
	return needRestart, nil
}

// applyLimiterKeys is the hook where the limiter side's live keys
// (deny_cache, max_probes, breaker_cooldown, backend_timeout,
// on_backend_error, max_waiters, ...) are applied on a reload: it applies
// what changed between old and new and returns the keys it applied. It
// applies none yet, so a change of these keys is reported as needing a
// restart.
func (p *Proxy) applyLimiterKeys(old, new config.Config) (applied []string) {
	return nil
}

// TLSAddr is the address of the TLS listener ("" without one).
func (p *Proxy) TLSAddr() string { return p.server.TLSAddr() }
