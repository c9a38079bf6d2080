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
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configure a Pool.
type Options struct {
	// Backends are redis:// or rediss:// URLs of standalone nodes.
	Backends []string
	// Cluster are seed URLs of a Redis Cluster (exclusive with Backends).
	Cluster []string
	// Timeout bounds each dial, read and write (defaults to 500ms).
	Timeout time.Duration
	// PoolSize is the connections per node (0 = go-redis default).
	PoolSize int
	// BreakerCooldown is how long a standalone node that failed to answer
	// is skipped before one probe call (0 = no breaker). A cluster relies
	// on go-redis's own tracking of failing nodes.
	BreakerCooldown time.Duration
	// Scripts are loaded onto every node at start (optional).
	Scripts []*redis.Script
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
	name    string
	client  Client
	scripts redis.Scripter // the client's autopipeliner, if any
	running atomic.Int64   // script calls in flight
	breaker breaker
	stats   counters
}

// Name is how errors and INFO name the node (its address).
func (n *Node) Name() string { return n.name }

// scripter picks how a script call goes out: alone when nothing else is
// in flight (the lowest latency), else through the autopipeliner, so that
// concurrent calls for different limiters share one write and one read.
func (n *Node) scripter() redis.Scripter {
	if n.scripts != nil && n.running.Load() > 1 {
		return n.scripts
	}
	return n.client
}

// Client is the node's go-redis client.
func (n *Node) Client() Client { return n.client }

// Eval runs a script on the node.
func (n *Node) Eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	var v any
	n.running.Add(1)
	defer n.running.Add(-1)
	err := n.do(func() (err error) {
		v, err = s.Run(ctx, n.scripter(), keys, args...).Result()
		return err
	})
	return v, err
}

// HGetAll reads a hash; an empty map means no such key.
func (n *Node) HGetAll(ctx context.Context, key string) (map[string]string, error) {
	var h map[string]string
	err := n.do(func() (err error) {
		h, err = n.client.HGetAll(ctx, key).Result()
		return err
	})
	return h, err
}

// PExpire sets a key's TTL.
func (n *Node) PExpire(ctx context.Context, key string, ttl time.Duration) error {
	return n.do(func() error { return n.client.PExpire(ctx, key, ttl).Err() })
}

// Del deletes keys one by one (they may live in different cluster slots)
// and returns how many existed.
func (n *Node) Del(ctx context.Context, keys ...string) (int64, error) {
	var total int64
	for _, k := range keys {
		var c int64
		err := n.do(func() (err error) {
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

// ErrUnavailable marks errors where a backend could not be reached or did
// not answer in time, as opposed to an error reply from Redis.
var ErrUnavailable = errors.New("backend unavailable")

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
		return &replyError{msg: fmt.Sprintf("backend %s: %s", n.name, msg), err: err}
	}
	return &unavailableError{node: n.name, err: err}
}

// replyError is an error reply from a backend, shown in one line.
type replyError struct {
	msg string
	err error
}

func (e *replyError) Error() string { return e.msg }
func (e *replyError) Unwrap() error { return e.err }

type unavailableError struct {
	node string
	err  error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("backend %s unavailable: %s", e.node, oneLine(e.err.Error()))
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
