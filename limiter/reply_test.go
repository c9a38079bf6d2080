package limiter_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// resp builds a script reply as go-redis returns it.
func resp(vs ...any) []any { return vs }

// run is the 8 reply values of one run of identical requests: how many
// were granted (-1: more than capacity), the first grant's remaining,
// retry_after_us and reset_after_us, the last grant's reset_after_us, and
// the denial's remaining, retry_after_us and reset_after_us.
func run(vs ...int64) []any {
	if len(vs) != 8 {
		panic("a run has 8 values")
	}
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// reply builds an acquire reply of status 0 in epoch e1 from runs.
func reply(runs ...[]any) []any {
	v := resp(int64(0), "e1")
	for _, r := range runs {
		v = append(v, r...)
	}
	return v
}

// asks builds asks for the given permits, none waiting.
func asks(permits ...int64) []limiter.Ask {
	out := make([]limiter.Ask, len(permits))
	for i, p := range permits {
		out[i] = limiter.Ask{Permits: p}
	}
	return out
}

func TestDecodeReply(t *testing.T) {
	wait := limiter.Ask{Permits: 1, MaxWait: time.Second}
	tests := []struct {
		name    string
		v       any
		op      limiter.Op
		asks    []limiter.Ask // acquire requests sent
		wantErr bool
		reply   limiter.Reply
	}{
		// Good replies.
		{name: "acquire of two", v: reply(run(1, 2, 0, 333_334, 333_334, 0, 0, 0), run(0, 0, 0, 0, 0, 0, 333_334, 1_000_000)),
			op: limiter.OpAcquire, asks: asks(1, 3), reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{
				{Granted: true, Remaining: 2, ResetAfterMs: 334},
				{Remaining: 0, RetryAfterMs: 334, RetryAfterUs: 333_334, ResetAfterMs: 1000},
			}}},
		{name: "over capacity", v: reply(run(-1, 5, 0, 0, 0, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(6), reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{{OverCapacity: true, Remaining: 5}}}},
		{name: "over capacity, a run of 3", v: reply(run(-1, 5, 0, 0, 0, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(6, 6, 6), reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{
				{OverCapacity: true, Remaining: 5}, {OverCapacity: true, Remaining: 5}, {OverCapacity: true, Remaining: 5},
			}}},
		{name: "reservation", v: reply(run(1, 0, 300_000, 1_300_000, 1_300_000, 0, 0, 0)),
			op: limiter.OpAcquire, asks: []limiter.Ask{wait}, reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{
				{Granted: true, RetryAfterMs: 300, RetryAfterUs: 300_000, ResetAfterMs: 1300},
			}}},
		{name: "microseconds round up to ms", v: reply(run(1, 0, 1, 1_000_001, 1_000_001, 0, 0, 0), run(0, 0, 0, 0, 0, 0, 999, 1_999_001)),
			op: limiter.OpAcquire, asks: []limiter.Ask{wait, wait}, reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{
				{Granted: true, RetryAfterMs: 1, RetryAfterUs: 1, ResetAfterMs: 1001},
				{RetryAfterMs: 1, RetryAfterUs: 999, ResetAfterMs: 2000},
			}}},
		{name: "whole ms stay whole", v: reply(run(0, 4, 0, 0, 0, 4, 1_000, 2_000)),
			op: limiter.OpAcquire, asks: asks(5), reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{
				{Remaining: 4, RetryAfterMs: 1, RetryAfterUs: 1_000, ResetAfterMs: 2},
			}}},
		{name: "integers as strings", v: resp("0", "e1", "7"),
			op: limiter.OpPeek, reply: limiter.Reply{Epoch: "e1", Count: 7}},
		{name: "acquire integers as strings", v: resp("0", "e1", "1", "0", "0", "5000", "5000", "0", "0", "0"),
			op: limiter.OpAcquire, asks: asks(2), reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{{Granted: true, ResetAfterMs: 5}}}},
		{name: "peek", v: resp(int64(0), "e1", int64(7)), op: limiter.OpPeek, reply: limiter.Reply{Epoch: "e1", Count: 7}},
		{name: "release", v: resp(int64(0), "e1", int64(10)), op: limiter.OpRelease, reply: limiter.Reply{Epoch: "e1", Count: 10}},
		{name: "no such limiter", v: resp(int64(1), ""), op: limiter.OpAcquire, asks: asks(1, 1, 2),
			reply: limiter.Reply{Status: limiter.StatusNoLimiter}},
		{name: "epoch changed", v: resp(int64(2), "e9"), op: limiter.OpPeek,
			reply: limiter.Reply{Status: limiter.StatusEpochChange, Epoch: "e9"}},

		// Wrong shapes.
		{name: "nil", v: nil, op: limiter.OpPeek, wantErr: true},
		{name: "not an array", v: int64(0), op: limiter.OpPeek, wantErr: true},
		{name: "a string", v: "OK", op: limiter.OpPeek, wantErr: true},
		{name: "empty array", v: resp(), op: limiter.OpPeek, wantErr: true},
		{name: "status only", v: resp(int64(0)), op: limiter.OpPeek, wantErr: true},
		{name: "status not an integer", v: resp("ok", "e1", int64(1)), op: limiter.OpPeek, wantErr: true},
		{name: "status nil", v: resp(nil, "e1", int64(1)), op: limiter.OpPeek, wantErr: true},
		{name: "status a float", v: resp(0.0, "e1", int64(1)), op: limiter.OpPeek, wantErr: true},
		{name: "epoch not a string", v: resp(int64(0), int64(1), int64(1)), op: limiter.OpPeek, wantErr: true},
		{name: "epoch nil", v: resp(int64(2), nil), op: limiter.OpPeek, wantErr: true},
		{name: "peek without count", v: resp(int64(0), "e1"), op: limiter.OpPeek, wantErr: true},
		{name: "peek with two counts", v: resp(int64(0), "e1", int64(1), int64(2)), op: limiter.OpPeek, wantErr: true},
		{name: "release count not an integer", v: resp(int64(0), "e1", "many"), op: limiter.OpRelease, wantErr: true},
		{name: "release count an array", v: resp(int64(0), "e1", resp(int64(1))), op: limiter.OpRelease, wantErr: true},
		{name: "acquire without results", v: reply(), op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire short run", v: reply(run(1, 2, 0, 3, 3, 0, 0, 0)[:7]), op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire old format (4 per request)", v: resp(int64(0), "e1", int64(1), int64(2), int64(0), int64(3)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire fewer runs than asks make", v: reply(run(1, 2, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(1, 2), wantErr: true},
		{name: "acquire more runs than asks make", v: reply(run(1, 2, 0, 3, 3, 0, 0, 0), run(1, 1, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire one value too many", v: append(reply(run(1, 2, 0, 3, 3, 0, 0, 0)), int64(0)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire results for no asks", v: reply(run(1, 2, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, wantErr: true},
		{name: "acquire field not an integer", v: resp(int64(0), "e1", int64(1), "x", int64(0), int64(3), int64(3), int64(0), int64(0), int64(0)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire field nil", v: reply(append(run(1, 2, 0, 3, 3, 0, 0, 0)[:7], nil)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire granted above the run", v: reply(run(2, 2, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		{name: "acquire granted above a run of 3", v: reply(run(4, 2, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(1, 1, 1), wantErr: true},
		{name: "acquire granted below -1", v: reply(run(-2, 2, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, asks: asks(1), wantErr: true},
		// Waiting asks go alone: two of them are two runs, not one of 2.
		{name: "acquire waiting asks as one run", v: reply(run(2, 2, 0, 3, 3, 0, 0, 0)),
			op: limiter.OpAcquire, asks: []limiter.Ask{wait, wait}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limiter.DecodeReply(tc.v, tc.op, tc.asks)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("DecodeReply(%v) = %+v, want an error", tc.v, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeReply(%v): %v", tc.v, err)
			}
			if !reflect.DeepEqual(got, tc.reply) {
				t.Errorf("DecodeReply(%v) = %+v, want %+v", tc.v, got, tc.reply)
			}
		})
	}
}

// A run's answer expands into one result per request, in order: the
// grants, remaining falling by the permits of each and reset_after rising
// from the first grant's to the last's, then the denials, all alike.
func TestDecodeReplyExpandsRuns(t *testing.T) {
	t.Run("5 asks of 2, 3 granted", func(t *testing.T) {
		// remaining 8, 6, 4; resets 2.0001 s, 3.0001 s, 4.0001 s; denied with
		// 4 left, retry in 0.5 s, reset in 4 s.
		v := reply(run(3, 8, 0, 2_000_100, 4_000_100, 4, 500_000, 4_000_000))
		got, err := limiter.DecodeReply(v, limiter.OpAcquire, asks(2, 2, 2, 2, 2))
		if err != nil {
			t.Fatal(err)
		}
		denial := limiter.Result{Remaining: 4, RetryAfterMs: 500, RetryAfterUs: 500_000, ResetAfterMs: 4000}
		want := []limiter.Result{
			{Granted: true, Remaining: 8, ResetAfterMs: 2001},
			{Granted: true, Remaining: 6, ResetAfterMs: 3001},
			{Granted: true, Remaining: 4, ResetAfterMs: 4001},
			denial,
			denial,
		}
		if !reflect.DeepEqual(got.Results, want) {
			t.Errorf("results =\n%+v\nwant\n%+v", got.Results, want)
		}
	})

	t.Run("all granted", func(t *testing.T) {
		v := reply(run(4, 3, 0, 250_000, 1_000_000, 0, 0, 0))
		got, err := limiter.DecodeReply(v, limiter.OpAcquire, asks(1, 1, 1, 1))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got.Results {
			w := limiter.Result{Granted: true, Remaining: int64(3 - i), ResetAfterMs: int64(250 * (i + 1))}
			if r != w {
				t.Errorf("result %d = %+v, want %+v", i, r, w)
			}
		}
		if len(got.Results) != 4 {
			t.Errorf("%d results, want 4", len(got.Results))
		}
	})

	t.Run("none granted", func(t *testing.T) {
		v := reply(run(0, 0, 0, 0, 0, 1, 7_500, 9_000))
		got, err := limiter.DecodeReply(v, limiter.OpAcquire, asks(3, 3, 3))
		if err != nil {
			t.Fatal(err)
		}
		denial := limiter.Result{Remaining: 1, RetryAfterMs: 8, RetryAfterUs: 7_500, ResetAfterMs: 9}
		if want := []limiter.Result{denial, denial, denial}; !reflect.DeepEqual(got.Results, want) {
			t.Errorf("results = %+v, want %+v", got.Results, want)
		}
	})

	// Only the first grant of a run carries its retry_after: the script
	// only groups asks that do not wait, whose grants hold at once.
	t.Run("retry_after of the first grant", func(t *testing.T) {
		v := reply(run(2, 1, 3, 1_000, 2_000, 0, 0, 0))
		got, err := limiter.DecodeReply(v, limiter.OpAcquire, asks(1, 1))
		if err != nil {
			t.Fatal(err)
		}
		want := []limiter.Result{
			{Granted: true, Remaining: 1, RetryAfterMs: 1, RetryAfterUs: 3, ResetAfterMs: 1},
			{Granted: true, Remaining: 0, ResetAfterMs: 2},
		}
		if !reflect.DeepEqual(got.Results, want) {
			t.Errorf("results = %+v, want %+v", got.Results, want)
		}
	})

	t.Run("over capacity", func(t *testing.T) {
		v := reply(run(-1, 7, 0, 0, 0, 0, 0, 0), run(1, 6, 0, 100_000, 100_000, 0, 0, 0))
		got, err := limiter.DecodeReply(v, limiter.OpAcquire, asks(9, 9, 1))
		if err != nil {
			t.Fatal(err)
		}
		over := limiter.Result{OverCapacity: true, Remaining: 7}
		want := []limiter.Result{over, over, {Granted: true, Remaining: 6, ResetAfterMs: 100}}
		if !reflect.DeepEqual(got.Results, want) {
			t.Errorf("results = %+v, want %+v", got.Results, want)
		}
	})

	// Runs follow the asks: a new run wherever the permits change or an
	// ask may wait, and each run's results land in its asks' slots.
	t.Run("runs in order", func(t *testing.T) {
		w := limiter.Ask{Permits: 1, MaxWait: time.Second}
		in := []limiter.Ask{{Permits: 1}, {Permits: 1}, {Permits: 2}, w, w, {Permits: 1}}
		v := reply(
			run(2, 9, 0, 1_000, 2_000, 0, 0, 0),     // 1, 1
			run(0, 0, 0, 0, 0, 8, 3_000, 4_000),     // 2
			run(1, 7, 5_000, 6_000, 6_000, 0, 0, 0), // wait
			run(0, 0, 0, 0, 0, 7, 7_000, 8_000),     // wait
			run(1, 6, 0, 9_000, 9_000, 0, 0, 0),     // 1
		)
		got, err := limiter.DecodeReply(v, limiter.OpAcquire, in)
		if err != nil {
			t.Fatal(err)
		}
		want := []limiter.Result{
			{Granted: true, Remaining: 9, ResetAfterMs: 1},
			{Granted: true, Remaining: 8, ResetAfterMs: 2},
			{Remaining: 8, RetryAfterMs: 3, RetryAfterUs: 3_000, ResetAfterMs: 4},
			{Granted: true, Remaining: 7, RetryAfterMs: 5, RetryAfterUs: 5_000, ResetAfterMs: 6},
			{Remaining: 7, RetryAfterMs: 7, RetryAfterUs: 7_000, ResetAfterMs: 8},
			{Granted: true, Remaining: 6, ResetAfterMs: 9},
		}
		if !reflect.DeepEqual(got.Results, want) {
			t.Errorf("results =\n%+v\nwant\n%+v", got.Results, want)
		}
	})
}

// Every truncation of a good reply, and every element of it swapped for a
// value of the wrong type, is an error, never a panic.
func TestDecodeReplyNeverPanics(t *testing.T) {
	// asks 1, 1, 2: a run of two (both granted), then one of one (denied).
	sent := asks(1, 1, 2)
	good := reply(run(2, 2, 0, 333_334, 666_667, 0, 0, 0), run(0, 0, 0, 0, 0, 1, 333_334, 666_667))
	if _, err := limiter.DecodeReply(good, limiter.OpAcquire, sent); err != nil {
		t.Fatalf("good reply: %v", err)
	}
	for n := range len(good) {
		if _, err := limiter.DecodeReply(good[:n], limiter.OpAcquire, sent); err == nil {
			t.Errorf("reply cut to %d values: no error", n)
		}
	}
	for i := range good {
		for _, bad := range []any{nil, 1.5, resp(), "x", []byte("1"), map[any]any{}} {
			if _, isString := good[i].(string); isString && bad == "x" {
				continue // any string is a valid epoch
			}
			v := append(resp(), good...)
			v[i] = bad
			if _, err := limiter.DecodeReply(v, limiter.OpAcquire, sent); err == nil {
				t.Errorf("value %d replaced by %#v: no error", i, bad)
			}
		}
	}
	wait := limiter.Ask{Permits: 1, MaxWait: time.Second}
	// Asks that make other runs than the reply answers.
	for _, other := range [][]limiter.Ask{
		nil,                        // no runs
		asks(1),                    // one run
		asks(1, 1),                 // one run
		asks(1, 2, 2),              // two runs, but the first has 1 ask and 2 grants
		asks(1, 2, 3),              // three runs
		{wait, wait, {Permits: 2}}, // three runs: waiting asks go alone
	} {
		if _, err := limiter.DecodeReply(good, limiter.OpAcquire, other); err == nil {
			t.Errorf("asks %v for a reply of runs of 2 and 1: no error", other)
		}
	}
}

func TestAcquireArgs(t *testing.T) {
	w1 := limiter.Ask{Permits: 1, MaxWait: time.Second}
	tests := []struct {
		name string
		asks []limiter.Ask
		want []any // after op and epoch: permits, max_wait_ms, count per run
	}{
		{"none", nil, nil},
		{"one", asks(3), []any{int64(3), int64(0), 1}},
		{"identical neighbours make one run", asks(1, 1, 1, 1), []any{int64(1), int64(0), 4}},
		{"different permits split", asks(1, 1, 2, 2, 2, 1), []any{
			int64(1), int64(0), 2, int64(2), int64(0), 3, int64(1), int64(0), 1,
		}},
		{"only neighbours group: order is kept", asks(1, 2, 1, 2), []any{
			int64(1), int64(0), 1, int64(2), int64(0), 1, int64(1), int64(0), 1, int64(2), int64(0), 1,
		}},
		{"waiting asks go alone", []limiter.Ask{w1, w1, w1}, []any{
			int64(1), int64(1000), 1, int64(1), int64(1000), 1, int64(1), int64(1000), 1,
		}},
		{"a waiting ask splits a run", []limiter.Ask{{Permits: 1}, {Permits: 1}, w1, {Permits: 1}}, []any{
			int64(1), int64(0), 2, int64(1), int64(1000), 1, int64(1), int64(0), 1,
		}},
		// A wait under 1 ms is sent as 0 but still is a wait: alone.
		{"sub-millisecond waits go alone", []limiter.Ask{{Permits: 1, MaxWait: time.Microsecond}, {Permits: 1, MaxWait: time.Microsecond}}, []any{
			int64(1), int64(0), 1, int64(1), int64(0), 1,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := limiter.AcquireArgs("e1", tc.asks)
			want := append([]any{"acquire", "e1"}, tc.want...)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("AcquireArgs(%v) = %#v, want %#v", tc.asks, got, want)
			}
			// Whatever the grouping, the runs count every ask.
			n := 0
			for i := 4; i < len(got); i += 3 {
				n += got[i].(int)
			}
			if n != len(tc.asks) {
				t.Errorf("runs count %d asks, want %d", n, len(tc.asks))
			}
		})
	}
}

func TestDecodeSetConf(t *testing.T) {
	tests := []struct {
		name      string
		v         any
		wantErr   bool
		changed   bool
		epoch     string
		oldShards int
	}{
		{name: "created", v: resp(int64(1), "e1", int64(0)), changed: true, epoch: "e1"},
		{name: "unchanged", v: resp(int64(0), "e1", int64(4)), epoch: "e1", oldShards: 4},
		{name: "strings", v: resp("1", "e2", "2"), changed: true, epoch: "e2", oldShards: 2},

		{name: "nil", v: nil, wantErr: true},
		{name: "not an array", v: int64(1), wantErr: true},
		{name: "empty", v: resp(), wantErr: true},
		{name: "two values", v: resp(int64(1), "e1"), wantErr: true},
		{name: "four values", v: resp(int64(1), "e1", int64(0), int64(0)), wantErr: true},
		{name: "with a generation", v: resp(int64(1), "e1", int64(3), "1700000000000000"), changed: true, epoch: "e1", oldShards: 3},
		{name: "five values", v: resp(int64(1), "e1", int64(0), "1", "2"), wantErr: true},
		{name: "changed not an integer", v: resp("yes", "e1", int64(0)), wantErr: true},
		{name: "epoch not a string", v: resp(int64(1), int64(7), int64(0)), wantErr: true},
		{name: "epoch nil", v: resp(int64(1), nil, int64(0)), wantErr: true},
		{name: "shards not an integer", v: resp(int64(1), "e1", nil), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			changed, epoch, oldShards, err := limiter.DecodeSetConf(tc.v)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("DecodeSetConf(%v) = (%v, %q, %d), want an error", tc.v, changed, epoch, oldShards)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeSetConf(%v): %v", tc.v, err)
			}
			if changed != tc.changed || epoch != tc.epoch || oldShards != tc.oldShards {
				t.Errorf("DecodeSetConf(%v) = (%v, %q, %d), want (%v, %q, %d)",
					tc.v, changed, epoch, oldShards, tc.changed, tc.epoch, tc.oldShards)
			}
		})
	}
}

// A names call's reply: per name 2 alone (left to the caller), or 4
// values for a name asked once (granted, remaining, retry_after_us,
// reset_after_us of the grant or the denial), or status 0 and a run's 8
// per run of its asks. A reply of the wrong shape is an error, never a
// panic.
func TestDecodeNames(t *testing.T) {
	one := []limiter.NameAsks{{Asks: asks(1)}}
	mixed := []limiter.NameAsks{{Asks: asks(1)}, {Asks: asks(1)}, {Asks: asks(9)}, {Asks: asks(1)}, {Asks: asks(1, 1)}}
	good := append(resp(int64(0), "e1",
		int64(4), int64(60_000), // a plain grant: 4 left
		int64(-1), int64(0), int64(0), int64(2_500), int64(3_000_000), // denied
		int64(-1), int64(-1), int64(5), int64(0), int64(0), // over capacity
		int64(-2), // a config of its own
		int64(0)), run(2, 1, 0, 1_000, 2_000, 0, 0, 0)...)
	reps, err := limiter.DecodeNames(good, mixed)
	if err != nil {
		t.Fatal(err)
	}
	want := []limiter.Reply{
		{Epoch: "e1", Results: []limiter.Result{{Granted: true, Remaining: 4, ResetAfterMs: 60}}},
		{Epoch: "e1", Results: []limiter.Result{{RetryAfterMs: 3, RetryAfterUs: 2_500, ResetAfterMs: 3000}}},
		{Epoch: "e1", Results: []limiter.Result{{OverCapacity: true, Remaining: 5}}},
		{Status: limiter.StatusEpochChange, Epoch: "e1"},
		{Epoch: "e1", Results: []limiter.Result{{Granted: true, Remaining: 1, ResetAfterMs: 1}, {Granted: true, Remaining: 0, ResetAfterMs: 2}}},
	}
	if !reflect.DeepEqual(reps, want) {
		t.Errorf("decoded %+v\nwant %+v", reps, want)
	}
	if reps, err := limiter.DecodeNames(resp(int64(2), "e9"), mixed); err != nil || len(reps) != len(mixed) || reps[3].Status != limiter.StatusEpochChange {
		t.Errorf("a call refused whole: %+v, %v", reps, err)
	}
	for name, v := range map[string]any{
		"nil":                   nil,
		"status only":           resp(int64(0)),
		"epoch not a string":    resp(int64(0), int64(1), int64(0), int64(1), int64(0), int64(0), int64(0)),
		"no name":               resp(int64(0), "e1"),
		"granted a string":      resp(int64(0), "e1", int64(-1), "x", int64(0), int64(0), int64(0)),
		"remaining a string":    resp(int64(0), "e1", "x", int64(0)),
		"grant short":           resp(int64(0), "e1", int64(4)),
		"short":                 resp(int64(0), "e1", int64(-1), int64(1), int64(0), int64(0)),
		"value not an integer":  resp(int64(0), "e1", int64(4), nil),
		"granted 3 of one":      resp(int64(0), "e1", int64(-1), int64(3), int64(0), int64(0), int64(0)),
		"granted below -1":      resp(int64(0), "e1", int64(-1), int64(-2), int64(0), int64(0), int64(0)),
		"no such form":          resp(int64(0), "e1", int64(-3), int64(0)),
		"a value too many":      resp(int64(0), "e1", int64(4), int64(0), int64(0)),
		"a name too many":       resp(int64(0), "e1", int64(4), int64(0), int64(-2)),
		"a run too short":       append(resp(int64(0), "e1", int64(0)), run(1, 0, 0, 0, 0, 0, 0, 0)[:7]...),
		"a run's status 1":      append(resp(int64(0), "e1", int64(1)), run(1, 0, 0, 0, 0, 0, 0, 0)...),
		"not an array of names": "OK",
	} {
		asked := one
		if name == "a run too short" || name == "a run's status 1" {
			asked = []limiter.NameAsks{{Asks: asks(1, 1)}}
		}
		if reps, err := limiter.DecodeNames(v, asked); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, reps)
		}
	}
}
