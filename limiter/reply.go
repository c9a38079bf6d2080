package limiter

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Status is the first slot of a limiter script's reply.
type Status int64

const (
	StatusOK          Status = 0
	StatusNoLimiter   Status = 1 // no config: the limiter does not exist (or expired)
	StatusEpochChange Status = 2 // config or state replaced since the caller read it
)

// Result is the decision on one request.
type Result struct {
	Granted      bool
	OverCapacity bool  // asked for more permits than the sub-limiter can ever hold
	Remaining    int64 // permits left after this request
	// RetryAfterMs: when denied, until the permits could be granted; when
	// granted, 0, or for a reservation the wait before the grant holds.
	RetryAfterMs int64
	// RetryAfterUs is RetryAfterMs in whole microseconds (rounded up), for
	// callers that remember denials.
	RetryAfterUs int64
	ResetAfterMs int64 // until the sub-limiter is full again
	// ShadowDenied: a SHADOW limiter denied the request and Shadowed
	// granted it anyway; RetryAfterMs > 0 is when the denial would end.
	ShadowDenied bool
}

// Shadowed is what a SHADOW limiter answers for the decision r: a denial
// becomes a grant that keeps the denial's figures (remaining,
// retry_after > 0, reset_after) and is marked ShadowDenied, for counting.
// The script left state as the denial leaves it; a grant (reservations
// included) and a request over capacity (an error) are left as they are.
// Callers ask a SHADOW limiter with MaxWait 0: a dry run never delays.
func (r Result) Shadowed() Result {
	if r.Granted || r.OverCapacity {
		return r
	}
	r.Granted, r.ShadowDenied = true, true
	return r
}

// Reply is a decoded limiter script reply.
type Reply struct {
	Status  Status
	Epoch   string   // the epoch in force
	Results []Result // acquire: one per request, in order
	Count   int64    // peek / release: permits available; clear: state keys cleared
}

// Op names what a limiter script is asked to do (ARGV[1]).
type Op string

const (
	OpAcquire Op = "acquire"
	OpPeek    Op = "peek"
	OpRelease Op = "release"
	// OpCharge takes permits after the fact (RL.CHARGE), even past zero:
	// the debt is paid back before later acquires are granted.
	OpCharge Op = "charge"
	// OpClear deletes the state of a name a policy governs; its reply
	// is the number of state keys that had any (Reply.Count).
	OpClear Op = "clear"
)

// Ask is one acquire request inside a script call.
type Ask struct {
	Permits int64
	// MaxWait is how long the caller may wait for the permits; a script
	// that can book ahead reserves them when they come within it.
	MaxWait time.Duration
}

// AcquireArgs builds the ARGV of an acquire call deciding asks in order.
// Neighbouring asks for the same permits that do not wait go as one run
// (permits, max_wait_ms, count): the script answers a run in O(1) reply
// values, however many requests it carries.
func AcquireArgs(epoch string, asks []Ask) []any {
	args := make([]any, 0, 2+3*len(asks))
	args = append(args, string(OpAcquire), epoch)
	for i := 0; i < len(asks); {
		j := runEnd(asks, i)
		args = append(args, asks[i].Permits, asks[i].MaxWait.Milliseconds(), j-i)
		i = j
	}
	return args
}

// runEnd returns the end of the run of asks starting at i: identical
// asks that do not wait (a waiting ask's answer depends on its place in
// the queue, so it goes alone).
func runEnd(asks []Ask, i int) int {
	j := i + 1
	if asks[i].MaxWait == 0 {
		for j < len(asks) && asks[j] == asks[i] {
			j++
		}
	}
	return j
}

// ChargeArgs builds the ARGV of a charge call taking permits. Its reply
// decodes with DecodeReply(v, OpCharge, []Ask{{Permits: permits}}) into
// one Result: Granted always, Remaining below zero by the debt,
// RetryAfterMs 0, ResetAfterMs until the debt and every grant are paid
// back.
func ChargeArgs(epoch string, permits int64) []any {
	return Args(OpCharge, epoch, permits)
}

// Args builds the ARGV of a peek (no permits) or release call.
func Args(op Op, epoch string, permits ...int64) []any {
	args := []any{string(op), epoch}
	for _, p := range permits {
		args = append(args, p)
	}
	return args
}

// DecodeReply checks and decodes a limiter script reply. asks are the
// acquire requests sent (nil for peek and release). A reply of the wrong
// shape is an error, never a panic.
func DecodeReply(v any, op Op, asks []Ask) (Reply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return Reply{}, fmt.Errorf("limiter script: unexpected reply %T %v", v, v)
	}
	status, err := toInt(arr[0])
	if err != nil {
		return Reply{}, fmt.Errorf("limiter script: status: %w", err)
	}
	epoch, ok := arr[1].(string)
	if !ok {
		return Reply{}, fmt.Errorf("limiter script: epoch: not a string: %T %v", arr[1], arr[1])
	}
	r := Reply{Status: Status(status), Epoch: epoch}
	if r.Status != StatusOK {
		return r, nil
	}
	rest := arr[2:]
	if op != OpAcquire && op != OpCharge {
		if len(rest) != 1 {
			return Reply{}, fmt.Errorf("limiter script: %s reply has %d values, want 1", op, len(rest))
		}
		if r.Count, err = toInt(rest[0]); err != nil {
			return Reply{}, fmt.Errorf("limiter script: %s count: %w", op, err)
		}
		return r, nil
	}
	if r.Results, rest, err = decodeRuns(make([]Result, 0, len(asks)), rest, asks); err != nil {
		return Reply{}, fmt.Errorf("limiter script: %w", err)
	}
	if len(rest) != 0 {
		return Reply{}, fmt.Errorf("limiter script: acquire reply has %d values too many", len(rest))
	}
	return r, nil
}

