package limiter

import (
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
	ResetAfterMs int64 // until the sub-limiter is full again
}

// Reply is a decoded limiter script reply.
type Reply struct {
	Status  Status
	Epoch   string   // the epoch in force
	Results []Result // acquire: one per request, in order
	Count   int64    // peek / release: permits available
}

// Op names what a limiter script is asked to do (ARGV[1]).
type Op string

const (
	OpAcquire Op = "acquire"
	OpPeek    Op = "peek"
	OpRelease Op = "release"
)

// Ask is one acquire request inside a script call.
type Ask struct {
	Permits int64
	// MaxWait is how long the caller may wait for the permits; a script
	// that can book ahead reserves them when they come within it.
	MaxWait time.Duration
}

// AcquireArgs builds the ARGV of an acquire call deciding asks in order.
func AcquireArgs(epoch string, asks []Ask) []any {
	args := make([]any, 0, 2+2*len(asks))
	args = append(args, string(OpAcquire), epoch)
	for _, a := range asks {
		args = append(args, a.Permits, a.MaxWait.Milliseconds())
	}
	return args
}

// Args builds the ARGV of a peek (no permits) or release call.
func Args(op Op, epoch string, permits ...int64) []any {
	args := []any{string(op), epoch}
	for _, p := range permits {
		args = append(args, p)
	}
	return args
}

// DecodeReply checks and decodes a limiter script reply. want is the
// number of acquire requests sent (0 for peek and release). A reply of the
// wrong shape is an error, never a panic.
func DecodeReply(v any, op Op, want int) (Reply, error) {
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
	if op != OpAcquire {
		if len(rest) != 1 {
			return Reply{}, fmt.Errorf("limiter script: %s reply has %d values, want 1", op, len(rest))
		}
		if r.Count, err = toInt(rest[0]); err != nil {
			return Reply{}, fmt.Errorf("limiter script: %s count: %w", op, err)
		}
		return r, nil
	}
	if len(rest) != 4*want {
		return Reply{}, fmt.Errorf("limiter script: acquire reply has %d values, want %d", len(rest), 4*want)
	}
	r.Results = make([]Result, want)
	for i := range r.Results {
		var f [4]int64
		for j := range f {
			if f[j], err = toInt(rest[4*i+j]); err != nil {
				return Reply{}, fmt.Errorf("limiter script: result %d: %w", i, err)
			}
		}
		if f[0] < -1 || f[0] > 1 {
			return Reply{}, fmt.Errorf("limiter script: result %d: granted is %d, want 1, 0 or -1", i, f[0])
		}
		r.Results[i] = Result{
			Granted:      f[0] == 1,
			OverCapacity: f[0] == -1,
			Remaining:    f[1],
			RetryAfterMs: f[2],
			ResetAfterMs: f[3],
		}
	}
	return r, nil
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

// DecodeSetConf decodes setconf.lua's reply.
func DecodeSetConf(v any) (changed bool, epoch string, oldShards int, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return false, "", 0, fmt.Errorf("setconf script: unexpected reply %T %v", v, v)
	}
	c, err1 := toInt(arr[0])
	e, ok := arr[1].(string)
	n, err2 := toInt(arr[2])
	if err1 != nil || !ok || err2 != nil {
		return false, "", 0, fmt.Errorf("setconf script: unexpected reply %v", arr)
	}
	return c == 1, e, int(n), nil
}
