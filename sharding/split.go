// Package sharding splits a limiter into sub-limiters, places them on
// backend nodes, routes each request to a sub-limiter, and merges what the
// sub-limiters answer.
//
// The splitting, placing and picking (split.go, place.go) are pure,
// deterministic functions, tested by hand-checkable tables. Limiters
// (limiters.go) does the I/O: it runs the limiter scripts through the
// backend package.
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
