package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNode connects to a Redis Cluster, set up so that a failover
// costs errors only until a replica is promoted:
//
//   - one dial attempt, bounded by Timeout, like the standalone nodes
//     (go-redis's default is 5 attempts 100ms apart, each up to 5s);
//   - a call that finds a node unreachable reloads the slot map (go-redis
//     reloads it only on MOVED/ASK, or once a minute: a dead master's
//     slots would keep pointing at it well after its replica took over);
//   - scripts run on masters only (a replica may lag behind), and each
//     script call is sent at most once (see onceScripter).
func clusterNode(o Options, t tlsSetup) (*Node, error) {
	var copt *redis.ClusterOptions
	for _, u := range o.Cluster {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("cluster seed %q: %w", u, err)
		}
		if copt == nil {
			copt = &redis.ClusterOptions{
				Username:  opt.Username,
				Password:  opt.Password,
				TLSConfig: opt.TLSConfig,
			}
			t.apply(copt.TLSConfig)
		}
		copt.Addrs = append(copt.Addrs, opt.Addr)
	}
	copt.DialTimeout, copt.ReadTimeout, copt.WriteTimeout = o.Timeout, o.Timeout, o.Timeout
	copt.ContextTimeoutEnabled = true
	copt.PoolSize = o.PoolSize
	copt.DialerRetries = 1
	copt.MaxRetries = -1 // no retries inside a node's client
	// Tries per command: MOVED/ASK hops, and for the other commands (config
	// reads, TTLs, deletes: safe to repeat) network errors too.
	copt.MaxRedirects = 3
	copt.ReadOnly = false // masters only
	copt.Dialer = pollingDialer(&redis.Options{DialTimeout: o.Timeout, TLSConfig: copt.TLSConfig}, o.Poller)
	c := redis.NewClusterClient(copt)
	return &Node{
		name:     "cluster " + copt.Addrs[0],
		client:   c,
		scripter: onceScripter{c},
		timeout:  o.Timeout,
		reload:   func() { c.ReloadState(context.Background()) },
	}, nil
}

// onceScripter runs EVALSHA and EVAL on a cluster so that no script runs
// twice. go-redis's cluster client resends a command after a network
// error or a timeout, though the command may have run and only its reply
// been lost: a script would then spend (or give back) permits twice.
// Here only replies that prove the script did not run lead to another
// try: MOVED, ASK and READONLY (followed by go-redis), TRYAGAIN (a slot
// half moved: tried again here, briefly) and NOSCRIPT (Script.Run sends
// EVAL).
type onceScripter struct{ *redis.ClusterClient }

// tryAgainBackoff are the pauses before the tries after a TRYAGAIN.
var tryAgainBackoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}

func (c onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, "eval", script, keys, args)
}

func (c onceScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, "evalsha", sha, keys, args)
}

func (c onceScripter) run(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	for attempt := 0; ; attempt++ {
		cmd := redis.NewCmd(ctx, a...)
		if len(keys) > 0 {
			cmd.SetFirstKeyPos(3)
		}
		err := c.Process(ctx, onceCmd{cmd})
		if attempt == len(tryAgainBackoff) || !redis.HasErrorPrefix(err, "TRYAGAIN") {
			return cmd
		}
		select {
		case <-ctx.Done():
			return cmd
		case <-time.After(tryAgainBackoff[attempt]):
		}
	}
}

// onceCmd is a command go-redis must not resend after an error that
// leaves unknown whether it ran.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// reloadOnFailure asks a cluster client for a fresh slot map after a
// call found a node unreachable: its master may have failed over.
func (n *Node) reloadOnFailure(err error) {
	if n.reload != nil && errors.Is(err, ErrUnavailable) {
		n.reload()
	}
}

// MasterOf names the master that serves key's slot in the cluster
// client's current slot map: calls for keys of one master can share a
// script call (a cross-slot one). "" for a standalone node (one place),
// or when the map is not known.
func (n *Node) MasterOf(ctx context.Context, key string) string {
	c, ok := n.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := c.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}
