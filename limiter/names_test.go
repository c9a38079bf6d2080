package limiter_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// A names call decides each name exactly as that name's own script call
// would: names.lua reuses one limit for all its names and reads their
// state with one MGET, so state must not leak from one name to the next.
// Names start at different levels; twins (m:*) are decided one by one.
// An explicit limiter among them (its own config key) is left alone.
// Every way a policy's names keep string state is checked: keys, and
// fields of the policy's generation hashes ('#', prelude.lua, packed);
// and keys as a Redis Cluster's names call tells
// them (in ARGV, each name read alone: the "cluster" mode).
func TestNamesDecideEachNameAsAlone(t *testing.T) {
	r := newRig(t)
	confs := map[string]string{ // a policy's 10 per hour, burst 10
		"keys":    "=e1 10 3600000 10",
		"cluster": "=e1 10 3600000 10",
		"hashes":  "#rl:{policies}:s:e1.7200001p 7200001 e1 10 3600000 10", // generations as long as two windows
	}
	for _, algo := range limiter.Algos {
		for mode, conf := range confs {
			script := r.scripts.Names(limiter.Config{Algo: algo}, mode == "cluster")
			if script == nil {
				continue
			}
			inHashes := mode == "hashes"
			if inHashes && !algo.StringState() {
				continue
			}
			t.Run(string(algo)+"/"+mode, func(t *testing.T) {
				pre := func(name string, used int) *lim {
					l := r.open(t, mode+string(algo)+name, algo, "e1")
					for range used {
						l.mustOK(l.call(limiter.OpAcquire, []limiter.Ask{ask(1)}, limiter.AcquireArgs(conf, []limiter.Ask{ask(1)})))
					}
					return l
				}
				// The last two may wait (RL.ACQUIRE ... TIMEOUT): a bucket
				// books ahead for them, as alone.
				asks := []limiter.Ask{ask(1), ask(1), ask(2), ask(1), ask(1), ask(1), askWait(1, 2*time.Hour), askWait(1, 2*time.Hour)}
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
				before := r.state(t, x.keys()[1])

				reps := r.names(t, script, conf, names, mode == "cluster")
				if inHashes {
					for _, n := range names {
						if ex, _ := r.rdb.Exists(t.Context(), n.Keys[1]).Result(); ex != 0 || r.state(t, n.Keys[1]) == "" && n.Keys[0] != x.keys()[0] {
							t.Errorf("%s: not a field of a generation hash (a key: %v)", n.Keys[1], ex != 0)
						}
						if v := r.state(t, n.Keys[1]); v != "" && decimalState.MatchString(v) {
							t.Errorf("%s mode keeps state %q", mode, v)
						}
					}
				}
				if reps[4].Status != limiter.StatusEpochChange {
					t.Errorf("explicit name: status %d, want %d", reps[4].Status, limiter.StatusEpochChange)
				}
				if after := r.state(t, x.keys()[1]); after != before {
					t.Errorf("explicit name's state changed: %q, was %q", after, before)
				}
				reps = append(reps[:4], reps[5:]...)
				sameAsAlone(t, reps, twins, conf, asks)
				// The state each left behind decides the next ask alike, in a
				// names call of single asks (their short form): grants,
				// denials (names now full) and more than the burst; twice, so
				// that what the short form writes is checked too.
				for range 2 {
					var next []limiter.NameAsks
					for i := range twins {
						p := int64(1 + 10*(i%3/2)) // 1, 1, 11, ...
						n := r.open(t, fmt.Sprintf("%s%s:n:%d", mode, algo, i), algo, "e1")
						next = append(next, limiter.NameAsks{Keys: n.keys(), Asks: []limiter.Ask{ask(p)}})
					}
					next = append(next, limiter.NameAsks{Keys: x.keys(), Asks: []limiter.Ask{ask(1)}}) // explicit, last
					reps = r.names(t, script, conf, next, mode == "cluster")
					if st := reps[len(twins)].Status; st != limiter.StatusEpochChange {
						t.Errorf("explicit name, single ask: status %d, want %d", st, limiter.StatusEpochChange)
					}
					singleAsAlone(t, reps, twins, conf, next)
				}
			})
		}
	}
}

