// Package proxy wires rlproxy together from a Config: backend pool,
// limiters, command table and server. cmd/rlproxy runs it; end-to-end
// tests start it in-process on 127.0.0.1:0.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/rlproxy/rlproxy/lease"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/passthrough"
	"github.com/rlproxy/rlproxy/ratelimit"
	"github.com/rlproxy/rlproxy/server"
)

// Version is rlproxy's version.
const Version = "0.1.0"

// Proxy is a running rlproxy.
type Proxy struct {
	pool     *backend.Pool
	limiters *ratelimit.Limiters
	leases   *lease.Service
	gateway  *passthrough.Gateway // nil without passthrough
	rls      *rlsServer           // nil without rls_listen
	server   *server.Server
	metrics  *metrics
	health   *health
	done     chan error

	readyDelay time.Duration // /readyz is 503 this long before a shutdown closes the listeners

	closeOnce sync.Once

	stopPolicies chan struct{} // closed by closeRest: retryPolicies ends

	reloadMu sync.Mutex
	cfg      config.Config // as started, then as last reloaded
	reloads  *reloadCounts
}

// Start connects the backends and starts serving clients.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger) (*Proxy, error) {
	rules, err := loadRLS(cfg)
	if err != nil {
		return nil, err
	}
	scripts := limiter.NewScripts()
	poller := busypoll.New(cfg.BusyPoll)
	pool, err := backend.Open(ctx, backend.Options{
		Backends: cfg.Backends,
		Cluster:  cfg.Cluster,
		TLS:      backend.TLSFiles{CAFile: cfg.BackendTLSCAFile, CertFile: cfg.BackendTLSCertFile, KeyFile: cfg.BackendTLSKeyFile},
		Timeout:  cfg.BackendTimeout,
		PoolSize: cfg.PoolSize,
		Scripts:  scripts.All(),

		BreakerCooldown: cfg.BreakerCooldown,
		BreakerFailures: cfg.BreakerFailures,
		Poller:          poller,
	}, log)
	if err != nil {
		return nil, err
	}
	limiters := ratelimit.New(pool, scripts, limiterOptions(cfg))
	leases := lease.New(limiters, scripts, lease.Options{KeyPrefix: cfg.KeyPrefix, MaxWaiters: cfg.MaxWaiters})
	var gw *passthrough.Gateway
	if cfg.Passthrough {
		if gw, err = openGateway(cfg, pool, poller); err != nil {
			pool.Close()
			return nil, err
		}
	}
	var srv *server.Server
	reloads := new(reloadCounts)
	stats := append(statTable(limiters, leases, &srv, cfg.BusyPoll, poller), reloadStats(reloads)...)
	if gw != nil {
		stats = append(stats, passthroughStats(gw, &srv)...)
	}
	rs := newRLS(cfg, rules, limiters)
	more := []prometheus.Collector{policyCollector{limiters}}
	if rs != nil {
		stats = append(stats, rlsStats(rs)...)
		more = append(more, rlsCollector{rs})
	}
	o := frontDoor(cfg)
	o.Version, o.Log, o.Poller = Version, log, poller
	if gw != nil {
		o.Forward = forwarder{gw}
		o.ForwardBuffer, o.ForwardStall = cfg.PassthroughClientBuffer, cfg.PassthroughClientStall
		o.Embedded = pool.Embedded()
		o.Loop = cfg.PassthroughLoop
	}
	o.Info = append([]server.InfoSection{{Name: "Backends", Lines: backendInfo(pool.Nodes()), AdminOnly: true}}, infoSections(stats)...)
	co := commandOptions(cfg)
	srv = server.New(o, commands.Limiters(limiters, co), commands.Leases(leases), commands.Policies(limiters, co))
	p := &Proxy{pool: pool, limiters: limiters, leases: leases, server: srv, gateway: gw, rls: rs, cfg: cfg, reloads: reloads, done: make(chan error, 1),
		health: &health{nodes: pool.Nodes(), scripts: scripts.All(), timeout: cfg.BackendTimeout}}
	p.stopPolicies = make(chan struct{})
	// closeAll undoes a start that fails part way.
	closeAll := func() {
		close(p.stopPolicies)
		gw.Close()
		limiters.Close()
		pool.Close()
	}
	// The policies are in force before the listener answers — unless the
	// backends cannot be reached now: then they are applied once they can
	// (a proxy starts without its backends, as it runs without them).
	sets, err := policySets(cfg, co)
	if err != nil {
		closeAll()
		return nil, err
	}
	limiters.OnPoliciesLost(func() { p.policiesLost(log) })
	if err := p.applyPolicies(ctx, sets); err != nil {
		log.Warn("policies not read (or applied) yet: the backends cannot be reached; trying again every second", "err", err)
		go p.retryPolicies(log)
	}
	if err := srv.Listen(); err != nil {
		closeAll()
		return nil, err
	}
	if cfg.MetricsListen != "" {
		p.readyDelay = cfg.ShutdownReadyDelay
		if p.metrics, err = startMetrics(cfg.MetricsListen, pool, stats, p.health, more...); err != nil {
			srv.Close()
			closeAll()
			return nil, fmt.Errorf("metrics_listen %s: %w", cfg.MetricsListen, err)
		}
	}
	if rs != nil {
		if err := rs.serve(ctx, cfg, srv, log); err != nil {
			p.metrics.close()
			srv.Close()
			closeAll()
			return nil, err
		}
	}
	go func() { p.done <- srv.Serve() }()
	return p, nil
}

