package limiter_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// TestAlsoInlineMatchesGeneral runs random ALSO calls of token buckets
// and fixed windows (explicit and policy-governed, permits past the
// capacity, waiting, SHADOW, several groups) twice on twin names: once as
// they are (also_inline.lua's fast path) and once with one more name of
// another algorithm that always grants, which sends the call down the
// general path. Every member's answer and every window's stored state
// must be the same. The fast path is the only one that reads states with
// MGET: the server's count of MGETs shows each call took the path meant.
func TestAlsoInlineMatchesGeneral(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(7, 32))
	type name struct {
		algo limiter.Algo
		conf string
		cfg  limiter.Config
	}
	// Twin names: f:<i> for the fast path, g:<i> for the general one.
	var pool []name
	for i := range 8 {
		var c limiter.Config
		burst := int64(1 + rng.IntN(4))
		if i%2 == 0 {
			c = tokenBucket(burst, time.Duration(1+rng.IntN(3))*time.Hour, burst+int64(rng.IntN(2)))
		} else {
			c = fixedWindow(burst, time.Duration(1+rng.IntN(3))*time.Hour)
		}
		conf := "e1"
		if i%4 >= 2 {
			// A policy's name: its config comes with the call.
			conf = fmt.Sprintf("=p1 %d %d %d", c.Rate, c.Interval.Milliseconds(), c.Burst)
		} else {
			for _, tw := range []string{"f:", "g:"} {
				r.setConf(t, tw+strconv.Itoa(i), c, limiter.SetConfOptions{Epoch: "e1"})
			}
		}
		pool = append(pool, name{c.Algo, conf, c})
	}
	sw := slidingWindow(1e9, time.Hour)
	r.setConf(t, "g:other", sw, limiter.SetConfOptions{Epoch: "e1"})
	other := limiter.AlsoName{Algo: sw.Algo, Conf: "e1", Keys: r.keys.Script(sw.Algo, "g:other", 0, "e1", "")}

	mgets := func() int {
		info, err := r.rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`cmdstat_mget:calls=(\d+)`).FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	run := func(tw string, idx []int, groups [][]limiter.AlsoMember, extra bool) []limiter.AlsoGroup {
		t.Helper()
		var names []limiter.AlsoName
		for _, i := range idx {
			p := pool[i]
			names = append(names, limiter.AlsoName{Algo: p.algo, Conf: p.conf, Keys: r.keys.Script(p.algo, tw+strconv.Itoa(i), 0, "e1", "")})
		}
		if extra {
			names = append(names, other)
			for g := range groups {
				groups[g] = append(groups[g], limiter.AlsoMember{Name: len(idx), Permits: 1})
			}
		}
		before := mgets()
		k, a := limiter.AlsoArgs(names, groups)
		v, err := r.scripts.Also().Run(ctx, r.rdb, k, a...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if fast := mgets() > before; fast == extra {
			t.Fatalf("%s call: fast path taken %v, want %v", tw, fast, !extra)
		}
		nr, gs, err := limiter.DecodeAlso(v, names, groups)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range nr {
			if x.Status != limiter.StatusOK {
				t.Fatalf("%s call: name %d status %v", tw, i, x.Status)
			}
		}
		return gs
	}
	near := func(a, b int64) bool { return a-b <= 50 && b-a <= 50 }
	for call := range 400 {
		idx := rng.Perm(len(pool))[:1+rng.IntN(4)]
		ngroups := 1
		if rng.IntN(5) == 0 {
			ngroups = 2
		}
		var fg, gg [][]limiter.AlsoMember
		for range ngroups {
			var g []limiter.AlsoMember
			for j := range idx {
				if ngroups > 1 && rng.IntN(3) == 0 && len(g) > 0 {
					continue
				}
				m := limiter.AlsoMember{Name: j, Permits: int64(1 + rng.IntN(3)), Shadow: rng.IntN(6) == 0}
				if rng.IntN(4) == 0 {
					m.MaxWait = int64(rng.IntN(4)) * 20 * 60 * 1000
				}
				if rng.IntN(10) == 0 {
					m.Permits = 6 // past every capacity
				}
				g = append(g, m)
			}
			fg = append(fg, g)
			gg = append(gg, append([]limiter.AlsoMember(nil), g...))
		}
		fast, general := run("f:", idx, fg, false), run("g:", idx, gg, true)
		for gi := range fast {
			f, g := fast[gi], general[gi]
			if f.Granted != g.Granted || f.Undecided != g.Undecided {
				t.Fatalf("call %d group %d: fast %+v, general %+v", call, gi, f, g)
			}
			for j, fm := range f.Members {
				gm := g.Members[j]
				if fm.Granted != gm.Granted || fm.OverCapacity != gm.OverCapacity || fm.Remaining != gm.Remaining ||
					!near(fm.RetryAfterMs, gm.RetryAfterMs) || !near(fm.ResetAfterMs, gm.ResetAfterMs) {
					t.Fatalf("call %d group %d member %d (%s): fast %+v, general %+v", call, gi, j, pool[idx[fg[gi][j].Name]].algo, fm, gm)
				}
			}
		}
		for _, i := range idx {
			p := pool[i]
			fk, gk := r.keys.Script(p.algo, "f:"+strconv.Itoa(i), 0, "e1", "")[1], r.keys.Script(p.algo, "g:"+strconv.Itoa(i), 0, "e1", "")[1]
			fv, ferr := r.rdb.Get(ctx, fk).Result()
			gv, gerr := r.rdb.Get(ctx, gk).Result()
			if (ferr == nil) != (gerr == nil) || (p.algo == limiter.FixedWindow && fv != gv) {
				t.Fatalf("call %d name %d: state fast %q (%v), general %q (%v)", call, i, fv, ferr, gv, gerr)
			}
		}
	}
}
