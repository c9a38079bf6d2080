package limiter_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// hashTag is the part of key Redis Cluster hashes: what lies between the
// first '{' and the first '}' after it, when that is not empty; else the
// whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func keySlot(key string) int { return int(crc16(hashTag(key)) % 16384) }

func TestKeySlotHelper(t *testing.T) {
	// Answers of CLUSTER KEYSLOT on redis-server 7.0 (the first two are in
	// the Redis documentation).
	for key, want := range map[string]int{
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"123456789":     12739,
		"foo":           12182,
		"{a%7Db:0}:c":   6947,
		"":              0,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

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
				tag := hashTag(conf)
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
							if got := hashTag(key); got != tag {
								t.Errorf("Script(%s, %q, %d, client %q): key %q has hash tag %q, want %q", algo, name, shard, client, key, got, tag)
							}
							if keySlot(key) != keySlot(conf) {
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
			tag := hashTag(k.Config(name, shard))
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
		slots[keySlot(k.Config("api", shard))] = true
	}
	if len(slots) < shards-4 {
		t.Errorf("%d shards of one limiter fall in only %d slots", shards, len(slots))
	}
}