// commandOptions is the commands' part of cfg.
func commandOptions(cfg config.Config) commands.Options {
	return commands.Options{
		DefaultShards: cfg.DefaultShards,
		ShardRate:     cfg.ShardRate,
		MaxAutoShards: cfg.MaxAutoShards,
	}
}

// backendErrorPolicy maps on_backend_error to the limiters' policy.
var backendErrorPolicy = map[config.BackendErrorPolicy]ratelimit.Policy{
	config.FailWithError: ratelimit.FailWithError,
	config.FailOpen:      ratelimit.FailOpen,
	config.FailClosed:    ratelimit.FailClosed,
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.server.Addr() }

// MetricsAddr is the address of the Prometheus endpoint ("" when off).
func (p *Proxy) MetricsAddr() string {
	if p.metrics == nil {
		return ""
	}
	return p.metrics.addr()
}

// RLSAddr is the address of Envoy's rate limit service ("" when off).
func (p *Proxy) RLSAddr() string {
	if p.rls == nil {
		return ""
	}
	return p.rls.addr()
}

// Embedded reports whether the proxy runs on the embedded in-memory backend.
func (p *Proxy) Embedded() bool { return p.pool.Embedded() }

// Policies counts the policies (RL.POLICY) in force on this proxy.
func (p *Proxy) Policies() int { return len(p.limiters.Policies()) }

// Done delivers Serve's result once the server stops.
func (p *Proxy) Done() <-chan error { return p.done }

// Close stops serving and closes the backends.
func (p *Proxy) Close() error {
	err := p.server.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed by Shutdown already
	}
	return p.closeRest(err)
}

// Shutdown stops serving gracefully (SIGTERM): /readyz answers 503 at
// once, clients are still served for shutdown_ready_delay (when /readyz
// is served: time for a load balancer to see it and send new clients
// elsewhere), then it stops accepting, answers every waiting client "ERR
// rlproxy is shutting down" after giving its booked permits back, lets
// the requests in flight finish until timeout (counted from the call),
// and closes the connections and the backends.
func (p *Proxy) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p.health.draining.Store(true)
	select {
	case <-time.After(p.readyDelay):
	case <-ctx.Done():
	}
	p.rls.close(ctx)
	err := p.server.Shutdown(ctx)
	return p.closeRest(err)
}

func (p *Proxy) closeRest(err error) error {
	p.closeOnce.Do(func() {
		close(p.stopPolicies)
		p.rls.close(context.Background())
		<-p.done
		p.metrics.close()
		p.limiters.Close()
		p.leases.Close()
		p.gateway.Close()
		p.pool.Close()
	})
	return err
}
