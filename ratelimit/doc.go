// Package ratelimit is the limiter service: it runs every limiter
// operation on the backend pool. Limiters (limiters.go) holds what one
// proxy keeps between requests — the config cache (cache.go), the
// per-sub-limiter coalescer that merges concurrent acquires into one
// script call, the deny cache (denycache.go), the waiters (wait.go) and
// the decision counters (Stats, a plain struct) — and uses package
// sharding for where each sub-limiter lives and which shards a request
// tries.
//
// The acquire path (acquire.go) has one primitive, Go: a batch of
// requests, each decided through the same steps (config, capacity, deny
// cache, first try in a coalesced batch, one decide step reading every
// answer, probing on from the shard tried, repair and reload on a config
// change, and one final step — SHADOW and the counters — for every
// outcome however it was decided), each outcome reported through a
// callback. A lone request is a
// batch of one; Acquire and AcquireAll are thin wrappers that wait for the
// callbacks, and AcquireWait (TIMEOUT/BLOCK) is built on them.
package ratelimit
