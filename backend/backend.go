// Package backend connects rlproxy to the Redis servers that hold limiter
// state: standalone nodes, a Redis Cluster, or an embedded in-memory server
// for trying rlproxy out with no setup. It runs the limiter scripts
// (EVALSHA, falling back to EVAL when a node has lost its script cache) and
// reports failures with the node they came from.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/internal/busypoll"
)

// Options configure a Pool.
type Options struct {
	// Backends are redis:// or rediss:// URLs of standalone nodes.
	Backends []string
	// Cluster are seed URLs of a Redis Cluster (exclusive with Backends).
	Cluster []string
	// TLS completes the TLS config of rediss:// URLs.
	TLS TLSFiles
	// Timeout bounds each dial, read and write (defaults to 500ms).
	Timeout time.Duration
	// PoolSize is the connections per node (0 = go-redis default).
	PoolSize int
	// BreakerCooldown is how long a standalone node whose breaker opened
	// is skipped before one probe call (0 = no breaker). A cluster relies
	// on go-redis's own tracking of failing nodes.
	BreakerCooldown time.Duration
	// BreakerFailures is how many calls in a row a node must fail to
	// answer for its breaker to open (0 acts as 1).
	BreakerFailures int
	// Scripts are loaded onto every node at start (optional).
	Scripts []*redis.Script
	// Poller, when set, lets backend connections poll for a reply before
	// sleeping (see package busypoll).
	Poller *busypoll.Poller
}

// Client is what a node's connection must do: run scripts and commands.
type Client interface {
	redis.Scripter
	redis.Cmdable
	Close() error
}

// Node is one place limiter scripts run: a standalone Redis server, or a
// whole Redis Cluster (whose client routes each call by key slot).
type Node struct {
	name     string
	client   Client
	scripter redis.Scripter // runs scripts; client unless set (a cluster's)
	timeout  time.Duration  // bounds each call
	reload   func()         // asks a cluster for its slot map afresh
	breaker  breaker
	log      *slog.Logger // says when the breaker opens or closes
	stats    counters
	// pipe merges script calls for different limiters into one pipeline
	// (standalone nodes): a call made while another is in flight goes
	// with the others queued meanwhile, in one write and one read.
	pipe      coalesce.Coalescer[evalCall, evalResult]
	pipelined bool
}

type evalCall struct {
	script *redis.Script
	keys   []string
	args   []any
	opened uint64 // the times the node's breaker had opened when the call was queued
}

type evalResult struct {
	v   any
	err error
}

// Name is how errors and INFO name the node (its address).
func (n *Node) Name() string { return n.name }

// Client is the node's go-redis client.
func (n *Node) Client() Client { return n.client }

// Eval runs a script on the node.
func (n *Node) Eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	var v any
	err := n.run(ctx, !n.pipelined, func() error {
		if !n.pipelined {
			ctx, cancel := n.bound(ctx)
			defer cancel()
			var err error
			var sc redis.Scripter = n.client
			if n.scripter != nil {
				sc = n.scripter
			}
			v, err = s.Run(ctx, sc, keys, args...).Result()
			return err
		}
		opened, _ := n.breaker.openings()
		r, err := n.pipe.Do(context.Background(), "", evalCall{s, keys, args, opened}, n.runPipeline)
		if err != nil {
			return err
		}
		v = r.v
		return r.err
	})
	return v, err
}

// bound gives ctx the node's timeout unless it has a deadline already.
func (n *Node) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || n.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, n.timeout)
}

// runPipeline sends queued script calls as one pipeline. Calls queued
// before the breaker opened fail at once, not after another timeout.
func (n *Node) runPipeline(ctx context.Context, queued []evalCall) ([]evalResult, error) {
	out := make([]evalResult, len(queued))
	opened, last := n.breaker.openings()
	calls, at := queued[:0:0], []int(nil)
	for i, c := range queued {
		if c.opened < opened {
			out[i].err = &unavailableError{node: n.name, err: circuitOpen{last}}
			continue
		}
		calls, at = append(calls, c), append(at, i)
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	switch len(calls) {
	case 0:
		return out, nil
	case 1:
		c := calls[0]
		out[at[0]].v, out[at[0]].err = c.script.Run(ctx, n.client, c.keys, c.args...).Result()
		n.recordPipeline(out, at)
		return out, nil
	}
	pipe := n.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	pipe.Exec(ctx) //nolint:errcheck // each command carries its own error
	for i, cmd := range cmds {
		r := &out[at[i]]
		r.v, r.err = cmd.Result()
		if redis.HasErrorPrefix(r.err, "NOSCRIPT") {
			// The node lost its scripts (restart, SCRIPT FLUSH): EVAL loads it.
			c := calls[i]
			r.v, r.err = c.script.Eval(ctx, n.client, c.keys, c.args...).Result()
		}
	}
	n.recordPipeline(out, at)
	return out, nil
}

// recordPipeline counts a pipeline's outcome as one call's towards the
// breaker (the node failed to answer it, or answered), before the next
// pipeline can start: when this opens the breaker, the calls queued
// behind it are refused at once instead of waiting out another timeout.
func (n *Node) recordPipeline(out []evalResult, sent []int) {
	for _, i := range sent {
		if err := out[i].err; errors.Is(n.wrap(err), ErrUnavailable) {
			n.note(n.breaker.record(time.Now(), err))
			return
		}
	}
	n.note(n.breaker.record(time.Now(), nil))
}

// HGetAll reads a hash; an empty map means no such key.
func (n *Node) HGetAll(ctx context.Context, key string) (map[string]string, error) {
	var h map[string]string
	err := n.do(ctx, func() (err error) {
		h, err = n.client.HGetAll(ctx, key).Result()
		return err
	})
	return h, err
}

// Get reads a string key; "" when there is none.
func (n *Node) Get(ctx context.Context, key string) (string, error) {
	var v string
	err := n.do(ctx, func() (err error) {
		v, err = n.client.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
	return v, err
}

// PExpire sets a key's TTL.
func (n *Node) PExpire(ctx context.Context, key string, ttl time.Duration) error {
	return n.do(ctx, func() error { return n.client.PExpire(ctx, key, ttl).Err() })
}

// Del deletes keys one by one (they may live in different cluster slots)
// and returns how many existed.
func (n *Node) Del(ctx context.Context, keys ...string) (int64, error) {
	var total int64
	for _, k := range keys {
		var c int64
		err := n.do(ctx, func() (err error) {
			c, err = n.client.Del(ctx, k).Result()
			return err
		})
		if err != nil {
			return total, err
		}
		total += c
	}
	return total, nil
}

// wrap names the node in an error. Redis error replies (which start with an
// upper-case code) pass through as they are; network errors say the node is
// unavailable.
func (n *Node) wrap(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// A script error carries a Lua stack trace: users get its first line.
		msg, _, _ := strings.Cut(oneLine(err.Error()), " stack traceback")
		if strings.HasPrefix(msg, "TRYAGAIN ") {
			// A slot being moved: keep the code first, so clients retry.
			return &replyError{msg: fmt.Sprintf("%s (backend %s)", msg, n.name), err: err}
		}
		return &replyError{msg: fmt.Sprintf("backend %s: %s", n.name, msg), err: err}
	}
	return &unavailableError{node: n.name, err: err}
}