// TestNamesShortFormKeepsState: names asked once (a token bucket's are
// decided inline, names.lua) leave the state a name alone leaves: call
// after call, each decides as its twin decided alone.
func TestNamesShortFormKeepsState(t *testing.T) {
	r := newRig(t)
	const conf = "#rl:{policies}:s:k1.7200001p 7200001 k1 10 3600000 10" // 10 per hour, burst 10
	script := r.scripts.Names(limiter.Config{Algo: limiter.TokenBucket}, false)
	var names []limiter.NameAsks
	var twins []*lim
	for i := range 6 {
		p := int64(1 + i%3) // 1, 2, 3 permits
		n := r.open(t, fmt.Sprintf("short:n:%d", i), limiter.TokenBucket, "k1")
		names = append(names, limiter.NameAsks{Keys: n.keys(), Asks: []limiter.Ask{ask(p)}})
		twins = append(twins, r.open(t, fmt.Sprintf("short:m:%d", i), limiter.TokenBucket, "k1"))
	}
	for call := range 5 { // grants, then denials as names fill
		reps := r.names(t, script, conf, names, false)
		for i, tw := range twins {
			got := reps[i].Results[0]
			w := tw.call(limiter.OpAcquire, names[i].Asks, limiter.AcquireArgs(conf, names[i].Asks)).Results[0]
			if got.Granted != w.Granted || got.Remaining != w.Remaining {
				t.Errorf("call %d, name %d: %+v, alone %+v", call, i, got, w)
			}
		}
	}
}

// decimalState is a string state written in decimals ("level:ts",
// "start:prev:cur"); a packed one is 16 or 24 bytes of doubles.
var decimalState = regexp.MustCompile(`^[-+.0-9e]+(:[-+.0-9e]+){1,2}$`)

// sameAsAlone checks that each name's replies in a names call (reps) are
// what its twin's own script call decides for the same asks, and returns
// how many asks the call granted.
func sameAsAlone(t *testing.T, reps []limiter.Reply, twins []*lim, conf string, asks []limiter.Ask) (granted int) {
	t.Helper()
	for i, tw := range twins {
		want := tw.call(limiter.OpAcquire, asks, limiter.AcquireArgs(conf, asks))
		if reps[i].Status != limiter.StatusOK || want.Status != limiter.StatusOK {
			t.Fatalf("name %d: status %d (alone %d)", i, reps[i].Status, want.Status)
		}
		for j, got := range reps[i].Results {
			w := want.Results[j]
			if got.Granted {
				granted++
			}
			if got.Granted != w.Granted || got.Remaining != w.Remaining || got.OverCapacity != w.OverCapacity {
				t.Errorf("name %d ask %d: granted %v remaining %d, alone granted %v remaining %d",
					i, j, got.Granted, got.Remaining, w.Granted, w.Remaining)
			}
		}
	}
	return granted
}

