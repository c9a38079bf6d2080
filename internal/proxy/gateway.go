package proxy

import (
	"fmt"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/rlproxy/rlproxy/internal/evloop"
	"github.com/rlproxy/rlproxy/passthrough"
	"github.com/rlproxy/rlproxy/server"
)

// openGateway builds the passthrough gateway: to passthrough_backend,
// else the first backend, else the cluster, else the embedded backend.
func openGateway(cfg config.Config, pool *backend.Pool, poller *busypoll.Poller) (*passthrough.Gateway, error) {
	url := cfg.PassthroughBackend
	var cluster []string
	switch {
	case url != "":
	case len(cfg.Backends) > 0:
		url = cfg.Backends[0]
	case len(cfg.Cluster) > 0:
		url, cluster = cfg.Cluster[0], cfg.Cluster
	case pool.Embedded():
		url = "redis://" + pool.EmbeddedAddr()
	default:
		return nil, fmt.Errorf("passthrough: set passthrough_backend")
	}
	tlsConf, err := backend.URLTLS(url, backend.TLSFiles{CAFile: cfg.BackendTLSCAFile, CertFile: cfg.BackendTLSCertFile, KeyFile: cfg.BackendTLSKeyFile})
	if err != nil {
		return nil, fmt.Errorf("passthrough_backend: %w", err)
	}
	return passthrough.New(passthrough.Options{
		URL: url, Cluster: cluster, TLS: tlsConf, KeyPrefix: cfg.KeyPrefix,
		MaxPinned: cfg.PassthroughMaxPinned, MaxPinnedPerUser: cfg.MaxPinnedPerUser(), Timeout: cfg.BackendTimeout, ReplyTimeout: cfg.PassthroughTimeout,
		Poller: poller,
	})
}

// forwarder is the gateway as the server sees it.
type forwarder struct{ g *passthrough.Gateway }

func (f forwarder) Open(t server.Tenant, push func([]byte), flush, kill func()) server.Session {
	return f.g.Open(passthrough.Tenant(t), push, flush, kill)
}
func (f forwarder) Keys(args []string) []string  { return passthrough.Keys(args) }
func (f forwarder) Stop(reason error)            { f.g.Stop(reason) }
func (f forwarder) Stateless(args []string) bool { return passthrough.Stateless(args) }
func (f forwarder) ReadInLoop(l *evloop.Loop)    { f.g.ReadInLoop(l) }
func (f forwarder) SortDenied(args []string) string {
	if ps := passthrough.SortPatterns(args); len(ps) > 0 {
		return ps[0].Denied()
	}
	return ""
}

// passthroughStats are the INFO # Passthrough figures and their metrics.
// srv is the server's (set once it is built, before INFO can be asked).
func passthroughStats(g *passthrough.Gateway, srv **server.Server) []stat {
	return []stat{
		{"Passthrough", "client_buffer_closed", "passthrough_client_buffer_closed_total", "Clients closed because they held passthrough_client_buffer bytes of replies and stopped reading.", false,
			func() int64 { return (*srv).Stats().ClientBufferClosed }},
		{"Passthrough", "loop_commands", "passthrough_loop_commands_total", "Commands the event loop read and ran (passthrough_loop).", false,
			func() int64 { return (*srv).Stats().LoopCommands }},
		{"Passthrough", "loop_holds_expired", "passthrough_loop_holds_expired_total", "Clients the event loop handed back whose command was not on its way to Redis within 1s: the loop served others again, so that command may come after theirs.", false,
			func() int64 { return (*srv).Stats().LoopHoldsExpired }},
		{"Passthrough", "forwarded", "passthrough_forwarded_total", "Commands forwarded to the backend (passthrough).", false,
			func() int64 { return g.Stats().Forwarded }},
		{"Passthrough", "pinned_connections", "passthrough_pinned_connections", "Backend connections pinned to clients now (MULTI, blocking commands, Pub/Sub, SELECT, CLIENT TRACKING).", true,
			func() int64 { return g.Stats().Pinned }},
		{"Passthrough", "forward_errors", "passthrough_forward_errors_total", "Forwarded commands answered an error because a backend connection broke.", false,
			func() int64 { return g.Stats().Errors }},
	}
}
