package proxy

import (
	"testing"
)

// TestEmbeddedLuaLibraries: through the gateway, a script that uses a Lua
// library the embedded backend lacks (cmsgpack, struct, bit,
// redis.REPL_*) is refused with the way out, and one that uses what it
// has (cjson, redis.sha1hex) runs; on a real Redis the same scripts run.
func TestEmbeddedLuaLibraries(t *testing.T) {
	lacking := []struct{ lib, args []string }{
		{[]string{"cmsgpack"}, []string{"EVAL", "return cmsgpack.pack(1)", "0"}},
		{[]string{"struct"}, []string{"EVAL", "return struct.pack('>I4', 1)", "0"}},
		{[]string{"bit"}, []string{"EVAL_RO", "return bit.band(3, 1)", "0"}},
		{[]string{"redis.REPL_*"}, []string{"EVAL", "redis.set_repl(redis.REPL_ALL) return 1", "0"}},
		{[]string{"cmsgpack"}, []string{"SCRIPT", "LOAD", "return cmsgpack.unpack(ARGV[1])"}},
	}
	t.Run("embedded", func(t *testing.T) {
		h := startProxy(t, nil, passthroughOn)
		for _, tc := range lacking {
			h.Do(t, anys(tc.args)...).Err("ERR the embedded backend's Lua lacks '" + tc.lib[0] + "': run rlproxy with --backend redis://...")
		}
		h.Do(t, "EVAL", "return cjson.encode({1, 2})", "0").Equal("[1,2]")
		h.Do(t, "EVAL", "return redis.sha1hex('')", "0").Equal("da39a3ee5e6b4b0d3255bfef95601890afd80709")
		// A name that merely contains a library's is not refused.
		h.Do(t, "EVAL", "local mystruct = {x = 1} return mystruct.x", "0").Equal(int64(1))
	})
	t.Run("redis", func(t *testing.T) {
		h := start(t, passthroughOn)
		h.Do(t, "EVAL", "return bit.band(3, 1)", "0").Equal(int64(1))
		h.Do(t, "EVAL", "return struct.unpack('>I4', struct.pack('>I4', 7))", "0").Equal(int64(7)) // EVAL returns the first value
		h.Do(t, "EVAL", "return cmsgpack.unpack(cmsgpack.pack(3))", "0").Equal(int64(3))
	})
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
