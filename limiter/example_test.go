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
// per coalesced request its permits and how long it may wait (ms).
func ExampleAcquireArgs() {
	fmt.Println(limiter.AcquireArgs("e1", []limiter.Ask{
		{Permits: 1},
		{Permits: 5, MaxWait: 2 * time.Second},
	}))
	fmt.Println(limiter.Args(limiter.OpPeek, "e1"))
	fmt.Println(limiter.Args(limiter.OpRelease, "e1", 3))
	// Output:
	// [acquire e1 1 0 5 2000]
	// [peek e1]
	// [release e1 3]
}

// A script's reply: status, the epoch in force, then four integers per
// request — granted (1, 0, or -1 for more than capacity), remaining,
// retry_after_ms and reset_after_ms.
func ExampleDecodeReply() {
	v := []any{int64(0), "e1",
		int64(1), int64(0), int64(0), int64(1000), // granted: nothing left
		int64(0), int64(0), int64(334), int64(1000), // denied: retry in 334 ms
		int64(-1), int64(0), int64(0), int64(0), // more permits than the limiter holds
	}
	rep, err := limiter.DecodeReply(v, limiter.OpAcquire, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rep.Results {
		fmt.Printf("granted=%v over=%v remaining=%d retry=%dms reset=%dms\n",
			r.Granted, r.OverCapacity, r.Remaining, r.RetryAfterMs, r.ResetAfterMs)
	}

	// A caller with a stale epoch is told the epoch in force and retries.
	rep, _ = limiter.DecodeReply([]any{int64(2), "e2"}, limiter.OpAcquire, 1)
	fmt.Println(rep.Status == limiter.StatusEpochChange, rep.Epoch)

	// A reply of the wrong shape is an error, not a panic.
	_, err = limiter.DecodeReply([]any{int64(0), "e1", "x"}, limiter.OpPeek, 0)
	fmt.Println(err)
	// Output:
	// granted=true over=false remaining=0 retry=0ms reset=1000ms
	// granted=false over=false remaining=0 retry=334ms reset=1000ms
	// granted=false over=true remaining=0 retry=0ms reset=0ms
	// true e2
	// limiter script: peek count: strconv.ParseInt: parsing "x": invalid syntax
}
