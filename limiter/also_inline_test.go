package limiter_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// TestAlsoInlineMatchesGeneral runs random ALSO calls of token buckets
// and fixed windows (explicit and policy-governed, states in keys of
// their own and in a policy's hashes, permits past the capacity, waiting,
// SHADOW, several groups) twice on twin names: once as they are
// (also_inline.lua's fast path) and once with one more name of another
// algorithm that always grants, which sends the call down the general
// path. Every member's answer and every window's stored state must be
// the same. Each call has a name with a key of its own, and only the fast
// path reads those with MGET: the server's count of MGETs shows each call
// took the path meant. One policy's states outlast its hashes (keys of
// their own): the fast path leaves those calls to the general path.
func TestAlsoInlineMatchesGeneral(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	// The policy's generation (ms): longer than its states (40-minute
	// limits, waits of 20 minutes at most: 100 minutes), and such that
	// the first generation alive ends 30 to 50 minutes from now, so that
	// states move from one generation to the next.
	start, err := r.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	hashGenMs := int64(100 * 60 * 1000)
	for left := func() int64 { return hashGenMs - start.UnixMilli()%hashGenMs }; left() < 30*60*1000 || left() > 50*60*1000; {
		hashGenMs += 7 * 1000
	}
	rng := rand.New(rand.NewPCG(7, 32))
	type name struct {
		algo limiter.Algo
		conf func(tw string) string // its config argument on twin tw
		own  bool                   // its state is a key of its own
		long bool                   // its states may outlast its hashes
		iv   time.Duration
	}
	// Twin names: f:<i> for the fast path, g:<i> for the general one.
	var pool []name
	for i := range 12 {
		var c limiter.Config
		burst := int64(1 + rng.IntN(4))
		interval := time.Duration(1+rng.IntN(3)) * time.Hour
		if i%3 == 2 {
			interval = 40 * time.Minute
		}
		if i%2 == 0 {
			c = tokenBucket(burst, interval, burst+int64(rng.IntN(2)))
		} else {
			c = fixedWindow(burst, interval)
		}
		n := name{algo: c.Algo, own: i%3 != 2, iv: c.Interval}
		switch i % 3 {
		case 0:
			n.conf = func(string) string { return "e1" }
			for _, tw := range []string{"f:", "g:"} {
				r.setConf(t, tw+strconv.Itoa(i), c, limiter.SetConfOptions{Epoch: "e1"})
			}
		case 1: // a policy's name, keys of its own: its config comes with the call
			n.conf = func(string) string {
				return fmt.Sprintf("=p1 %d %d %d", c.Rate, c.Interval.Milliseconds(), c.Burst)
			}
		case 2: // a policy's name, its state in the policy's hashes
			n.conf = func(tw string) string {
				return fmt.Sprintf("#%sh %d p1 %d %d %d", tw, hashGenMs, c.Rate, c.Interval.Milliseconds(), c.Burst)
			}
		}
		pool = append(pool, n)
	}
	// A policy whose generations (an hour) are shorter than its states.
	lb := tokenBucket(1, 3*time.Hour, 2)
	pool = append(pool, name{algo: lb.Algo, long: true, iv: lb.Interval, conf: func(tw string) string {
		return fmt.Sprintf("#%sL 3600000 p1 %d %d %d", tw, lb.Rate, lb.Interval.Milliseconds(), lb.Burst)
	}})
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
	run := func(tw string, idx []int, groups [][]limiter.AlsoMember, extra, check bool) []limiter.AlsoGroup {
		t.Helper()
		var names []limiter.AlsoName
		for _, i := range idx {
			p := pool[i]
			names = append(names, limiter.AlsoName{Algo: p.algo, Conf: p.conf(tw), Keys: r.keys.Script(p.algo, tw+strconv.Itoa(i), 0, "e1", "")})
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
		if fast := mgets() > before; check && fast == extra {
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
	// Every name starts with a state of an earlier window (a bucket's:
	// long drained), which the first call, asking past the capacity,
	// drops.
	nowUs := start.UnixMicro()
	for i, p := range pool {
		iv := p.iv.Microseconds()
		x, y := float64(1), float64(nowUs-10*iv) // a bucket: level, ts
		if p.algo == limiter.FixedWindow {
			x, y = float64(nowUs-nowUs%iv-2*iv), 1 // start, count
		}
		for _, tw := range []string{"f:", "g:"} {
			key := r.keys.Script(p.algo, tw+strconv.Itoa(i), 0, "e1", "")[1]
			if p.own {
				r.rdb.Set(ctx, key, fmt.Sprintf("%d:%d", int64(x), int64(y)), time.Hour)
				continue
			}
			b := binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(y))
			gms, h := hashGenMs, "h"
			if p.long {
				gms, h = 3600000, "L"
			}
			r.rdb.HSet(ctx, fmt.Sprintf("%s%s:%d", tw, h, start.UnixMilli()/gms+1), key, string(b))
		}
	}
	for call := range 400 {
		idx := rng.Perm(len(pool))[:1+rng.IntN(4)]
		if call < len(pool) {
			idx = []int{call}
			if !pool[call].own {
				idx = append(idx, 0)
			}
		}
		own, long := false, false
		for _, i := range idx {
			own, long = own || pool[i].own, long || pool[i].long
		}
		if !own {
			continue
		}
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
					m.MaxWait = int64(rng.IntN(3)) * 10 * 60 * 1000
				}
				if rng.IntN(10) == 0 {
					m.Permits = 6 // past every capacity
				}
				g = append(g, m)
			}
			fg = append(fg, g)
			gg = append(gg, append([]limiter.AlsoMember(nil), g...))
		}
		if call < len(pool) {
			fg, gg = fg[:1], gg[:1]
			fg[0][0].Permits, gg[0][0].Permits, fg[0][0].MaxWait, gg[0][0].MaxWait = 6, 6, 0, 0
		}
		fast, general := run("f:", idx, fg, false, !long), run("g:", idx, gg, true, !long)
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
			if p.own {
				continue
			}
			// In the policy's hashes: the same generation, and its MARK.
			now, err := r.rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			gms, h := hashGenMs, "h"
			if p.long {
				gms, h = 3600000, "L"
			}
			gen := now.UnixMilli()/gms + 1
			for g := gen; g <= gen+1; g++ {
				fh, gh := fmt.Sprintf("f:%s:%d", h, g), fmt.Sprintf("g:%s:%d", h, g)
				fv, ferr := r.rdb.HGet(ctx, fh, fk).Result()
				gv, gerr := r.rdb.HGet(ctx, gh, gk).Result()
				fm, _ := r.rdb.HExists(ctx, fh, "").Result()
				gm, _ := r.rdb.HExists(ctx, gh, "").Result()
				ft, _ := r.rdb.PExpireTime(ctx, fh).Result()
				gt, _ := r.rdb.PExpireTime(ctx, gh).Result()
				if (ferr == nil) != (gerr == nil) || (p.algo == limiter.FixedWindow && fv != gv) || fm != gm || ft != gt {
					t.Fatalf("call %d name %d generation %d: state fast %q (%v, mark %v, expires %v), general %q (%v, mark %v, expires %v)",
						call, i, g, fv, ferr, fm, ft, gv, gerr, gm, gt)
				}
			}
		}
	}
}
