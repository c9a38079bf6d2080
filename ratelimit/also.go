package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/internal/keyslot"
	"github.com/rlproxy/rlproxy/internal/oneline"
	"github.com/rlproxy/rlproxy/limiter"
)

// Several names, one decision (RL.ACQUIRE key [permits] [ALSO key
// [permits]]...): granted only when every name grants, and then every name
// keeps its permits; otherwise no name keeps anything.
//
// The names are placed as a lone request's would be (a sharded name's
// shard is picked at random; no probing) and grouped by target: a node,
// or on a Redis Cluster a node and a slot. One target's names are decided
// in one also.lua call, atomically, coalesced with other calls to the
// same target. Targets are decided one after the other; when one denies,
// the names granted on the targets before it are given back (undo in
// also.lua, which never gives back more than the grant still holds). In
// between, others may see those permits taken: that is the rollback
// window, one round trip to each later target. So no name is ever
// over-admitted; the window can only under-admit.

// MaxNames is the most names one multi-name acquire may have.
const MaxNames = 8

// NameAsk is one name of a multi-name acquire and the permits it takes.
type NameAsk struct {
	Name    string
	Permits int64
}

// ManyRequest is a multi-name acquire (AcquireMany).
type ManyRequest struct {
	Client string    // connection name: selects the budget of PER_CLIENT names
	Names  []NameAsk // 1 to MaxNames, each name once
}

// NameResult is one name's part of a multi-name decision.
type NameResult struct {
	Name string
	// Rule is the config the name was decided under (its limit, for
	// response headers) and its policy's pattern.
	Rule Rule
	// Asked: the name was decided. A name on a target after one that
	// denied is not asked (its fields are zero).
	Asked bool
	// Result is the name's decision as if alone: Granted says whether it
	// had room (a SHADOW name's denial is a grant marked ShadowDenied);
	// Remaining and ResetAfterMs are after the call (after the give-back
	// of a denied call).
	limiter.Result
}

// ManyResult is the decision on a multi-name acquire.
type ManyResult struct {
	// Result is the verdict: Granted only when every name granted;
	// Remaining the least over the names, RetryAfterMs the most over the
	// names that denied (when granted: the longest booking's wait),
	// ResetAfterMs the most.
	limiter.Result
	// Denied is the name that denied with the largest retry ("" when
	// granted).
	Denied string
	Names  []NameResult // in the request's order
}

// TooManyNamesError: a multi-name acquire has more than MaxNames names.
type TooManyNamesError struct{}

func (TooManyNamesError) Error() string {
	return fmt.Sprintf("too many names: at most %d in one RL.ACQUIRE", MaxNames)
}

// NameTwiceError: a multi-name acquire names a limiter more than once.
type NameTwiceError struct{ Name string }

func (e NameTwiceError) Error() string {
	return fmt.Sprintf("limiter %s is named twice in one RL.ACQUIRE", oneline.Quote(e.Name))
}

// AlsoConcurrencyError: a multi-name acquire names a concurrency limiter.
type AlsoConcurrencyError struct{ Name string }

func (e AlsoConcurrencyError) Error() string {
	return fmt.Sprintf("ALSO does not apply to a concurrency limiter %s", oneline.Quote(e.Name))
}

// CheckNames checks a multi-name acquire's names as a parser can: how
// many, each once, permits positive.
func CheckNames(names []NameAsk) error {
	if len(names) > MaxNames {
		return TooManyNamesError{}
	}
	for i, n := range names {
		if n.Permits < 1 {
			return fmt.Errorf("permits must be a positive integer (got %d for '%s')", n.Permits, n.Name)
		}
		for _, m := range names[:i] {
			if m.Name == n.Name {
				return NameTwiceError{Name: n.Name}
			}
		}
	}
	return nil
}

