package limiter

import (
	"embed"
	"strconv"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

func lua(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("limiter: missing embedded script " + name) // a build defect, not a runtime condition
	}
	return string(b)
}

// Scripts are the Lua scripts, each wrapped once in a redis.Script (which
// runs EVALSHA and falls back to EVAL when a node answers NOSCRIPT).
type Scripts struct {
	acquire map[Algo]*redis.Script
	// multi are the multi-limit variants (see For).
	multi map[Algo]*redis.Script
	// names decide many names a policy governs in one call (see Names),
	// namesMulti those of a policy of several limits; crossNames and
	// crossNamesMulti are the same for a Redis Cluster.
	names, namesMulti, crossNames, crossNamesMulti map[Algo]*redis.Script
	// SetConf creates or replaces the config of one sub-limiter (setconf.lua).
	SetConf *redis.Script
	// Reset moves a sub-limiter to a new epoch: fresh state (reset.lua).
	Reset *redis.Script
	// Del deletes a sub-limiter's keys (del.lua).
	Del *redis.Script
	// Cell is redis-cell's CL.THROTTLE (cell.lua, standalone: no config).
	Cell *redis.Script
	// Policy creates, replaces or deletes a policy (policy.lua).
	Policy *redis.Script
	// also decides several names on one node together (also.go).
	also *redis.Script
}

// NewScripts builds every script: each algorithm between the shared
// prelude and epilogue.
func NewScripts() *Scripts {
	prelude, epilogue := lua("prelude.lua"), lua("epilogue.lua")
	// Only the fixed window (and ALSO's fixed-window store) reads the
	// calendar: defining its functions is a measurable part of a short
	// call, so the other algorithms' scripts go without.
	withCalendar := lua("calendar.lua") + prelude
	s := &Scripts{
		acquire:         map[Algo]*redis.Script{},
		multi:           map[Algo]*redis.Script{},
		names:           map[Algo]*redis.Script{},
		namesMulti:      map[Algo]*redis.Script{},
		crossNames:      map[Algo]*redis.Script{},
		crossNamesMulti: map[Algo]*redis.Script{},
		SetConf:         redis.NewScript(lua("setconf.lua")),
		Reset:           redis.NewScript(lua("reset.lua")),
		Del:             redis.NewScript(lua("del.lua")),
		Cell:            redis.NewScript(lua("cell.lua")),
		Policy:          redis.NewScript(lua("policy.lua")),
	}
	files := map[Algo]string{
		TokenBucket:   "token_bucket.lua",
		SlidingLog:    "sliding_log.lua",
		SlidingWindow: "sliding_window.lua",
		FixedWindow:   "fixed_window.lua",
		LeakyBucket:   "leaky_bucket.lua",
	}
	for algo, file := range files {
		body, head := lua(file), prelude
		if algo == FixedWindow {
			head = withCalendar
		}
		if !algo.MultiLimit() {
			s.acquire[algo] = redis.NewScript(head + body + epilogue)
			continue
		}
		// One limit, the common case, runs the algorithm as it is: no
		// wrapping, no per-call instances (about a quarter cheaper for
		// Redis). It refuses a config of several limits rather than
		// enforce only the first.
		s.acquire[algo] = redis.NewScript(head + oneLimit + body + epilogue)
		s.multi[algo] = redis.NewScript(head + wrapLimit(body) + lua("multi.lua") + multiKeys + epilogue)
		// names.lua decides a token bucket's and a fixed window's names
		// inline (bucket_names, window_names).
		inline := "local bucket_names, window_names = " + strconv.FormatBool(algo == TokenBucket) + ", " +
			strconv.FormatBool(algo == FixedWindow) + "\n"
		names := head + wrapLimit(body) + "local new_multi\n" + inline + lua("names.lua")
		namesMulti := head + wrapLimit(body) + lua("multi.lua") + "local bucket_names, window_names = false, false\n" + lua("names.lua")
		s.names[algo], s.namesMulti[algo] = redis.NewScript(names), redis.NewScript(namesMulti)
		s.crossNames[algo], s.crossNamesMulti[algo] = redis.NewScript(crossSlot+names), redis.NewScript(crossSlot+namesMulti)
	}
	s.also = newAlso(prelude, files)
	// The semaphore has ops of its own (no epilogue); it answers peek as
	// the others do, so RL.AVAILABLE reads it the same way.
	s.acquire[Concurrency] = redis.NewScript(prelude + lua("concurrency.lua"))
	return s
}

// crossSlot lets a names call on a Redis Cluster touch the keys of every
// slot of the node it runs on, not only the declared keys' slot (Redis 7;
// a node that does not serve a key still refuses it). Only clusters get
// these scripts: Redis 6 cannot compile the flag line.
const crossSlot = "#!lua flags=allow-cross-slot-keys\n"

// oneLimit guards the one-limit script of an algorithm that may have
// several limits (conf[6]: sub_limits, set only when there are several).
const oneLimit = "if conf[6] then return redis.error_reply(" +
	"'ERR internal: a limiter of several limits called with the one-limit script') end\n"

// multiKeys makes the limits of the script's own KEYS (multi.lua) the
// limiter epilogue.lua decides with.
const multiKeys = `local m = new_multi(KEYS)
if not m then return {2, conf[1]} end
local capacity, load, save, available, give, try, charge = m.capacity, m.load, m.save, m.available, m.give, m.try, m.charge
try_run = m.try_run
`

// For returns the script that serves a limiter of config c: the
// algorithm's, or its multi-limit variant when c has further Limits; nil
// when rlproxy has no script for the algorithm.
func (s *Scripts) For(c Config) *redis.Script {
	if len(c.Limits.List()) > 0 {
		return s.multi[c.Algo]
	}
	return s.acquire[c.Algo]
}

// wrapLimit makes an algorithm file the constructor of one limit,
// new_limit(rate, interval, burst, KEYS), for multi.lua: its locals become
// one instance's, and its KEYS[2..] that limit's state keys.
func wrapLimit(algo string) string {
	return "local function new_limit(rate, interval, burst, KEYS)\n" + algo +
		"\nreturn {capacity = capacity, load = load, save = save, try = try, try_run = try_run,\n" +
		"  available = available, give = give, charge = charge, reset_us = reset_us}\nend\n"
}

// Limiter returns the (one-limit) script of an algorithm, or nil when
// rlproxy has no script for it yet. For picks the script of a config.
func (s *Scripts) Limiter(algo Algo) *redis.Script {
	return s.acquire[algo]
}

// All lists every script, for loading them onto a node ahead of use
// (not the Redis Cluster ones, which a cluster loads at first use).
func (s *Scripts) All() []*redis.Script {
	all := []*redis.Script{s.SetConf, s.Reset, s.Del, s.Cell, s.Policy}
	for _, a := range Algos {
		for _, m := range []map[Algo]*redis.Script{s.acquire, s.multi, s.names, s.namesMulti} {
			if sc := m[a]; sc != nil {
				all = append(all, sc)
			}
		}
	}
	return all
}

// Names returns the script that decides acquires for many names of one
// policy of config c on one node in one call (names.lua: one shard), or
// nil for an algorithm without one. crossSlot picks the
// Redis Cluster's (see NamesArgs).
func (s *Scripts) Names(c Config, crossSlot bool) *redis.Script {
	multi := len(c.Limits.List()) > 0
	switch {
	case crossSlot && multi:
		return s.crossNamesMulti[c.Algo]
	case crossSlot:
		return s.crossNames[c.Algo]
	case multi:
		return s.namesMulti[c.Algo]
	}
	return s.names[c.Algo]
}
