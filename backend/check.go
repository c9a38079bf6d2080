package backend

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Check tells whether the node can serve limiter calls now, for a
// readiness probe: its breaker is not cooling down after a failure, it
// answers PING (every master, for a cluster) before ctx ends, and it
// holds the scripts — those it lost, as after a restart, are loaded
// again. It calls the node's client directly: a probe neither counts as
// a call nor opens or closes the breaker, which real calls decide. The
// error is one line naming the node.
func (n *Node) Check(ctx context.Context, scripts []*redis.Script) error {
	if err := n.Down(); err != nil {
		return err
	}
	check := func(ctx context.Context, c redis.Cmdable) error {
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
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := check(ctx, m); err != nil {
				return fmt.Errorf("%s: %w", m.Options().Addr, err)
			}
			return nil
		})
	} else {
		err = check(ctx, n.client)
	}
	if err != nil {
		return fmt.Errorf("backend %s: %s", n.name, oneLine(err.Error()))
	}
	return nil
}
