package limiter_test

import (
	"fmt"
	"testing"

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
