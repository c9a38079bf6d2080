package limiter_test

import (
	"reflect"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

// resp builds a script reply as go-redis returns it.
func resp(vs ...any) []any { return vs }

func TestDecodeReply(t *testing.T) {
	tests := []struct {
		name    string
		v       any
		op      limiter.Op
		want    int // acquire requests sent
		wantErr bool
		reply   limiter.Reply
	}{
		// Good replies.
		{name: "acquire of two", v: resp(int64(0), "e1", int64(1), int64(2), int64(0), int64(334), int64(0), int64(0), int64(334), int64(1000)),
			op: limiter.OpAcquire, want: 2, reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{
				{Granted: true, Remaining: 2, ResetAfterMs: 334},
				{Remaining: 0, RetryAfterMs: 334, ResetAfterMs: 1000},
			}}},
		{name: "over capacity", v: resp(int64(0), "e1", int64(-1), int64(5), int64(0), int64(0)),
			op: limiter.OpAcquire, want: 1, reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{{OverCapacity: true, Remaining: 5}}}},
		{name: "reservation", v: resp(int64(0), "e1", int64(1), int64(0), int64(300), int64(1300)),
			op: limiter.OpAcquire, want: 1, reply: limiter.Reply{Epoch: "e1", Results: []limiter.Result{{Granted: true, RetryAfterMs: 300, ResetAfterMs: 1300}}}},
		{name: "integers as strings", v: resp("0", "e1", "7"),
			op: limiter.OpPeek, reply: limiter.Reply{Epoch: "e1", Count: 7}},
		{name: "peek", v: resp(int64(0), "e1", int64(7)), op: limiter.OpPeek, reply: limiter.Reply{Epoch: "e1", Count: 7}},
		{name: "release", v: resp(int64(0), "e1", int64(10)), op: limiter.OpRelease, reply: limiter.Reply{Epoch: "e1", Count: 10}},
		{name: "no such limiter", v: resp(int64(1), ""), op: limiter.OpAcquire, want: 3,
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
		{name: "acquire without results", v: resp(int64(0), "e1"), op: limiter.OpAcquire, want: 1, wantErr: true},
		{name: "acquire short result", v: resp(int64(0), "e1", int64(1), int64(2), int64(0)), op: limiter.OpAcquire, want: 1, wantErr: true},
		{name: "acquire fewer results than asks", v: resp(int64(0), "e1", int64(1), int64(2), int64(0), int64(3)),
			op: limiter.OpAcquire, want: 2, wantErr: true},
		{name: "acquire more results than asks", v: resp(int64(0), "e1", int64(1), int64(2), int64(0), int64(3), int64(1), int64(1), int64(0), int64(3)),
			op: limiter.OpAcquire, want: 1, wantErr: true},
		{name: "acquire field not an integer", v: resp(int64(0), "e1", int64(1), "x", int64(0), int64(3)),
			op: limiter.OpAcquire, want: 1, wantErr: true},
		{name: "acquire field nil", v: resp(int64(0), "e1", int64(1), int64(2), nil, int64(3)),
			op: limiter.OpAcquire, want: 1, wantErr: true},
		{name: "acquire granted out of range", v: resp(int64(0), "e1", int64(2), int64(2), int64(0), int64(3)),
			op: limiter.OpAcquire, want: 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limiter.DecodeReply(tc.v, tc.op, tc.want)
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

// Every truncation of a good reply, and every element of it swapped for a
// value of the wrong type, is an error, never a panic.
func TestDecodeReplyNeverPanics(t *testing.T) {
	good := resp(int64(0), "e1", int64(1), int64(2), int64(0), int64(334), int64(0), int64(0), int64(334), int64(1000))
	if _, err := limiter.DecodeReply(good, limiter.OpAcquire, 2); err != nil {
		t.Fatalf("good reply: %v", err)
	}
	for n := range len(good) {
		if _, err := limiter.DecodeReply(good[:n], limiter.OpAcquire, 2); err == nil {
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
			if _, err := limiter.DecodeReply(v, limiter.OpAcquire, 2); err == nil {
				t.Errorf("value %d replaced by %#v: no error", i, bad)
			}
		}
	}
	for _, want := range []int{-1, 0, 1, 3} {
		if _, err := limiter.DecodeReply(good, limiter.OpAcquire, want); err == nil {
			t.Errorf("want %d requests of a reply of 2: no error", want)
		}
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
