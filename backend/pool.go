package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/busypoll"
)

// Pool is the set of nodes rlproxy runs limiters on.
type Pool struct {
	nodes    []*Node
	embedded *Embedded
}

// Open connects to the configured backends, or starts the embedded
// in-memory server when none are configured, and loads the scripts.
func Open(ctx context.Context, o Options, log *slog.Logger) (*Pool, error) {
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	tlsSetup, err := o.TLS.load()
	if err != nil {
		return nil, err
	}
	p := &Pool{}
	switch {
	case len(o.Cluster) > 0:
		n, err := clusterNode(o, tlsSetup)
		if err != nil {
			return nil, err
		}
		p.nodes = []*Node{n}
	case len(o.Backends) > 0:
		for _, u := range o.Backends {
			opt, err := redis.ParseURL(u)
			if err != nil {
				return nil, fmt.Errorf("backend %q: %w", u, err)
			}
			tlsSetup.apply(opt.TLSConfig)
			applyTimeouts(opt, o)
			c := redis.NewClient(opt)
			n := &Node{name: opt.Addr, client: c, timeout: o.Timeout, pipelined: true}
			n.breaker.cooldown.Store(int64(o.BreakerCooldown))
			n.breaker.threshold.Store(int64(o.BreakerFailures))
			p.nodes = append(p.nodes, n)
		}
	default:
		e, err := StartEmbedded()
		if err != nil {
			return nil, err
		}
		p.embedded = e
		opt := &redis.Options{Addr: e.Addr()}
		applyTimeouts(opt, o)
		p.nodes = []*Node{{name: "embedded " + e.Addr(), client: redis.NewClient(opt)}}
		log.Info("no backend configured: using the embedded in-memory backend (state is lost on exit; use --backend redis://host:port for real use)")
	}
	for _, n := range p.nodes {
		n.log = log
	}
	// A node that is down now may come up later: loading scripts is an
	// optimisation (EVALSHA falls back to EVAL), so failures only warn.
	for _, n := range p.nodes {
		if err := n.loadScripts(ctx, o.Scripts); err != nil {
			log.Warn("could not preload scripts", "node", n.name, "err", err)
		}
	}
	return p, nil
}

func applyTimeouts(opt *redis.Options, o Options) {
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = o.Timeout, o.Timeout, o.Timeout
	opt.PoolSize = o.PoolSize
	// Calls end at their context's deadline, which covers a whole pipeline.
	opt.ContextTimeoutEnabled = true
	// No go-redis retries: a script whose reply timed out may still run,
	// and each retry would spend its permits again (and wait another Timeout).
	opt.MaxRetries = -1
	// One dial attempt: a refused connection fails at once (the breaker
	// then skips the node), instead of after 5 attempts 100ms apart.
	opt.DialerRetries = 1
	opt.Dialer = pollingDialer(opt, o.Poller)
}

// pollingDialer dials as go-redis does and lets plain TCP connections
// poll for replies (TLS connections are left as they are).
func pollingDialer(opt *redis.Options, p *busypoll.Poller) func(context.Context, string, string) (net.Conn, error) {
	dial := redis.NewDialer(opt)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return p.Wrap(c, 1), nil
	}
}

func (n *Node) loadScripts(ctx context.Context, scripts []*redis.Script) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, s := range scripts {
		var err error
		if c, ok := n.client.(*redis.ClusterClient); ok {
			err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				return s.Load(ctx, m).Err()
			})
		} else {
			err = s.Load(ctx, n.client).Err()
		}
		if err != nil {
			return n.wrap(err)
		}
	}
	return nil
}

// Nodes are the pool's nodes. A cluster is one node: its client routes by slot.
func (p *Pool) Nodes() []*Node { return p.nodes }

// SetBreaker changes, live (a config reload), how many failures in a row
// open a node's breaker and how long the node is then skipped.
func (p *Pool) SetBreaker(failures int, cooldown time.Duration) {
	for _, n := range p.nodes {
		n.breaker.threshold.Store(int64(failures))
		n.breaker.cooldown.Store(int64(cooldown))
	}
}

// Embedded reports whether the pool is the embedded in-memory server.
func (p *Pool) Embedded() bool { return p.embedded != nil }

// EmbeddedAddr is the embedded server's address ("" for real backends).
func (p *Pool) EmbeddedAddr() string {
	if p.embedded == nil {
		return ""
	}
	return p.embedded.Addr()
}

// Close closes every client (and stops the embedded server).
func (p *Pool) Close() error {
	var errs []error
	for _, n := range p.nodes {
		errs = append(errs, n.client.Close())
	}
	if p.embedded != nil {
		p.embedded.Close()
	}
	return errors.Join(errs...)
}
