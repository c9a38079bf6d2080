package limiter_test

import (
	"fmt"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// The KEYS of a script call: the config hash, then the algorithm's state
// keys for the epoch in force. All carry the hash tag {name:shard}, so one
// call touches one cluster slot; '}' and '%' in a name are escaped.
func ExampleKeys_Script() {
	k := limiter.Keys{Prefix: "rl:"}
	fmt.Println(k.Config("api", 3))
	fmt.Println(k.Script(limiter.TokenBucket, "api", 3, "e1", ""))
	fmt.Println(k.Script(limiter.SlidingLog, "api", 3, "e1", ""))
	fmt.Println(k.Script(limiter.TokenBucket, "api", 3, "e1", "worker-7")) // PER_CLIENT
	fmt.Println(k.Config("a}b%", 0))
	// Output:
	// rl:{api:3}:c
	// [rl:{api:3}:c rl:{api:3}:e1:s]
	// [rl:{api:3}:c rl:{api:3}:e1:l rl:{api:3}:e1:u]
	// [rl:{api:3}:c rl:{api:3}:e1:s:worker-7]
	// rl:{a%7Db%25:0}:c
}

// The ARGV of a script call: the op, the epoch the caller expects, then
// the coalesced requests as runs of identical ones: permits, how long they
// may wait (ms) and how many. Neighbours asking for the same permits
// without waiting share a run; a request that may wait goes alone.
func ExampleAcquireArgs() {
	fmt.Println(limiter.AcquireArgs("e1", []limiter.Ask{
		{Permits: 1},
		{Permits: 1},
		{Permits: 1},
		{Permits: 5, MaxWait: 2 * time.Second},
		{Permits: 5, MaxWait: 2 * time.Second},
		{Permits: 1},
	}))
	fmt.Println(limiter.Args(limiter.OpPeek, "e1"))
	fmt.Println(limiter.Args(limiter.OpRelease, "e1", 3))
	// Output:
	// [acquire e1 1 0 3 5 2000 1 5 2000 1 1 0 1]
	// [peek e1]
	// [release e1 3]
}

// A script's reply: status, the epoch in force, then eight integers per
// run of requests — how many were granted (from the run's start; -1 for
// more permits than the limiter holds), the first grant's remaining,
// retry_after and reset_after, the last grant's reset_after, and the
// denial of the rest: remaining, retry_after, reset_after (durations in
// µs). DecodeReply gives one Result per request, durations in whole ms
// rounded up.
func ExampleDecodeReply() {
	asks := []limiter.Ask{{Permits: 1}, {Permits: 1}, {Permits: 1}, {Permits: 9}}
	v := []any{int64(0), "e1",
		// the run of three 1s: two granted (1 then 0 left), one denied
		int64(2), int64(1), int64(0), int64(500_000), int64(1_000_000), int64(0), int64(333_334), int64(1_000_000),
		// the 9: more permits than the limiter holds
		int64(-1), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0),
	}
	rep, err := limiter.DecodeReply(v, limiter.OpAcquire, asks)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rep.Results {
		fmt.Printf("granted=%v over=%v remaining=%d retry=%dms reset=%dms\n",
			r.Granted, r.OverCapacity, r.Remaining, r.RetryAfterMs, r.ResetAfterMs)
	}

	// A caller with a stale epoch is told the epoch in force and retries.
	rep, _ = limiter.DecodeReply([]any{int64(2), "e2"}, limiter.OpAcquire, asks)
	fmt.Println(rep.Status == limiter.StatusEpochChange, rep.Epoch)

	// A reply of the wrong shape is an error, not a panic.
	_, err = limiter.DecodeReply([]any{int64(0), "e1", "x"}, limiter.OpPeek, nil)
	fmt.Println(err)
	// Output:
	// granted=true over=false remaining=1 retry=0ms reset=500ms
	// granted=true over=false remaining=0 retry=0ms reset=1000ms
	// granted=false over=false remaining=0 retry=334ms reset=1000ms
	// granted=false over=true remaining=0 retry=0ms reset=0ms
	// true e2
	// limiter script: peek count: strconv.ParseInt: parsing "x": invalid syntax
}
