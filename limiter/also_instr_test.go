package limiter_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/limiter"
)

// TestAlsoInstructions counts the instructions a redis-server runs per
// call (valgrind's callgrind, whole server) for the algorithm's own
// script deciding one name and for also.lua deciding 1, 2 and 3 names of
// one algorithm (explicit limiters): unlike time, a count that a busy
// machine does not move (beyond the server's timers, about ±3%). Run by
// tools/bench/also-callgrind.sh, which starts the server under callgrind
// and sets RLPROXY_CALLGRIND_ADDR, _PID and _DIR; skipped otherwise.
func TestAlsoInstructions(t *testing.T) {
	addr, pid, dir := os.Getenv("RLPROXY_CALLGRIND_ADDR"), os.Getenv("RLPROXY_CALLGRIND_PID"), os.Getenv("RLPROXY_CALLGRIND_DIR")
	if addr == "" {
		t.Skip("needs tools/bench/also-callgrind.sh (a redis-server under callgrind)")
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	scripts := limiter.NewScripts()
	keys := limiter.Keys{Prefix: "b:"}
	const calls = 200
	for _, c := range []limiter.Config{tokenBucket(1e9, time.Hour, 1e9), fixedWindow(1e9, time.Hour)} {
		var names []limiter.AlsoName
		for _, name := range []string{"x", "y", "z"} {
			if err := scripts.SetConf.Run(ctx, rdb, []string{keys.Config(name, 0)}, limiter.SetConfArgs(c, shard0(c), limiter.SetConfOptions{Epoch: "e1"})...).Err(); err != nil {
				t.Fatal(err)
			}
			names = append(names, limiter.AlsoName{Algo: c.Algo, Conf: "e1", Keys: keys.Script(c.Algo, name, 0, "e1", "")})
		}
		type call struct {
			sc   *redis.Script
			keys []string
			args []any
		}
		variants := []call{{scripts.Limiter(c.Algo), names[0].Keys, limiter.AcquireArgs("e1", []limiter.Ask{{Permits: 1}})}}
		for n := 1; n <= len(names); n++ {
			var g []limiter.AlsoMember
			for i := range n {
				g = append(g, limiter.AlsoMember{Name: i, Permits: 1})
			}
			k, a := limiter.AlsoArgs(names[:n], [][]limiter.AlsoMember{g})
			variants = append(variants, call{scripts.Also(), k, a})
		}
		if c.Algo == limiter.TokenBucket {
			// The floor: the least an ALSO of two token buckets does.
			k, a := limiter.AlsoArgs(names[:2], [][]limiter.AlsoMember{{{Name: 0, Permits: 1}, {Name: 1, Permits: 1}}})
			variants = append(variants, call{redis.NewScript(alsoFloor), k, a})
		}
		var per []float64
		for _, v := range variants {
			if err := v.sc.Run(ctx, rdb, v.keys, v.args...).Err(); err != nil { // loaded
				t.Fatal(err)
			}
			per = append(per, instructions(t, pid, dir, func() {
				for range calls {
					if err := v.sc.EvalSha(ctx, rdb, v.keys, v.args...).Err(); err != nil {
						t.Fatal(err)
					}
				}
			})/calls)
		}
		t.Logf("%s: instructions per call: single %.0f, also of 1 %.0f, of 2 %.0f (%.2fx single), of 3 %.0f",
			c.Algo, per[0], per[1], per[2], per[2]/per[0], per[3])
		if len(per) > 4 {
			t.Logf("%s: instructions per call of the floor of an ALSO of two (alsoFloor): %.0f (%.2fx single)", c.Algo, per[4], per[4]/per[0])
		}
	}
}

// alsoFloor is the least an ALSO of explicit token buckets does, with
// also.lua's KEYS, ARGV and reply: per name its config read (HMGET, epoch
// checked), its state read, a grant when every name has room, its state
// written; one clock reading. No policies, several limits, waiting,
// shadow, groups or undo: a yardstick for Redis's cost, not a limiter.
const alsoFloor = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local n, a, k = tonumber(ARGV[2]), 3, 0
local per, burst, level, key, out = {}, {}, {}, {}, {}
for i = 1, n do
  local c = redis.call('HMGET', KEYS[k + 1], 'epoch', 'sub_rate', 'interval_ms', 'sub_burst', 'ttl_ms', 'sub_limits')
  if c[1] ~= ARGV[a + 1] then return {2, c[1]} end
  per[i], burst[i], key[i] = tonumber(c[3]) * 1000 / tonumber(c[2]), tonumber(c[4]), KEYS[k + 2]
  local l, ts = 0, now
  local v = redis.call('GET', key[i])
  if v then
    local x, y = string.match(v, '^([^:]+):(.+)$')
    l, ts = tonumber(x), tonumber(y)
  end
  level[i] = math.max(0, l - (now - ts) / per[i])
  out[#out + 1], out[#out + 2], out[#out + 3] = 0, c[1], now
  k, a = k + tonumber(ARGV[a + 2]), a + 3
end
local m, first = tonumber(ARGV[a + 1]), a + 2
local all = true
for j = first, first + 4 * (m - 1), 4 do
  local i, p = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
  if level[i] + p > burst[i] then all = false end
end
out[#out + 1] = all and 1 or 0
for j = first, first + 4 * (m - 1), 4 do
  local i, p = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
  if all then
    level[i] = level[i] + p
    redis.call('SET', key[i], string.format('%.17g:%d', level[i], now), 'PX', math.ceil(level[i] * per[i] / 1000))
  end
  out[#out + 1], out[#out + 2] = all and 1 or 0, math.floor(burst[i] - level[i])
  out[#out + 1], out[#out + 2] = 0, math.ceil(level[i] * per[i])
end
return out
`

// instructions returns what the server under callgrind (pid, writing to
// dir) ran during f: counts zeroed before, dumped after.
func instructions(t *testing.T, pid, dir string, f func()) float64 {
	if out, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control -z: %v: %s", err, out)
	}
	f()
	if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control -d: %v: %s", err, out)
	}
	dumps, _ := filepath.Glob(filepath.Join(dir, "callgrind.out.*.*"))
	part := func(name string) int {
		n, _ := strconv.Atoi(name[strings.LastIndex(name, ".")+1:])
		return n
	}
	sort.Slice(dumps, func(i, j int) bool { return part(dumps[i]) < part(dumps[j]) })
	if len(dumps) == 0 {
		t.Fatal("no callgrind dump in " + dir)
	}
	data, err := os.ReadFile(dumps[len(dumps)-1])
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
	}
	t.Fatal(fmt.Sprintf("no summary in %s", dumps[len(dumps)-1]))
	return 0
}