// AcquireMany decides r now: every name grants, or none keeps anything.
// Errors are those of a lone acquire (no such limiter, more permits than
// a name holds, a backend down) and TooManyNamesError, NameTwiceError,
// AlsoConcurrencyError.
func (l *Limiters) AcquireMany(ctx context.Context, r ManyRequest) (ManyResult, error) {
	res, taken, err := l.acquireMany(ctx, r, nil)
	if err == nil && res.Granted && ctx.Err() != nil {
		l.undo(taken) // best effort for a gone caller
	}
	return res, err
}

// AcquireManyWait is AcquireMany waiting up to timeout (0: until granted)
// for every name to fit: each name books ahead as alone when its
// algorithm can (token-bucket, leaky-bucket), and the reply is held until
// the latest booking holds; when some name cannot book, what the others
// booked is given back and the waiter sleeps until the denial's
// retry_after, then asks again. ctx ends when the client leaves: what was
// booked is given back.
func (l *Limiters) AcquireManyWait(ctx context.Context, r ManyRequest, timeout time.Duration) (ManyResult, error) {
	in, err := l.waiters.Enter()
	if err != nil {
		return ManyResult{}, err
	}
	defer in.Leave()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	actx := context.WithoutCancel(ctx) // a decision runs to its end; the waiter gives back
	for {
		wait := WaitLeft(deadline)
		res, taken, err := l.acquireMany(actx, r, &wait)
		if err != nil {
			return res, err
		}
		in.Queued()
		if !res.Granted {
			sleep, ok := nextAsk(time.Duration(res.RetryAfterMs)*time.Millisecond, deadline)
			if !ok {
				return res, nil
			}
			if err := sleepCtx(ctx, sleep); err != nil {
				return ManyResult{}, err
			}
			continue
		}
		if err := sleepCtx(ctx, time.Duration(res.RetryAfterMs)*time.Millisecond); err != nil {
			l.undo(taken)
			return ManyResult{}, err
		}
		res.ResetAfterMs = max(0, res.ResetAfterMs-res.RetryAfterMs)
		res.RetryAfterMs = 0
		return res, nil
	}
}

// sleepCtx waits d, or until ctx ends (then its cause).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// alsoPart is one name of a multi-name acquire, placed.
type alsoPart struct {
	e      *entry
	name   limiter.AlsoName
	member limiter.AlsoMember // Name is unused here: runAlso numbers a call's names
	node   *backend.Node
	target string // node, and on a cluster slot
}

// taken are the grants of a multi-name acquire, by target, for undo.
type taken []alsoTaken

type alsoTaken struct {
	node     *backend.Node
	names    []limiter.AlsoName
	permits  []int64
	nowUs    []int64
	limiters []string
}

// acquireMany decides r once its configs are in hand, reloading them
// when a script says they changed. maxWait nil: decide now.
func (l *Limiters) acquireMany(ctx context.Context, r ManyRequest, maxWait *time.Duration) (ManyResult, taken, error) {
	if len(r.Names) == 0 {
		return ManyResult{}, nil, fmt.Errorf("no names to acquire")
	}
	if err := CheckNames(r.Names); err != nil {
		return ManyResult{}, nil, err
	}
	for attempt := 0; ; attempt++ {
		parts, err := l.placeMany(ctx, r, attempt > 0, maxWait)
		if err == errReload {
			continue
		}
		if err != nil {
			if errors.Is(err, backend.ErrUnavailable) {
				l.stats.Errors.Add(1)
				res, perr := l.onBackendError(err)
				return ManyResult{Result: res}, nil, perr
			}
			return ManyResult{}, nil, err
		}
		res, tk, undecided, err := l.decideMany(ctx, r, parts)
		if err != nil || !undecided {
			if err == nil {
				l.countMany(res, parts)
			}
			return res, tk, err
		}
		for _, p := range parts {
			l.forget(p.e.name)
		}
		if attempt >= maxAttempts {
			return ManyResult{}, nil, fmt.Errorf("limiters of this RL.ACQUIRE keep changing; try again")
		}
	}
}

