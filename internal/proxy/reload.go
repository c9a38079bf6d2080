package proxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/ratelimit"
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
// is cmd/rlproxy's), and reload_may_drop_auth, which only guards Reload.
var callerKeys = []string{"log_level", "reload_may_drop_auth"}

// Reload applies cfg (a reloaded config file, already validated) to the
// running proxy. The keys that can change live take effect at once —
// the front door's (users, limits, TLS certificates, which are re-read
// even when their file names did not change), the limiter side's
// (applyLimiterKeys) — and log_level is the caller's to apply. It
// returns the changed keys that need a restart. On an error nothing
// changes and the failure is counted (INFO reload_failures).
//
// A cfg that drops authentication the running config has
// (config.DroppedAuth) is refused unless it sets reload_may_drop_auth:
// a reload never opens the front door by accident.
func (p *Proxy) Reload(cfg config.Config) (needRestart []string, err error) {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	if dropped := config.DroppedAuth(p.cfg, cfg); len(dropped) > 0 && !cfg.ReloadMayDropAuth {
		p.reloads.failed.Add(1)
		return nil, fmt.Errorf("config: the new config drops %s: refused, as an empty or half-written file would; "+
			"set reload_may_drop_auth: true in the file if that is meant", strings.Join(dropped, ", "))
	}
	sets, err := policySets(cfg, commandOptions(cfg))
	if err != nil {
		p.reloads.failed.Add(1)
		return nil, err
	}
	rules, err := loadRLS(cfg) // re-read each time: its files may have changed
	if err != nil {
		p.reloads.failed.Add(1)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	policiesChanged := slices.Contains(config.Changed(p.cfg, cfg), "policies")
	if policiesChanged {
		if err := p.policyRoom(ctx, sets, cfg.MaxPolicies); err != nil {
			p.reloads.failed.Add(1)
			return nil, err
		}
	}
	if err := p.server.Reload(frontDoor(cfg)); err != nil {
		p.reloads.failed.Add(1)
		return nil, err
	}
	p.reloads.done.Add(1)
	applied := p.applyLimiterKeys(p.cfg, cfg)
	if policiesChanged {
		if err := p.applyPolicies(ctx, sets); err != nil {
			return nil, err
		}
		applied = append(applied, "policies")
	}
	if p.rls != nil && rules != nil {
		p.rls.reload(cfg, rules)
		applied = append(applied, "rls_config", "rls_response_headers")
	}
	for _, key := range config.Changed(p.cfg, cfg) {
		if !slices.Contains(frontDoorKeys, key) && !slices.Contains(callerKeys, key) && !slices.Contains(applied, key) {
			needRestart = append(needRestart, key)
		}
	}
	p.cfg = cfg
	return needRestart, nil
}

// limiterOptions is the limiters' part of cfg.
func limiterOptions(cfg config.Config) ratelimit.Options {
	return ratelimit.Options{
		KeyPrefix:      cfg.KeyPrefix,
		NativeCellKeys: cfg.Passthrough,
		MaxProbes:      cfg.MaxProbes,
		OnBackendError: backendErrorPolicy[cfg.OnBackendError],
		DenyCache:      cfg.DenyCache,
		DenyCacheSize:  cfg.DenyCacheSize,
		MaxWaiters:     cfg.MaxWaiters,
		MaxPolicies:    cfg.MaxPolicies,
		Backstop:       cfg.ChangeBackstop,
	}
}

// limiterKeys are the keys Reload applies to the limiter side at once.
// (backend_timeout is not among them: go-redis fixes a client's socket
// timeouts when it is made, so a longer one would not take effect.)
var limiterKeys = []string{
	"deny_cache", "deny_cache_size", "max_probes", "on_backend_error",
	"max_waiters", "breaker_cooldown", "breaker_failures", "max_policies",
}

// applyLimiterKeys applies the limiter side's live keys that changed
// between old and new — to the limiters, the leases and the backend
// pool — and returns them. A request that starts afterwards runs under
// the new values.
func (p *Proxy) applyLimiterKeys(old, new config.Config) (applied []string) {
	changed := config.Changed(old, new)
	for _, key := range limiterKeys {
		if slices.Contains(changed, key) {
			applied = append(applied, key)
		}
	}
	if len(applied) == 0 {
		return nil
	}
	p.limiters.SetOptions(limiterOptions(new))
	p.leases.SetMaxWaiters(new.MaxWaiters)
	p.pool.SetBreaker(new.BreakerFailures, new.BreakerCooldown)
	return applied
}

// TLSAddr is the address of the TLS listener ("" without one).
func (p *Proxy) TLSAddr() string { return p.server.TLSAddr() }

// ReloadFailed counts a reload that failed before Reload: its file did
// not load or validate.
func (p *Proxy) ReloadFailed() { p.reloads.failed.Add(1) }

// reloadCounts count SIGHUP reloads, for INFO and /metrics.
type reloadCounts struct {
	done, failed atomic.Int64
}

// reloadStats are reloadCounts' rows of the stats table.
func reloadStats(r *reloadCounts) []stat {
	return []stat{
		{"Reload", "reloads", "reloads_total", "Config reloads (SIGHUP) applied.", false, r.done.Load},
		{"Reload", "reload_failures", "reload_failures_total", "Config reloads (SIGHUP) refused or failed; the running config stayed.", false, r.failed.Load},
	}
}
