package limiter_test

import (
	"fmt"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

// A names call decides each name exactly as that name's own script call
// would: names.lua reuses one limit for all its names and reads their
// state with one MGET, so state must not leak from one name to the next.
// Names start at different levels; twins (m:*) are decided one by one.
// An explicit limiter among them (its own config key) is left alone.
func TestNamesDecideEachNameAsAlone(t *testing.T) {
	r := newRig(t)
	const conf = "=e1 10 3600000 10" // a policy's 10 per hour, burst 10
	for _, algo := range limiter.Algos {
		script := r.scripts.Names(algo)
		if script == nil {
			continue
		}
		t.Run(string(algo), func(t *testing.T) {
			pre := func(name string, used int) *lim {
				l := r.open(t, string(algo)+name, algo, "e1")
				for range used {
					l.mustOK(l.call(limiter.OpAcquire, []limiter.Ask{ask(1)}, limiter.AcquireArgs(conf, []limiter.Ask{ask(1)})))
				}
				return l
			}
			asks := []limiter.Ask{ask(1), ask(1), ask(2), ask(1), ask(1), ask(1)}
			var names []limiter.NameAsks
			var twins []*lim
			for i, used := range []int{3, 0, 9, 3, 10, 4, 5, 3} {
				n := pre(fmt.Sprintf(":n:%d", i), used)
				names = append(names, limiter.NameAsks{Keys: n.keys(), Asks: asks})
				twins = append(twins, pre(fmt.Sprintf(":m:%d", i), used))
			}
			// An explicit limiter in the middle of the call.
			x := pre(":x", 2)
			if err := r.rdb.HSet(t.Context(), x.keys()[0], "epoch", "e9").Err(); err != nil {
				t.Fatal(err)
			}
			names = append(names[:4], append([]limiter.NameAsks{{Keys: x.keys(), Asks: asks}}, names[4:]...)...)
			before, _ := r.rdb.Get(t.Context(), x.keys()[1]).Result()

			keys, args := limiter.NamesArgs(conf, names)
			v, err := script.Run(t.Context(), r.rdb, keys, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			reps, err := limiter.DecodeNames(v, names)
			if err != nil {
				t.Fatal(err)
			}
			if reps[4].Status != limiter.StatusEpochChange {
				t.Errorf("explicit name: status %d, want %d", reps[4].Status, limiter.StatusEpochChange)
			}
			if after, _ := r.rdb.Get(t.Context(), x.keys()[1]).Result(); after != before {
				t.Errorf("explicit name's state changed: %q, was %q", after, before)
			}
			reps = append(reps[:4], reps[5:]...)
			for i, tw := range twins {
				want := tw.call(limiter.OpAcquire, asks, limiter.AcquireArgs(conf, asks))
				if reps[i].Status != limiter.StatusOK || want.Status != limiter.StatusOK {
					t.Fatalf("name %d: status %d (alone %d)", i, reps[i].Status, want.Status)
				}
				for j, got := range reps[i].Results {
					w := want.Results[j]
					if got.Granted != w.Granted || got.Remaining != w.Remaining || got.OverCapacity != w.OverCapacity {
						t.Errorf("name %d ask %d: granted %v remaining %d, alone granted %v remaining %d",
							i, j, got.Granted, got.Remaining, w.Granted, w.Remaining)
					}
				}
			}
			// The state each left behind decides the next ask alike, in a
			// names call of single asks (their short form): grants,
			// denials (names now full) and more than the burst.
			var next []limiter.NameAsks
			for i := range twins {
				p := int64(1 + 10*(i%3/2)) // 1, 1, 11, ...
				n := r.open(t, fmt.Sprintf("%s:n:%d", algo, i), algo, "e1")
				next = append(next, limiter.NameAsks{Keys: n.keys(), Asks: []limiter.Ask{ask(p)}})
			}
			next = append(next, limiter.NameAsks{Keys: x.keys(), Asks: []limiter.Ask{ask(1)}}) // explicit, last
			keys, args = limiter.NamesArgs(conf, next)
			if v, err = script.Run(t.Context(), r.rdb, keys, args...).Result(); err != nil {
				t.Fatal(err)
			}
			if reps, err = limiter.DecodeNames(v, next); err != nil {
				t.Fatal(err)
			}
			if st := reps[len(twins)].Status; st != limiter.StatusEpochChange {
				t.Errorf("explicit name, single ask: status %d, want %d", st, limiter.StatusEpochChange)
			}
			for i, tw := range twins {
				got := reps[i].Results[0]
				w := tw.call(limiter.OpAcquire, next[i].Asks, limiter.AcquireArgs(conf, next[i].Asks)).Results[0]
				// The durations count from each call's own time: alike within
				// the time between the calls.
				near := func(a, b int64) bool { return a == b || (a > 0 && b > 0 && a-b < 1000 && b-a < 1000) }
				if got.Granted != w.Granted || got.OverCapacity != w.OverCapacity || got.Remaining != w.Remaining ||
					!near(got.RetryAfterMs, w.RetryAfterMs) || !near(got.ResetAfterMs, w.ResetAfterMs) {
					t.Errorf("name %d, single ask of %d: %+v, alone %+v", i, next[i].Asks[0].Permits, got, w)
				}
			}
		})
	}
}
