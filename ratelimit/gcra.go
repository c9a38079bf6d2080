package ratelimit

import (
	"context"

	"github.com/rlproxy/rlproxy/limiter"
)

// GCRA runs one GCRA call (CL.THROTTLE, GCRA, RL.THROTTLE: one algorithm,
// one state per key) on key's node and returns its five-integer reply.
func (l *Limiters) GCRA(ctx context.Context, key string, t limiter.Throttle) ([5]int64, error) {
	node := l.nodes(key, 1)[0]
	v, err := node.Eval(ctx, l.scripts.Cell, []string{l.keys.Cell(key)}, t.Args()...)
	if err != nil {
		return [5]int64{}, err
	}
	return limiter.DecodeCell(v)
}
