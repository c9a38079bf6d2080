package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Check tells whether the node can serve limiter calls now, for a
// readiness probe: its breaker is not cooling down after a failure, it
// answers PING within timeout (every master of a cluster, each with its
// own timeout), and it holds the scripts — those it lost, as after a
// restart, are loaded again. It calls the node's client directly: a
// probe neither counts as a call nor opens or closes the breaker, which
// real calls decide. The error is one line naming the node (and, for a
// cluster, each master that failed).
func (n *Node) Check(ctx context.Context, timeout time.Duration, scripts []*redis.Script) error {
	if err := n.Down(); err != nil {
		return err
	}
	check := func(ctx context.Context, c redis.Cmdable) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		if len(scripts) == 0 {
			return nil
		}
		hashes := make([]string, len(scripts))
		for i, s := range scripts {
			hashes[i] = s.Hash()
		}
		have, err := c.ScriptExists(ctx, hashes...).Result()
		if err != nil {
			return fmt.Errorf("SCRIPT EXISTS: %w", err)
		}
		for i, ok := range have {
			if ok {
				continue
			}
			if err := scripts[i].Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("scripts not loaded: %w", err)
			}
		}
		return nil
	}
	var err error
	if c, ok := n.client.(*redis.ClusterClient); ok {
		// Every master's own answer: ForEachMaster would stop at the
		// first error, which need not be the frozen master's.
		var mu sync.Mutex
		var failed []string
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := check(ctx, m); err != nil {
				mu.Lock()
				failed = append(failed, m.Options().Addr+": "+err.Error())
				mu.Unlock()
			}
			return nil
		})
		if err == nil && len(failed) > 0 {
			err = errors.New(strings.Join(failed, "; "))
		}
	} else {
		err = check(ctx, n.client)
	}
	if err != nil {
		return fmt.Errorf("backend %s: %s", n.name, oneLine(err.Error()))
	}
	return nil
}
