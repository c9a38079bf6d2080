package ratelimit

import (
	"context"
	"errors"
	"strings"

	"github.com/rlproxy/rlproxy/limiter"
)

// GCRA runs one GCRA call (CL.THROTTLE, GCRA, RL.THROTTLE: one algorithm,
// one state per key) on key's node and returns its five-integer reply.
// A key kept as named (passthrough) must not be one of rlproxy's own.
func (l *Limiters) GCRA(ctx context.Context, key string, t limiter.Throttle) ([5]int64, error) {
	if l.keys.NativeCell && strings.HasPrefix(key, l.keys.Prefix) {
		return [5]int64{}, errNoPermKey
	}
	node := l.nodes(key, 1)[0]
	v, err := node.Eval(ctx, l.scripts.Cell, []string{l.keys.Cell(key)}, l.keys.CellArgs(t)...)
	if err != nil {
		return [5]int64{}, cellError(err)
	}
	return limiter.DecodeCell(v)
}

// errWrongType is Redis's answer for a key of another type: a GCRA key
// kept as named (passthrough) may be one.
var errWrongType = errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")

// errNoPermKey is Redis's answer for a key the user may not touch: with
// passthrough, a GCRA key under key_prefix (rlproxy's own state).
var errNoPermKey = errors.New("NOPERM No permissions to access a key")

// cellError answers WRONGTYPE as Redis's own command would, rather than
// as a script's error on a backend.
func cellError(err error) error {
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return errWrongType
	}
	return err
}
