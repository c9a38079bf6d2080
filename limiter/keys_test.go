package limiter_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// Names that could break a hash tag or collide once escaped.
var trickyNames = []string{
	"", "api", "API", "a b", "a:1", "a:1:2", "1",
	"}", "{", "{}", "a}", "a}b", "a}c", "}a", "a{b}c", "{a}",
	"%", "%%", "%7D", "%7d", "%25", "a%7Db", "a%b", "%}", "}%",
	"ключ", "\x00", "a\r\nb",
}

func TestKeysShareOneHashTag(t *testing.T) {
	for _, prefix := range []string{"", "rl:", "app:rl:"} {
		k := limiter.Keys{Prefix: prefix}
		for _, name := range trickyNames {
			for _, shard := range []int{0, 1, 17} {
				conf := k.Config(name, shard)
				tag := redistest.HashTag(conf)
				if !strings.HasPrefix(conf, prefix+"{") {
					t.Errorf("Config(%q, %d) = %q: want the prefix %q, then the hash tag", name, shard, conf, prefix)
				}
				if !strings.HasSuffix(tag, ":"+strconv.Itoa(shard)) {
					t.Errorf("Config(%q, %d) = %q: hash tag %q does not end in the shard", name, shard, conf, tag)
				}
				for _, algo := range limiter.Algos {
					for _, client := range []string{"", "worker-1", "a}b"} {
						keys := k.Script(algo, name, shard, "e1", client)
						if len(keys) < 2 || keys[0] != conf {
							t.Fatalf("Script(%s, %q, %d) = %q: want the config key, then state keys", algo, name, shard, keys)
						}
						for _, key := range keys {
							if got := redistest.HashTag(key); got != tag {
								t.Errorf("Script(%s, %q, %d, client %q): key %q has hash tag %q, want %q", algo, name, shard, client, key, got, tag)
							}
							if redistest.KeySlot(key) != redistest.KeySlot(conf) {
								t.Errorf("key %q is not in the slot of %q", key, conf)
							}
						}
					}
				}
			}
		}
	}
}

func TestKeysNeverCollide(t *testing.T) {
	k := limiter.Keys{Prefix: "rl:"}
	seen := map[string]string{} // hash tag -> who has it
	for _, name := range trickyNames {
		for _, shard := range []int{0, 1, 2, 10, 11, 12} {
			who := strconv.Quote(name) + " shard " + strconv.Itoa(shard)
			tag := redistest.HashTag(k.Config(name, shard))
			if other, dup := seen[tag]; dup {
				t.Errorf("%s and %s share the hash tag %q", who, other, tag)
			}
			seen[tag] = who
		}
	}

	// Within one sub-limiter, the state keys of an algorithm differ for
	// every epoch and client. (Algorithms may reuse names: a new algorithm
	// always brings a new epoch.)
	for _, algo := range limiter.Algos {
		keys := map[string]string{}
		for _, epoch := range []string{"e1", "e2"} {
			for _, client := range []string{"", "c1", "c2"} {
				who := "epoch " + epoch + " client " + strconv.Quote(client)
				for _, key := range k.Script(algo, "api", 0, epoch, client)[1:] {
					if other, dup := keys[key]; dup {
						t.Errorf("%s: %s and %s share the state key %q", algo, who, other, key)
					}
					keys[key] = who
				}
			}
		}
	}
}

// The sub-limiters of one limiter spread over the cluster's slots.
func TestShardsSpreadOverSlots(t *testing.T) {
	k := limiter.Keys{Prefix: "rl:"}
	slots := map[int]bool{}
	const shards = 64
	for shard := range shards {
		slots[redistest.KeySlot(k.Config("api", shard))] = true
	}
	if len(slots) < shards-4 {
		t.Errorf("%d shards of one limiter fall in only %d slots", shards, len(slots))
	}
}

// The keys of a script, exactly: the config key, then each limit's state
// keys, numbered from the second limit, with the client last.
func TestScriptLimitsNames(t *testing.T) {
	k := limiter.Keys{Prefix: "rl:"}
	got := k.ScriptLimits(limiter.SlidingLog, "a}b", 3, "e1", "w", 2)
	want := []string{"rl:{a%7Db:3}:c", "rl:{a%7Db:3}:e1:l:w", "rl:{a%7Db:3}:e1:u:w", "rl:{a%7Db:3}:e1:l:2:w", "rl:{a%7Db:3}:e1:u:2:w"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ScriptLimits = %q, want %q", got, want)
	}
	if got := k.Script(limiter.TokenBucket, "user:1", 0, "e2.5p", ""); strings.Join(got, " ") != "rl:{user:1:0}:c rl:{user:1:0}:e2.5p:s" {
		t.Errorf("Script = %q", got)
	}
	// Nine limits of four keys each: past any small buffer.
	if got := k.ScriptLimits(limiter.Concurrency, "c", 0, "e", "", 9); len(got) != 37 || got[36] != "rl:{c:0}:e:n:9" {
		t.Errorf("ScriptLimits of 9 limits: %d keys, last %q", len(got), got[len(got)-1])
	}
}
