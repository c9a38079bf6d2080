package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/ratelimit"
	"github.com/rlproxy/rlproxy/rls"
	"github.com/rlproxy/rlproxy/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// rlsServer is Envoy's rate limit service on rls_listen.
type rlsServer struct {
	svc    *rls.Service
	decide *rls.Limiters
	grpc   *grpc.Server
	ln     net.Listener
	log    *slog.Logger
}

// rlsOptions is the service's part of cfg.
func rlsOptions(cfg config.Config) rls.Options {
	return rls.Options{Headers: cfg.RLSResponseHeaders, MaxNameLength: cfg.MaxNameLength}
}

// loadRLS reads cfg's rate limit configs (nil without rls_listen).
func loadRLS(cfg config.Config) (*rls.Rules, error) {
	if cfg.RLSListen == "" {
		return nil, nil
	}
	return loadRules(cfg.RLSConfig)
}

func loadRules(path string) (*rls.Rules, error) {
	r, err := rls.Load(path)
	if err != nil {
		return nil, fmt.Errorf("rls_config: %w", err)
	}
	return r, nil
}

// CheckRLS is --check-config's look at rls_config (when set): its files
// load, or the first bad one's file, line and reason.
func CheckRLS(cfg config.Config) []string {
	if cfg.RLSConfig == "" {
		return nil
	}
	if _, err := loadRules(cfg.RLSConfig); err != nil {
		return []string{err.Error()}
	}
	return nil
}

// newRLS makes the service (nil without rls_listen); serve starts it.
func newRLS(cfg config.Config, rules *rls.Rules, l *ratelimit.Limiters) *rlsServer {
	if rules == nil {
		return nil
	}
	d := &rls.Limiters{L: l}
	return &rlsServer{svc: rls.New(d, rules, rlsOptions(cfg)), decide: d}
}

// serve makes the rules' limiters and serves the service, over TLS with
// the front door's certificates (reloaded with them) when tls_listen is
// set. The limiters the backends cannot make now are made on first use.
func (r *rlsServer) serve(ctx context.Context, cfg config.Config, srv *server.Server, log *slog.Logger) error {
	r.log = log
	if err := installRules(ctx, r.decide, r.svc.Rules()); err != nil {
		log.Warn("rls: rate limits not made yet; each is made on its first use", "err", err)
	}
	opts := []grpc.ServerOption{grpc.NumStreamWorkers(rlsStreamWorkers)}
	if cfg.TLS() {
		opts = append(opts, grpc.Creds(credentials.NewTLS(grpcTLS(srv.ListenerTLS()))))
	}
	ln, err := net.Listen("tcp", cfg.RLSListen)
	if err != nil {
		return fmt.Errorf("rls_listen %s: %w", cfg.RLSListen, err)
	}
	r.ln, r.grpc = ln, grpc.NewServer(opts...)
	r.svc.Register(r.grpc)
	go r.grpc.Serve(ln) //nolint:errcheck // returns when stopped
	return nil
}

// rlsStreamWorkers is how many goroutines serve calls, kept from call
// to call: a goroutine per call (grpc-go's default) grows its stack anew
// each time, about a tenth of the service's CPU under load (profiled).
// More concurrent calls than this still get a goroutine each.
const rlsStreamWorkers = 64

// installRules makes the rules' limiters; a rule that fails (a backend
// down, too many policies) is made on its first use instead.
func installRules(ctx context.Context, d *rls.Limiters, rules *rls.Rules) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return d.Install(ctx, rules)
}

// grpcTLS is base for gRPC: every connection offers HTTP/2 by ALPN, and
// still gets the certificates loaded last.
func grpcTLS(base *tls.Config) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := base.GetConfigForClient(hello)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.NextProtos = []string{"h2"}
			return c, nil
		},
	}
}

// Addr is the service's address.
func (r *rlsServer) addr() string { return r.ln.Addr().String() }

// reload puts new rules in force and makes their limiters (those the
// backends cannot make now are made on first use), then deletes the
// limiters of the rules it removed (rls.Limiters.Forget).
func (r *rlsServer) reload(cfg config.Config, rules *rls.Rules) {
	r.svc.SetOptions(rlsOptions(cfg))
	installRules(context.Background(), r.decide, rules) //nolint:errcheck // made on first use
	old := r.svc.Rules()
	r.svc.SetRules(rules)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.decide.Forget(ctx, old, rules); err != nil {
		r.log.Warn("rls: limiters of removed rate limits not all deleted (left in the backend)", "err", err)
	}
}

// close stops the service: health answers NOT_SERVING, calls in flight
// finish (up to ctx's end).
func (r *rlsServer) close(ctx context.Context) {
	if r == nil || r.grpc == nil {
		return
	}
	r.svc.Draining()
	done := make(chan struct{})
	go func() { r.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.grpc.Stop()
	}
}

// rlsStats are the service's rows of INFO's # RLS section.
func rlsStats(r *rlsServer) []stat {
	sum := func(f func(*rls.Counts) int64) func() int64 {
		return func() int64 {
			var n int64
			for _, c := range r.svc.Counts() {
				n += f(c)
			}
			return n
		}
	}
	return []stat{
		{"RLS", "rls_requests_ok", "", "", false, sum(func(c *rls.Counts) int64 { return c.OK.Load() })},
		{"RLS", "rls_requests_over_limit", "", "", false, sum(func(c *rls.Counts) int64 { return c.OverLimit.Load() })},
		{"RLS", "rls_requests_error", "", "", false, sum(func(c *rls.Counts) int64 { return c.Errors.Load() })},
		{"RLS", "rls_domains", "", "", true, func() int64 { return int64(r.svc.Rules().Domains()) }},
		{"RLS", "rls_rate_limits", "", "", true, func() int64 { return int64(len(r.svc.Rules().Limits())) }},
	}
}

// rlsCollector is /metrics' rlproxy_rls_requests_total{domain,code}: the
// domains are the rules' ("" for any other), so the series are bounded.
type rlsCollector struct{ r *rlsServer }

var rlsRequests = prometheus.NewDesc("rlproxy_rls_requests_total", "ShouldRateLimit calls, by domain and overall code (ok, over_limit, error).", []string{"domain", "code"}, nil)

func (c rlsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rlsRequests }

func (c rlsCollector) Collect(ch chan<- prometheus.Metric) {
	for domain, n := range c.r.svc.Counts() {
		for code, v := range map[string]int64{"ok": n.OK.Load(), "over_limit": n.OverLimit.Load(), "error": n.Errors.Load()} {
			ch <- prometheus.MustNewConstMetric(rlsRequests, prometheus.CounterValue, float64(v), domain, code)
		}
	}
}