// names runs a names call of script and decodes its reply.
// crossSlot tells the other names' keys in ARGV, as on a Redis Cluster.
func (r *rig) names(t *testing.T, script *redis.Script, conf string, names []limiter.NameAsks, crossSlot bool) []limiter.Reply {
	t.Helper()
	keys, args := limiter.NamesArgs(conf, names, crossSlot)
	v, err := script.Run(t.Context(), r.rdb, keys, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	reps, err := limiter.DecodeNames(v, names)
	if err != nil {
		t.Fatal(err)
	}
	return reps
}

// state is the state of key wherever it is kept: the key itself, or a
// field of a policy's generation hash.
func (r *rig) state(t *testing.T, key string) string {
	if v, err := r.rdb.Get(t.Context(), key).Result(); err == nil {
		return v
	}
	hashes, err := r.rdb.Keys(t.Context(), "rl:{policies}:s:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hashes {
		if v, err := r.rdb.HGet(t.Context(), h, key).Result(); err == nil {
			return v
		}
	}
	return ""
}

// A policy's name whose state is kept in generation hashes: the state
// follows the name across generations (nothing is forgotten when one
// ends), a state that outlives both generations alive (debt) is a key of
// its own while it lasts, and clear removes it wherever it is.
func TestPolicyStateInHashes(t *testing.T) {
	r := newRig(t)
	const conf = "#rl:{policies}:s:e1.101 101 e1 10 100 10" // 10 per 100 ms, generations of 101 ms
	hashed := r.open(t, "h", limiter.TokenBucket, "e1")
	keyed := r.open(t, "k", limiter.TokenBucket, "e1")
	call := func(l *lim, c string, op limiter.Op, args []any, asks ...limiter.Ask) limiter.Reply {
		t.Helper()
		rep := l.call(op, asks, args)
		if rep.Status != limiter.StatusOK {
			t.Fatalf("%s: status %d", op, rep.Status)
		}
		return rep
	}
	take := func(l *lim, c string) bool {
		asks := []limiter.Ask{ask(3)}
		return call(l, c, limiter.OpAcquire, limiter.AcquireArgs(c, asks), asks...).Results[0].Granted
	}
	// Over 6 generations, asks of 3 permits every 10 ms (9 per 30 ms for
	// a refill of 3 per 30 ms): the bucket stays near empty, so a state
	// forgotten at a generation's end would show as extra grants.
	grants := map[string]int{}
	start := time.Now()
	for time.Since(start) < 600*time.Millisecond {
		for _, l := range []*lim{hashed, keyed} {
			c := conf
			if l == keyed {
				c = "=e1 10 100 10"
			}
			if take(l, c) {
				grants[l.name]++
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if max := int(10+elapsed.Milliseconds()/10) / 3; grants["h"] > max+1 {
		t.Errorf("%d grants of 3 permits in %v from a bucket of 10 refilled 10 per 100 ms (at most %d)", grants["h"], elapsed, max)
	}
	if d := grants["h"] - grants["k"]; d > 2 || d < -2 {
		t.Errorf("state in hashes: %d grants, in keys: %d", grants["h"], grants["k"])
	}
	if ex, _ := r.rdb.Exists(t.Context(), hashed.state()...).Result(); ex != 0 {
		t.Errorf("a short state is a key of its own")
	}
	// A generation that ended is unlinked by the next call that writes
	// (it would expire only a generation later): a fresh name's grant,
	// made once Redis's clock is past the end of idle's generation and
	// before the next one's, when expiry would remove it anyway (then the
	// check is tried again: a slow machine).
	redisMs := func() int64 { return r.rdb.Time(t.Context()).Val().UnixMilli() }
	checked := false
	for attempt := 0; attempt < 5 && !checked; attempt++ {
		idle := r.open(t, fmt.Sprint("idle", attempt), limiter.TokenBucket, "e1")
		take(idle, conf)
		gens, _ := r.rdb.Keys(t.Context(), "rl:{policies}:s:e1.101:[0-9]*").Result()
		var old string
		var n int64
		for _, g := range gens {
			if ok, _ := r.rdb.HExists(t.Context(), g, idle.state()[0]).Result(); ok {
				old = g
				fmt.Sscanf(g, "rl:{policies}:s:e1.101:%d", &n)
			}
		}
		if old == "" {
			t.Fatal("idle's state is in no generation hash")
		}
		for redisMs() <= n*101 { // generation n ends at n × 101 ms
			time.Sleep(5 * time.Millisecond)
		}
		if !take(r.open(t, fmt.Sprint("writer", attempt), limiter.TokenBucket, "e1"), conf) {
			t.Fatal("a fresh name was denied")
		}
		if redisMs() >= (n+1)*101 {
			continue // generation n+1 ended too: expiry may have removed n
		}
		checked = true
		if ex, _ := r.rdb.Exists(t.Context(), old).Result(); ex != 0 {
			t.Errorf("generation %q (idle's) ended but is still there after a write", old)
		}
	}
	if !checked {
		t.Error("no call came within the generation after idle's in 5 tries")
	}

	// Charging 40 permits to a bucket of 10 leaves 40-50 in use, 400-500
	// ms to drain, past both generations: a key, and the flag that says
	// keys are to be looked at, as long as it lasts.
	call(hashed, conf, limiter.OpCharge, limiter.ChargeArgs(conf, 40), ask(40))
	if ex, _ := r.rdb.Exists(t.Context(), hashed.state()[0], "rl:{policies}:s:e1.101:long").Result(); ex != 2 {
		t.Fatalf("debt: %d of its key and the flag exist, want 2", ex)
	}
	time.Sleep(150 * time.Millisecond) // both generations alive at the charge have ended
	if take(hashed, conf) {
		t.Errorf("granted with 25 or more permits of debt left")
	}
	time.Sleep(400 * time.Millisecond)
	if !take(hashed, conf) {
		t.Errorf("denied after the debt was paid")
	}
	if ex, _ := r.rdb.Exists(t.Context(), hashed.state()[0]).Result(); ex != 0 {
		t.Errorf("the state is back in a hash, but its key remains")
	}

	clear := func() int64 {
		return call(hashed, conf, limiter.OpClear, limiter.Args(limiter.OpClear, conf)).Count
	}
	if n := clear(); n != 1 {
		t.Errorf("clear: %d, want 1", n)
	}
	if n := clear(); n != 0 {
		t.Errorf("clear again: %d, want 0", n)
	}
	if v := r.state(t, hashed.state()[0]); v != "" {
		t.Errorf("state after clear: %q", v)
	}
}

// Generations as long as rlproxy makes them (genMs caps at 2^50 ms) work:

// Whichever place a name with a config of its own (an explicit limiter)
// has in a names call, first too, or alone, it is left to the caller and
// its state untouched; the others are decided.
func TestNamesExplicitAnywhere(t *testing.T) {
	r := newRig(t)
	script := r.scripts.Names(limiter.Config{Algo: limiter.TokenBucket}, false)
	for _, conf := range []string{"=x1 10 3600000 10", "#rl:{policies}:s:x1.7200001p 7200001 x1 10 3600000 10"} {
		for _, n := range []int{1, 3} {
			for at := range n {
				var names []limiter.NameAsks
				for k := range n {
					l := r.open(t, fmt.Sprintf("ex:%s:%d:%d:%d", conf[:1], n, at, k), limiter.TokenBucket, "x1")
					if k == at {
						r.rdb.HSet(t.Context(), l.keys()[0], "epoch", "e9")
					}
					names = append(names, limiter.NameAsks{Keys: l.keys(), Asks: []limiter.Ask{ask(1)}})
				}
				for k, rep := range r.names(t, script, conf, names, false) {
					explicit := k == at
					if explicit && (rep.Status != limiter.StatusEpochChange || r.state(t, names[k].Keys[1]) != "") ||
						!explicit && (rep.Status != limiter.StatusOK || !rep.Results[0].Granted) {
						t.Errorf("%s: %d names, explicit at %d: name %d answered %+v", conf, n, at, k, rep)
					}
				}
			}
		}
	}
}

// A names call keeps the generation hashes' upkeep: the hash it writes
// expires one generation after its end, and the generation before it is
// gone (UNLINK), also when the hash already held states (written while
// it was the next generation) — without re-doing either on every call.
func TestGenerationHashUpkeep(t *testing.T) {
	r := newRig(t)
	const genMs = 3600001
	// 10 per second: a state lives at most 1 s, so it goes into the
	// generation alive unless that ends within a second (skipped below).
	const conf = "#rl:{policies}:s:u1.3600001p 3600001 u1 10 1000 10"
	script := r.scripts.Names(limiter.Config{Algo: limiter.TokenBucket}, false)
	genIn := func(d time.Duration) int64 { // the generation alive d from now
		tm, err := r.rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.Add(d).UnixMilli()/genMs + 1
	}
	gen := func() int64 { return genIn(0) }
	hash := func(g int64) string { return fmt.Sprintf("rl:{policies}:s:u1.3600001p:%d", g) }
	for round := range 3 {
		g := gen()
		// The previous generation still there, and the first alive already
		// holding a state without the upkeep done (an earlier build's).
		r.rdb.HSet(t.Context(), hash(g-1), "old", "x")
		if round > 0 {
			r.rdb.HSet(t.Context(), hash(g), "other", "x")
		}
		for i := range 2 { // the second call finds the hash marked
			var names []limiter.NameAsks
			for k := range 3 {
				names = append(names, limiter.NameAsks{Keys: r.open(t, fmt.Sprintf("up%d:%d:%d", round, i, k), limiter.TokenBucket, "u1").keys(), Asks: []limiter.Ask{ask(1)}})
			}
			for _, rep := range r.names(t, script, conf, names, false) {
				if rep.Status != limiter.StatusOK || !rep.Results[0].Granted {
					t.Fatalf("round %d: %+v", round, rep)
				}
			}
		}
		if gen() != g || gen() != genIn(2*time.Second) {
			continue // a generation ends about now (once an hour)
		}
		if n, _ := r.rdb.Exists(t.Context(), hash(g-1)).Result(); n != 0 {
			t.Errorf("round %d: the previous generation is still there", round)
		}
		at, err := r.rdb.PExpireTime(t.Context(), hash(g)).Result()
		if err != nil || at.Milliseconds() != (g+1)*genMs {
			t.Errorf("round %d: generation %d expires at %v (%v), want %d ms", round, g, at, err, (g+1)*genMs)
		}
		r.rdb.Del(t.Context(), hash(g))
	}
}

// their names and ends (past 10^15 ms) are whole numbers Redis takes.
func TestPolicyStateLongGenerations(t *testing.T) {
	r := newRig(t)
	const g = 1<<50 + 1
	conf := fmt.Sprintf("#rl:{policies}:s:e1.%d %d e1 1 3153600000000 1000000", g, g) // 1 per 100 years, burst 1,000,000
	l := r.open(t, "long", limiter.TokenBucket, "e1")
	asks := []limiter.Ask{ask(5)}
	if rep := l.call(limiter.OpAcquire, asks, limiter.AcquireArgs(conf, asks)); rep.Status != limiter.StatusOK || !rep.Results[0].Granted {
		t.Fatalf("acquire: %+v", rep)
	}
	if v := r.state(t, l.state()[0]); v == "" {
		t.Errorf("no state kept")
	}
}

// A policy of several limits (10 per hour, and 3 per minute) is decided
// by one names call too, each name as the multi-limit script decides it
// alone: a name is granted only while every limit has room.
func TestNamesMultiLimit(t *testing.T) {
	r := newRig(t)
	confs := map[string]string{
		"keys":    "=e1 10 3600000 10 3:60000",
		"cluster": "=e1 10 3600000 10 3:60000",
		"hashes":  "#rl:{policies}:s:e1.7200001p 7200001 e1 10 3600000 10 3:60000",
	}
	for _, algo := range []limiter.Algo{limiter.TokenBucket, limiter.FixedWindow, limiter.SlidingWindow} {
		c := multi(limiter.Config{Algo: algo, Rate: 10, Interval: time.Hour, Burst: 10, Shards: 1, Mode: limiter.Overall},
			limiter.Limit{Rate: 3, Interval: time.Minute})
		for mode, conf := range confs {
			script := r.scripts.Names(c, mode == "cluster")
			t.Run(string(algo)+"/"+mode, func(t *testing.T) {
				open := func(name string) *lim {
					l := r.open(t, "multi"+mode+string(algo)+name, algo, "e1")
					l.limits, l.script = 2, r.scripts.For(c)
					return l
				}
				asks := []limiter.Ask{ask(1), ask(1), ask(2), ask(1)}
				var names []limiter.NameAsks
				var twins []*lim
				for i, used := range []int{0, 1, 2, 3} {
					n, tw := open(fmt.Sprintf(":n:%d", i)), open(fmt.Sprintf(":m:%d", i))
					for range used {
						for _, l := range []*lim{n, tw} {
							l.mustOK(l.call(limiter.OpAcquire, []limiter.Ask{ask(1)}, limiter.AcquireArgs(conf, []limiter.Ask{ask(1)})))
						}
					}
					names = append(names, limiter.NameAsks{Keys: n.keys(), Asks: asks})
					twins = append(twins, tw)
				}
				reps := r.names(t, script, conf, names, mode == "cluster")
				granted := sameAsAlone(t, reps, twins, conf, asks)
				// 3 per minute decides: the names that had used 0, 1, 2 and 3
				// are granted 1, 1 and the last 1 (not 2); 1, 1; 1; nothing.
				if granted != 6 {
					t.Errorf("%d asks granted over the 4 names, want 6 (the minute's limit of 3 decides)", granted)
				}
				// An ask that may wait (RL.ACQUIRE ... TIMEOUT) is decided
				// as alone too: a bucket books it ahead in every limit.
				wait := []limiter.Ask{askWait(1, 2*time.Hour)}
				for i := range names {
					names[i].Asks = wait
				}
				sameAsAlone(t, r.names(t, script, conf, names, mode == "cluster"), twins, conf, wait)
			})
		}
	}
}

// On a Redis Cluster a names call runs on one master, the first name's
// keys declared and the others' told in ARGV: the names of that master's
// slots are decided, and one whose slot another master serves (the
// caller's slot map is old) is left to the caller (2), with nothing
// written for it: Redis refuses its read before the script writes.
func TestNamesOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cc := cluster.Client(t)
	ctx := t.Context()
	keys := limiter.Keys{Prefix: "t:"}
	master := func(name string) *redis.Client {
		m, err := cc.MasterForKey(ctx, keys.Script(limiter.TokenBucket, name, 0, "e1", "")[0])
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	here := master("n:0")
	var names []limiter.NameAsks // two of here's, one of another master's, one of here's
	var away string
	for i := 1; len(names) < 3 || away == ""; i++ {
		name := fmt.Sprintf("n:%d", i)
		other := master(name).Options().Addr != here.Options().Addr
		if other && away == "" {
			away = name
		} else if !other && len(names) < 3 {
			names = append(names, limiter.NameAsks{Keys: keys.Script(limiter.TokenBucket, name, 0, "e1", ""), Asks: []limiter.Ask{ask(1)}})
		}
	}
	awayKeys := keys.Script(limiter.TokenBucket, away, 0, "e1", "")
	names = append(names[:2], limiter.NameAsks{Keys: awayKeys, Asks: []limiter.Ask{ask(1), ask(1)}}, names[2])

	script := limiter.NewScripts().Names(limiter.Config{Algo: limiter.TokenBucket}, true)
	k, args := limiter.NamesArgs("=e1 10 3600000 10", names, true)
	v, err := script.Run(ctx, here, k, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	reps, err := limiter.DecodeNames(v, names)
	if err != nil {
		t.Fatal(err)
	}
	for i, rep := range reps {
		if i == 2 {
			if rep.Status != limiter.StatusEpochChange {
				t.Errorf("%s, another master's: status %d, want %d (left to the caller)", away, rep.Status, limiter.StatusEpochChange)
			}
			continue
		}
		if rep.Status != limiter.StatusOK || !rep.Results[0].Granted || rep.Results[0].Remaining != 9 {
			t.Errorf("name %d: %+v, want granted with 9 left", i, rep)
		}
		if n, err := cc.Exists(ctx, names[i].Keys[1]).Result(); err != nil || n != 1 {
			t.Errorf("name %d: its state %s exists %d (%v), want kept", i, names[i].Keys[1], n, err)
		}
	}
	if n, err := cc.Exists(ctx, awayKeys[1]).Result(); err != nil || n != 0 {
		t.Errorf("%s: its state exists %d (%v), want nothing written", away, n, err)
	}
}

// A packed state decides exactly as the same state in decimals: two
// names of one policy's shape, one kept each way, take the same asks —
// acquires that fit, that do not, that wait (booked ahead), a charge into
// debt and a release — and answer alike, for every string-state
// algorithm. The states they leave hold the same numbers.
func TestPackedStateDecidesAsDecimal(t *testing.T) {
	r := newRig(t)
	const (
		decimal = "=e1 10 3600000 10" // state in keys: decimals
		packed  = "#rl:{policies}:s:e1.7200001p 7200001 e1 10 3600000 10"
	)
	type op struct {
		op   limiter.Op
		asks []limiter.Ask
	}
	ops := []op{
		{limiter.OpAcquire, []limiter.Ask{ask(3)}},
		{limiter.OpAcquire, []limiter.Ask{ask(1), ask(2), ask(4), ask(1)}},
		{limiter.OpAcquire, []limiter.Ask{ask(11)}}, // over capacity
		{limiter.OpAcquire, []limiter.Ask{askWait(2, time.Hour), askWait(1, time.Hour)}},
		{limiter.OpRelease, []limiter.Ask{ask(2)}},
		{limiter.OpCharge, []limiter.Ask{ask(4)}},
		{limiter.OpAcquire, []limiter.Ask{ask(1)}},
		{limiter.OpPeek, nil},
	}
	for _, algo := range limiter.Algos {
		if !algo.StringState() {
			continue
		}
		t.Run(string(algo), func(t *testing.T) {
			d, p := r.open(t, "d"+string(algo), algo, "e1"), r.open(t, "p"+string(algo), algo, "e1")
			// Durations count from each call's own time: the two names'
			// differ by at most the time the calls took (a busy machine's).
			start := time.Now()
			drift := func() int64 { return time.Since(start).Milliseconds() + 1 }
			args := func(conf string, o op) []any {
				switch o.op {
				case limiter.OpAcquire:
					return limiter.AcquireArgs(conf, o.asks)
				case limiter.OpCharge:
					return limiter.ChargeArgs(conf, o.asks[0].Permits)
				case limiter.OpRelease:
					return limiter.Args(o.op, conf, o.asks[0].Permits)
				}
				return limiter.Args(o.op, conf)
			}
			for i, o := range ops {
				got, want := p.call(o.op, o.asks, args(packed, o)), d.call(o.op, o.asks, args(decimal, o))
				if got.Status != limiter.StatusOK || want.Status != limiter.StatusOK || got.Count != want.Count || len(got.Results) != len(want.Results) {
					t.Fatalf("op %d (%s): packed %+v, decimal %+v", i, o.op, got, want)
				}
				for j, g := range got.Results {
					w := want.Results[j]
					near := func(a, b int64) bool { return a-b <= drift() && b-a <= drift() }
					if g.Granted != w.Granted || g.OverCapacity != w.OverCapacity || g.Remaining != w.Remaining ||
						!near(g.RetryAfterMs, w.RetryAfterMs) || !near(g.ResetAfterMs, w.ResetAfterMs) {
						t.Errorf("op %d (%s) ask %d: packed %+v, decimal %+v", i, o.op, j, g, w)
					}
				}
			}
			dv, pv := r.state(t, d.state()[0]), r.state(t, p.state()[0])
			if !decimalState.MatchString(dv) || decimalState.MatchString(pv) || len(pv) != 8*(strings.Count(dv, ":")+1) {
				t.Fatalf("states %q (decimal), %q (packed)", dv, pv)
			}
			for k, s := range strings.Split(dv, ":") {
				want, _ := strconv.ParseFloat(s, 64)
				got := math.Float64frombits(binary.LittleEndian.Uint64([]byte(pv[8*k:])))
				// Timestamps (µs) differ by the time between the calls; the
				// counts are the same.
				if math.Abs(got-want) > float64(1000*drift()) || (math.Abs(want) < 1e12 && math.Abs(got-want) > 1e-3) {
					t.Errorf("state number %d: packed %v, decimal %v", k, got, want)
				}
			}
		})
	}
}

// Names whose states cross generations (2 per second, burst 2, in
// generations of 1,001 ms: a state lasts up to 1 s, so most go into the
// second generation alive, move on as they grow and are dropped when the
// generation before the first alive goes) never grant more than the
// bucket allows, by the backend's clock: in any stretch of d ms a name
// grants at most 2 + 2d/1000. Names are asked again and again until two
// generations have ended.
func TestNamesAcrossGenerations(t *testing.T) {
	r := newRig(t)
	const genMs = 1001
	const conf = "#rl:{policies}:s:x1.1001p 1001 x1 2 1000 2"
	script := r.scripts.Names(limiter.Config{Algo: limiter.TokenBucket}, false)
	clock := func() int64 { // µs
		tm, err := r.rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMicro()
	}
	var names []limiter.NameAsks
	for k := range 6 {
		names = append(names, limiter.NameAsks{Keys: r.open(t, fmt.Sprintf("gen:%d", k), limiter.TokenBucket, "x1").keys(), Asks: []limiter.Ask{ask(1)}})
	}
	type grant struct{ from, to int64 } // the call's bounds, µs
	grants := make([][]grant, len(names))
	start := clock()
	for end := (start/1000/genMs + 3) * genMs * 1000; ; {
		from := clock()
		reps := r.names(t, script, conf, names, false)
		to := clock()
		for k, rep := range reps {
			if rep.Status != limiter.StatusOK {
				t.Fatalf("name %d: %+v", k, rep)
			}
			if rep.Results[0].Granted {
				grants[k] = append(grants[k], grant{from, to})
			}
		}
		if from > end {
			break
		}
	}
	for k, gs := range grants {
		for i := range gs {
			for j := i + 1; j < len(gs); j++ {
				// at most 2 + 2d/1000 grants in d ms, d at its longest
				if d := gs[j].to - gs[i].from; float64(j-i+1) > 2+2*float64(d)/1e6+1e-6 {
					t.Fatalf("name %d: %d grants within %d µs (2 + %.2f allowed)", k, j-i+1, d, 2*float64(d)/1e6)
				}
			}
		}
		if len(gs) < 4 {
			t.Errorf("name %d: %d grants in %d ms", k, len(gs), (clock()-start)/1000)
		}
	}
}

// TestNamesInlineSameAsAlone: names asked once, which a token bucket's
// and a fixed window's names calls decide inline (names.lua), decide as
// each name's own script call does, from random states (used, full,
// in debt by RL.CHARGE) and for random permits (some past the rate).
func TestNamesInlineSameAsAlone(t *testing.T) {
	r := newRig(t)
	const conf = "#rl:{policies}:s:i1.7200001p 7200001 i1 10 3600000 10" // 10 per hour, burst 10
	rnd := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for _, algo := range []limiter.Algo{limiter.FixedWindow, limiter.TokenBucket} {
		t.Run(string(algo), func(t *testing.T) {
			script := r.scripts.Names(limiter.Config{Algo: algo}, false)
			var names []*lim
			var twins []*lim
			for i := range 24 {
				n := r.open(t, fmt.Sprintf("inl:%s:n:%d", algo, i), algo, "i1")
				m := r.open(t, fmt.Sprintf("inl:%s:m:%d", algo, i), algo, "i1")
				used, charged := int64(rnd.IntN(12)), int64(rnd.IntN(4)*rnd.IntN(15))
				for _, l := range []*lim{n, m} {
					if used > 0 {
						l.mustOK(l.call(limiter.OpAcquire, []limiter.Ask{ask(used)}, limiter.AcquireArgs(conf, []limiter.Ask{ask(used)})))
					}
					if charged > 0 {
						l.mustOK(l.call(limiter.OpCharge, []limiter.Ask{ask(charged)}, limiter.ChargeArgs(conf, charged)))
					}
				}
				if algo == limiter.FixedWindow && used+charged > 0 && rnd.IntN(2) == 0 {
					// A window 1–3 hours back with its count, up to 3 windows' debt;
					// or this hour's, started off the hour as under a shorter
					// interval (KEEPSTATE): aligned to the hour again.
					now := r.clock(t)
					start := now.Truncate(time.Hour).Add(-time.Duration(1+rnd.IntN(3)) * time.Hour)
					if rnd.IntN(2) == 0 {
						start = now.Truncate(time.Hour).Add(now.Sub(now.Truncate(time.Hour)) / 2).Truncate(time.Second)
					}
					state := make([]byte, 16)
					binary.LittleEndian.PutUint64(state, math.Float64bits(float64(start.UnixMicro())))
					binary.LittleEndian.PutUint64(state[8:], math.Float64bits(float64(rnd.IntN(40))))
					r.setState(t, n.keys()[1], string(state))
					r.setState(t, m.keys()[1], string(state))
				}
				names, twins = append(names, n), append(twins, m)
			}
			for call := range 4 {
				var asks []limiter.NameAsks
				for _, n := range names {
					asks = append(asks, limiter.NameAsks{Keys: n.keys(), Asks: []limiter.Ask{ask(int64(1 + rnd.IntN(12)))}})
				}
				t.Logf("call %d", call)
				singleAsAlone(t, r.names(t, script, conf, asks, false), twins, conf, asks)
			}
		})
	}
}

// singleAsAlone checks that each name's single ask in a names call
// (reps) is decided as its twin's own script call decides it.
func singleAsAlone(t *testing.T, reps []limiter.Reply, twins []*lim, conf string, asks []limiter.NameAsks) {
	t.Helper()
	for i, tw := range twins {
		got := reps[i].Results[0]
		w := tw.call(limiter.OpAcquire, asks[i].Asks, limiter.AcquireArgs(conf, asks[i].Asks)).Results[0]
		// The durations count from each call's own time: alike within
		// the time between the calls.
		near := func(a, b int64) bool { return a == b || (a > 0 && b > 0 && a-b < 1000 && b-a < 1000) }
		if got.Granted != w.Granted || got.OverCapacity != w.OverCapacity || got.Remaining != w.Remaining ||
			!near(got.RetryAfterMs, w.RetryAfterMs) || !near(got.ResetAfterMs, w.ResetAfterMs) {
			t.Errorf("name %d, single ask of %d: %+v, alone %+v", i, asks[i].Asks[0].Permits, got, w)
		}
	}
}

// setState sets the state of a policy's name where it is kept (a key
// of its own or a generation hash), if it has one.
func (r *rig) setState(t *testing.T, key, v string) {
	t.Helper()
	if n, _ := r.rdb.Exists(t.Context(), key).Result(); n == 1 {
		r.rdb.SetArgs(t.Context(), key, v, redis.SetArgs{KeepTTL: true})
		return
	}
	hashes, err := r.rdb.Keys(t.Context(), "rl:{policies}:s:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hashes {
		if ok, _ := r.rdb.HExists(t.Context(), h, key).Result(); ok {
			r.rdb.HSet(t.Context(), h, key, v)
			return
		}
	}
}