// decodeRuns appends to out the Results of asks, decoded from the answers
// of their runs at the front of vals, and returns what follows them.
func decodeRuns(out []Result, vals []any, asks []Ask) ([]Result, []any, error) {
	for i := 0; i < len(asks); {
		j := runEnd(asks, i)
		if len(vals) < runValues {
			return nil, nil, fmt.Errorf("acquire reply too short for request %d", i)
		}
		var f [runValues]int64
		for k := range f {
			var err error
			if f[k], err = toInt(vals[k]); err != nil {
				return nil, nil, fmt.Errorf("request %d: %w", i, err)
			}
		}
		vals = vals[runValues:]
		if f[0] < -1 || f[0] > int64(j-i) {
			return nil, nil, fmt.Errorf("request %d: %d granted of a run of %d", i, f[0], j-i)
		}
		out = expandRun(out, f, asks[i].Permits, j-i)
		i = j
	}
	return out, vals, nil
}

// runValues is the number of reply values per run of requests.
const runValues = 8

// expandRun turns a run's answer into one Result per request: the first
// granted ones (remaining falls by the permits of each, reset_after runs
// from the first grant's to the last's), then the denials, all alike.
func expandRun(out []Result, f [runValues]int64, permits int64, count int) []Result {
	granted, firstRem, firstRetry, firstReset, lastReset := f[0], f[1], f[2], f[3], f[4]
	if granted < 0 {
		for range count {
			out = append(out, Result{OverCapacity: true, Remaining: firstRem})
		}
		return out
	}
	for i := int64(0); i < granted; i++ {
		reset := firstReset
		if granted > 1 {
			reset += (lastReset - firstReset) * i / (granted - 1)
		}
		res := Result{Granted: true, Remaining: firstRem - i*permits, ResetAfterMs: usToMs(reset)}
		if i == 0 {
			res.RetryAfterMs, res.RetryAfterUs = usToMs(firstRetry), firstRetry
		}
		out = append(out, res)
	}
	denial := Result{Remaining: f[5], RetryAfterMs: usToMs(f[6]), RetryAfterUs: f[6], ResetAfterMs: usToMs(f[7])}
	for range int64(count) - granted {
		out = append(out, denial)
	}
	return out
}

// usToMs rounds microseconds up to whole milliseconds: waiting the
// milliseconds is always enough.
func usToMs(us int64) int64 {
	return (us + 999) / 1000
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	default:
		return 0, fmt.Errorf("not an integer: %T %v", v, v)
	}
}

// SetConfReply is setconf.lua's reply.
type SetConfReply struct {
	Changed   bool
	Epoch     string // in force
	OldShards int    // the shard count before (0: none)
	Gen       string // in force ("0": none)
}

// DecodeSetConfReply decodes setconf.lua's reply.
func DecodeSetConfReply(v any) (SetConfReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 {
		return SetConfReply{}, fmt.Errorf("setconf script: unexpected reply %T %v", v, v)
	}
	changed, epoch, old, err := DecodeSetConf(arr[:3])
	if errors.Is(err, ErrKeepLeases) {
		return SetConfReply{Epoch: epoch, OldShards: old}, err
	}
	gen, ok := arr[3].(string)
	if err != nil || !ok {
		return SetConfReply{}, fmt.Errorf("setconf script: unexpected reply %v", arr)
	}
	return SetConfReply{Changed: changed, Epoch: epoch, OldShards: old, Gen: gen}, nil
}

// ErrKeepLeases is setconf.lua's refusal of KEEPSTATE on a concurrency
// limiter whose shard count or mode would change (its leases would be
// forgotten).
var ErrKeepLeases = errors.New("KEEPSTATE cannot carry leases over a change of SHARDS or MODE")

// DecodeSetConf decodes setconf.lua's reply, without its generation.
func DecodeSetConf(v any) (changed bool, epoch string, oldShards int, err error) {
	arr, ok := v.([]any)
	if ok && len(arr) == 4 {
		if _, gen := arr[3].(string); gen {
			arr = arr[:3]
		}
	}
	if !ok || len(arr) != 3 {
		return false, "", 0, fmt.Errorf("setconf script: unexpected reply %T %v", v, v)
	}
	c, err1 := toInt(arr[0])
	e, ok := arr[1].(string)
	n, err2 := toInt(arr[2])
	if err1 != nil || !ok || err2 != nil {
		return false, "", 0, fmt.Errorf("setconf script: unexpected reply %v", arr)
	}
	if c == -1 {
		return false, e, int(n), ErrKeepLeases
	}
	return c == 1, e, int(n), nil
}
