package limiter_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// The limiter package's share of a coalesced acquire: building the ARGV
// of a batch, naming the keys, and decoding the script's reply — at the
// batch sizes coalescing produces (1 when idle, up to 1024 when hot), for
// identical asks (one run) and for asks that all differ (a run each).

var batchSizes = []int{1, 16, 256, 1024}

// benchAsks returns n asks: all for 1 permit when same, else alternately
// for 1 and 2 (no two neighbours alike).
func benchAsks(n int, same bool) []limiter.Ask {
	asks := make([]limiter.Ask, n)
	for i := range asks {
		asks[i] = limiter.Ask{Permits: 1}
		if !same {
			asks[i].Permits += int64(i % 2)
		}
	}
	return asks
}

func shapeName(same bool) string {
	if same {
		return "same"
	}
	return "mixed"
}

func BenchmarkAcquireArgs(b *testing.B) {
	for _, same := range []bool{true, false} {
		for _, n := range batchSizes {
			asks := benchAsks(n, same)
			runs := n
			if same {
				runs = 1
			}
			b.Run(fmt.Sprintf("%s/asks=%d", shapeName(same), n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if len(limiter.AcquireArgs("0a1b2c3d", asks)) != 2+3*runs {
						b.Fatal("wrong length")
					}
				}
			})
		}
	}
}

// acquireReply is a script reply to asks as go-redis hands it over:
// status, epoch, then eight integers per run, every request granted.
func acquireReply(asks []limiter.Ask) []any {
	v := []any{int64(0), "0a1b2c3d"}
	for i := 0; i < len(asks); {
		j := i + 1
		for j < len(asks) && asks[j] == asks[i] {
			j++
		}
		v = append(v, int64(j-i), int64(10_000-i), int64(0), int64(1000*(i+1)), int64(1000*j), int64(0), int64(0), int64(0))
		i = j
	}
	return v
}

func BenchmarkDecodeReply(b *testing.B) {
	for _, same := range []bool{true, false} {
		for _, n := range batchSizes {
			asks := benchAsks(n, same)
			v := acquireReply(asks)
			b.Run(fmt.Sprintf("%s/asks=%d", shapeName(same), n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					rep, err := limiter.DecodeReply(v, limiter.OpAcquire, asks)
					if err != nil || len(rep.Results) != n {
						b.Fatal(rep, err)
					}
				}
			})
		}
	}
}

func BenchmarkDecodeCell(b *testing.B) {
	v := []any{int64(0), int64(16), int64(15), int64(-1), int64(2)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := limiter.DecodeCell(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeysScript(b *testing.B) {
	k := limiter.Keys{Prefix: "rl:"}
	for _, c := range []struct {
		name, client string
		algo         limiter.Algo
	}{
		{"token-bucket", "", limiter.TokenBucket},
		{"sliding-log/per-client", "n=worker-7", limiter.SlidingLog},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if len(k.Script(c.algo, "api:user:42", 3, "0a1b2c3d", c.client)) < 2 {
					b.Fatal("too few keys")
				}
			}
		})
	}
}

// Redis's CPU per name in a names call (names.lua) of 450 names (about
// what pipelines of 16 from 50 clients gather) drawn from 10,000, each
// asked once: the figure the per-name path is judged by. Reported as
// redis-µs/name (INFO used_cpu_user + used_cpu_sys), for a policy's state
// kept as keys and as fields of its generation hashes, in decimals and
// packed; at make bench's rate (a billion per second: each name's bucket
// is empty again at its next ask) and at 100 per hour (levels are
// fractions).
func BenchmarkNamesRedisCPU(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := srv.Client(b)
	scripts := limiter.NewScripts()
	keys := limiter.Keys{Prefix: "rl:"}
	const batch, names = 450, 10000
	for _, c := range []struct{ name, conf string }{
		{"keys", "=e1 1000000000 1000 1000000000"},
		{"hashes", "#rl:{policies}:s:e1.1001p 1001 e1 1000000000 1000 1000000000"},
		{"hashes-100h", "#rl:{policies}:s:e1.36000001p 36000001 e1 100 3600000 100"},
	} {
		b.Run(c.name, func(b *testing.B) {
			script := scripts.Names(limiter.Config{Algo: limiter.TokenBucket}, false)
			cpu := func() float64 {
				var total float64
				for _, line := range strings.Split(rdb.Info(b.Context(), "cpu").Val(), "\r\n") {
					if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
						f, _ := strconv.ParseFloat(v, 64)
						total += f
					}
				}
				return total
			}
			next := 0
			calls := make([][]limiter.NameAsks, 64)
			for i := range calls {
				for range batch {
					calls[i] = append(calls[i], limiter.NameAsks{
						Keys: keys.Script(limiter.TokenBucket, fmt.Sprintf("user:%d", next%names), 0, "e1", ""),
						Asks: []limiter.Ask{{Permits: 1}},
					})
					next += 7919 // a prime: every name, spread over the calls
				}
			}
			before := cpu()
			b.ResetTimer()
			for i := range b.N {
				k, args := limiter.NamesArgs(c.conf, calls[i%len(calls)], false)
				if err := script.Run(b.Context(), rdb, k, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((cpu()-before)*1e6/float64(b.N*batch), "redis-µs/name")
		})
	}
}
