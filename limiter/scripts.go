package limiter

import (
	"embed"

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
	// SetConf creates or replaces the config of one sub-limiter (setconf.lua).
	SetConf *redis.Script
	// Reset moves a sub-limiter to a new epoch: fresh state (reset.lua).
	Reset *redis.Script
	// Cell is redis-cell's CL.THROTTLE (cell.lua, standalone: no config).
	Cell *redis.Script
}

// NewScripts builds every script: each algorithm between the shared
// prelude and epilogue.
func NewScripts() *Scripts {
	prelude, epilogue := lua("prelude.lua"), lua("epilogue.lua")
	s := &Scripts{
		acquire: map[Algo]*redis.Script{},
		SetConf: redis.NewScript(lua("setconf.lua")),
		Reset:   redis.NewScript(lua("reset.lua")),
		Cell:    redis.NewScript(lua("cell.lua")),
	}
	files := map[Algo]string{
		TokenBucket:   "token_bucket.lua",
		SlidingLog:    "sliding_log.lua",
		SlidingWindow: "sliding_window.lua",
		FixedWindow:   "fixed_window.lua",
		LeakyBucket:   "leaky_bucket.lua",
	}
	for algo, file := range files {
		s.acquire[algo] = redis.NewScript(prelude + lua(file) + epilogue)
	}
	// The semaphore has ops of its own (no epilogue); it answers peek as
	// the others do, so RL.AVAILABLE reads it the same way.
	s.acquire[Concurrency] = redis.NewScript(prelude + lua("concurrency.lua"))
	return s
}

// Limiter returns the script of an algorithm, or nil when rlproxy has no
// script for it yet.
func (s *Scripts) Limiter(algo Algo) *redis.Script {
	return s.acquire[algo]
}

// All lists every script, for loading them onto a node ahead of use.
func (s *Scripts) All() []*redis.Script {
	all := []*redis.Script{s.SetConf, s.Reset, s.Cell}
	for _, a := range Algos {
		if sc := s.acquire[a]; sc != nil {
			all = append(all, sc)
		}
	}
	return all
}