// errReload: a config in the cache may be old (a request over its
// capacity): read every config afresh.
var errReload = errors.New("reload")

// placeMany reads each name's config (afresh when fresh) and places it.
func (l *Limiters) placeMany(ctx context.Context, r ManyRequest, fresh bool, maxWait *time.Duration) ([]alsoPart, error) {
	parts := make([]alsoPart, len(r.Names))
	for i, n := range r.Names {
		e, err := l.config(ctx, n.Name, fresh)
		if err != nil {
			return nil, err
		}
		if e.Algo == limiter.Concurrency {
			return nil, AlsoConcurrencyError{Name: n.Name}
		}
		if c := e.Capacity(); n.Permits > c {
			if !fresh {
				return nil, errReload
			}
			return nil, &OverCapacityError{Name: n.Name, Permits: n.Permits, Capacity: c}
		}
		l.keepAlive(ctx, n.Name, e)
		shard := int(rand.Uint64() % uint64(e.Shards))
		node := e.node(shard)
		if err := node.Down(); err != nil {
			return nil, err
		}
		keys := l.keysOf(e, shard, clientKey(e.Stored, r.Client))
		target := node.Name()
		if l.cluster {
			target += "\x00" + strconv.Itoa(keyslot.Of(keys[0]))
		}
		m := limiter.AlsoMember{Permits: n.Permits, Shadow: e.Shadow}
		if maxWait != nil && !e.Shadow { // a dry run never books ahead
			m.MaxWait = maxWait.Milliseconds()
		}
		parts[i] = alsoPart{
			e: e, node: node, target: target, member: m,
			name: limiter.AlsoName{Algo: e.Algo, Conf: e.confArg(shard), Keys: keys},
		}
	}
	return parts, nil
}

// alsoItem is one multi-name acquire's names on one target: its part of
// an also.lua call.
type alsoItem struct {
	names   []limiter.AlsoName
	members []limiter.AlsoMember
}

// alsoAnswer is the decision on one alsoItem.
type alsoAnswer struct {
	group limiter.AlsoGroup
	names []limiter.AlsoNameReply // per name of the item
}

// decideMany decides placed names target by target; undecided says a
// config changed (nothing is kept then: reload and try again).
func (l *Limiters) decideMany(ctx context.Context, r ManyRequest, parts []alsoPart) (res ManyResult, tk taken, undecided bool, err error) {
	res.Names = make([]NameResult, len(parts))
	for i, p := range parts {
		res.Names[i] = NameResult{Name: r.Names[i].Name, Rule: Rule{Config: p.e.Config}}
		if p.e.policy != nil {
			res.Names[i].Rule.Policy = p.e.policy.pattern
		}
	}
	granted := true
	done := make([]bool, len(parts))
	for i := range parts {
		if done[i] {
			continue
		}
		// The names on parts[i]'s target, in the request's order.
		var at []int
		var item alsoItem
		for j := i; j < len(parts); j++ {
			if parts[j].target == parts[i].target {
				at = append(at, j)
				done[j] = true
				item.names = append(item.names, parts[j].name)
				item.members = append(item.members, parts[j].member)
			}
		}
		node := parts[i].node
		a, err := l.also.Do(context.Background(), parts[i].target, item, l.runAlso(node))
		if err == nil && a.group.Undecided {
			l.undo(tk)
			return ManyResult{}, nil, true, nil
		}
		if err != nil {
			l.undo(tk)
			return ManyResult{}, nil, false, err
		}
		for k, j := range at {
			m := a.group.Members[k]
			if m.OverCapacity {
				l.undo(tk)
				return ManyResult{}, nil, true, nil // the config changed under the request
			}
			if parts[j].e.Shadow {
				m = m.Shadowed()
			}
			res.Names[j].Asked, res.Names[j].Result = true, m
		}
		if !a.group.Granted {
			granted = false
			l.undo(tk)
			tk = nil
			break
		}
		t := alsoTaken{node: node, names: item.names}
		for k, j := range at {
			if m := a.group.Members[k]; m.Granted {
				t.permits = append(t.permits, parts[j].member.Permits)
			} else {
				t.permits = append(t.permits, 0) // a SHADOW name's denial took nothing
			}
			t.nowUs = append(t.nowUs, a.names[k].NowUs)
			t.limiters = append(t.limiters, parts[j].e.name)
		}
		tk = append(tk, t)
	}
	res.merge(granted)
	return res, tk, false, nil
}

