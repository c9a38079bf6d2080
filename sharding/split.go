// Package sharding is the pure logic of a sharded limiter: it splits a
// limiter into sub-limiters whose rates sum exactly to the limiter's
// (split.go), places them on backend nodes by rendezvous hashing with a
// hash a test can plug in (place.go), picks the shards a request probes
// and merges their denials (pick.go). No I/O, no state: every function is
// deterministic and tested by hand-checkable tables. Package ratelimit
// does the I/O with it.
package sharding

import "github.com/rlproxy/rlproxy/limiter"

// Split divides total into n parts that sum exactly to total; the
// remainder goes to the first parts: 10 over 4 is 3, 3, 2, 2.
// So sub-limiters can never admit more than the limiter.
func Split(total int64, n int) []int64 {
	parts := make([]int64, n)
	q, r := total/int64(n), total%int64(n)
	for i := range parts {
		parts[i] = q
		if int64(i) < r {
			parts[i]++
		}
	}
	return parts
}

// Subs returns the sub-limiters of a limiter: their rates and bursts each
// sum exactly to the limiter's.
func Subs(c limiter.Config) []limiter.Sub {
	rates, bursts := Split(c.Rate, c.Shards), Split(c.Burst, c.Shards)
	subs := make([]limiter.Sub, c.Shards)
	for i := range subs {
		subs[i] = limiter.Sub{Shard: i, Rate: rates[i], Burst: bursts[i]}
	}
	// Each further limit (RL.SETRATE ... LIMIT) is split the same way.
	for j, l := range c.Limits.List() {
		for i, r := range Split(l.Rate, c.Shards) {
			subs[i].Limits[j] = r
		}
	}
	return subs
}
