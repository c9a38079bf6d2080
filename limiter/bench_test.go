package limiter_test

import (
	"fmt"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

// The limiter package's share of a coalesced acquire: building the ARGV
// of a batch, naming the keys, and decoding the script's reply — at the
// batch sizes coalescing produces (1 when idle, up to 256 when hot).

var batchSizes = []int{1, 16, 256}

func BenchmarkAcquireArgs(b *testing.B) {
	for _, n := range batchSizes {
		asks := make([]limiter.Ask, n)
		for i := range asks {
			asks[i] = limiter.Ask{Permits: 1}
		}
		b.Run(fmt.Sprintf("asks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if len(limiter.AcquireArgs("0a1b2c3d", asks)) != 2+2*n {
					b.Fatal("wrong length")
				}
			}
		})
	}
}

// acquireReply is a script reply as go-redis hands it over: status,
// epoch, then four integers per request.
func acquireReply(n int) []any {
	v := []any{int64(0), "0a1b2c3d"}
	for i := range n {
		v = append(v, int64(1), int64(1000-i), int64(0), int64(i+1))
	}
	return v
}

func BenchmarkDecodeReply(b *testing.B) {
	for _, n := range batchSizes {
		v := acquireReply(n)
		b.Run(fmt.Sprintf("asks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rep, err := limiter.DecodeReply(v, limiter.OpAcquire, n)
				if err != nil || len(rep.Results) != n {
					b.Fatal(rep, err)
				}
			}
		})
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