// merge makes the verdict from the names' results.
func (res *ManyResult) merge(granted bool) {
	res.Granted = granted
	first := true
	for _, n := range res.Names {
		if !n.Asked {
			continue
		}
		if first || n.Remaining < res.Remaining {
			res.Remaining = n.Remaining
		}
		first = false
		res.ResetAfterMs = max(res.ResetAfterMs, n.ResetAfterMs)
		if n.ShadowDenied {
			res.ShadowDenied = true
		}
		denied := !n.Granted
		if granted || denied {
			// granted: the longest booking's wait; denied: the most over
			// the names that denied.
			if denied && (res.Denied == "" || n.RetryAfterMs > res.RetryAfterMs) {
				res.Denied = n.Name
			}
			if !n.ShadowDenied {
				res.RetryAfterMs = max(res.RetryAfterMs, n.RetryAfterMs)
				res.RetryAfterUs = max(res.RetryAfterUs, n.RetryAfterUs)
			}
		}
	}
	if granted {
		res.Denied = ""
	}
}

// countMany counts a multi-name decision once in the stats, and for each
// name's policy: a SHADOW name's denial counts as its denial.
func (l *Limiters) countMany(res ManyResult, parts []alsoPart) {
	l.stats.decided(res.Granted, res.Granted && res.ShadowDenied)
	for i, p := range parts {
		if p.e.policy != nil && res.Names[i].Asked {
			p.e.policy.counts.count(res.Granted && !res.Names[i].ShadowDenied)
		}
	}
}

// runAlso decides a batch of alsoItems on one target in one also.lua
// call: each name once (by its first state key), the items' groups in
// arrival order.
func (l *Limiters) runAlso(node *backend.Node) func(ctx context.Context, items []alsoItem) ([]alsoAnswer, error) {
	return func(ctx context.Context, items []alsoItem) ([]alsoAnswer, error) {
		var names []limiter.AlsoName
		index := map[string]int{}
		groups := make([][]limiter.AlsoMember, len(items))
		for i, it := range items {
			groups[i] = make([]limiter.AlsoMember, len(it.names))
			for j, n := range it.names {
				x, ok := index[n.Keys[1]]
				if !ok {
					x = len(names)
					index[n.Keys[1]] = x
					names = append(names, n)
				}
				groups[i][j] = it.members[j]
				groups[i][j].Name = x
			}
		}
		keys, args := limiter.AlsoArgs(names, groups)
		v, err := node.Eval(ctx, l.scripts.Also(), keys, args...)
		if err != nil {
			return nil, err
		}
		nr, gs, err := limiter.DecodeAlso(v, names, groups)
		if err != nil {
			return nil, err
		}
		out := make([]alsoAnswer, len(items))
		for i := range items {
			out[i].group = gs[i]
			for _, m := range groups[i] {
				out[i].names = append(out[i].names, nr[m.Name])
			}
		}
		return out, nil
	}
}

// undo gives back what a multi-name acquire took, target by target (best
// effort: what cannot be given back stays taken, which only
// under-admits).
func (l *Limiters) undo(tk taken) {
	if len(tk) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, t := range tk {
		keys, args := limiter.UndoArgs(t.names, t.permits, t.nowUs)
		t.node.Eval(ctx, l.scripts.Also(), keys, args...) //nolint:errcheck // best effort, see above
		for _, n := range t.limiters {
			l.denials.forget(n) // denials remembered meanwhile counted these permits as taken
		}
	}
}
