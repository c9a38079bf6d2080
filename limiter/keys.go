package limiter

import (
	"strconv"
	"strings"
)

// Keys names the Redis keys of limiters. Every key of one sub-limiter
// carries the same hash tag, {name:shard}, so a script touches one cluster
// slot while the sub-limiters of a limiter spread over the cluster.
//
//	<prefix>{<name>:<shard>}:c                      config hash
//	<prefix>{<name>:<shard>}:<epoch>:<k>            state key k of the algorithm
//	<prefix>{<name>:<shard>}:<epoch>:<k>:<client>   the same, per client (PER_CLIENT)
//	<prefix>cl{<key>}                               CL.THROTTLE state of key
//	<prefix>{policies}:p, :v                        the policies and their version
//	<prefix>changes                                 the change feed (a Pub/Sub channel)
type Keys struct {
	Prefix string
	// NativeCell keeps GCRA / CL.THROTTLE state in the key as named
	// (passthrough: like Redis 8.8's GCRA and redis-cell, so DEL, EXISTS
	// and PTTL see it).
	NativeCell bool
}

// escaper keeps names inside their hash tag: '}' would end the tag early.
// '%' is escaped too, so the mapping stays one-to-one.
var escaper = strings.NewReplacer("%", "%25", "}", "%7D")

func (k Keys) tag(name string, shard int) string {
	return k.Prefix + "{" + escaper.Replace(name) + ":" + strconv.Itoa(shard) + "}"
}

// Changes names the Pub/Sub channel of the change feed: the scripts that
// change a limiter or a policy announce it there (package feed).
func (k Keys) Changes() string { return k.Prefix + "changes" }

// Config names the config hash of one sub-limiter.
func (k Keys) Config(name string, shard int) string {
	return k.tag(name, shard) + ":c"
}

// stateSuffixes lists the state keys each algorithm's script takes after
// the config key, in the order of its KEYS.
var stateSuffixes = map[Algo][]string{
	TokenBucket:   {"s"},
	SlidingLog:    {"l", "u"},
	SlidingWindow: {"s"},
	FixedWindow:   {"s"},
	LeakyBucket:   {"s"},
	Concurrency:   {"z", "q", "d", "n"}, // leases, waiters' queue, tickets' deadlines, permits held
}

// Script returns the KEYS of an algorithm's script for one sub-limiter:
// its config key, then its state keys for this epoch (and client, in
// PER_CLIENT mode; client is "" otherwise).
func (k Keys) Script(algo Algo, name string, shard int, epoch, client string) []string {
	return k.ScriptLimits(algo, name, shard, epoch, client, 1)
}

// ScriptLimits returns the KEYS of the script of a limiter with limits
// limits (Config.LimitList): the config key, the first limit's state keys
// as Script names them, then each further limit's, suffixed with its
// number from 2 ("<epoch>:s:2").
func (k Keys) ScriptLimits(algo Algo, name string, shard int, epoch, client string, limits int) []string {
	// Every key is a slice of one string: a policy's names (not cached)
	// name their keys on every request.
	tag := k.tag(name, shard)
	suffixes := stateSuffixes[algo]
	n := 1 + max(1, limits)*len(suffixes)
	var b strings.Builder
	b.Grow(n * (len(tag) + len(epoch) + len(client) + 16))
	ends := make([]int, 0, n)
	b.WriteString(tag)
	b.WriteString(":c")
	ends = append(ends, b.Len())
	for i := 1; i <= max(1, limits); i++ {
		for _, s := range suffixes {
			b.WriteString(tag)
			b.WriteByte(':')
			b.WriteString(epoch)
			b.WriteByte(':')
			b.WriteString(s)
			if i > 1 {
				b.WriteByte(':')
				b.WriteString(strconv.Itoa(i))
			}
			if client != "" {
				b.WriteByte(':')
				b.WriteString(client)
			}
			ends = append(ends, b.Len())
		}
	}
	all, start := b.String(), 0
	keys := make([]string, len(ends))
	for i, end := range ends {
		keys[i], start = all[start:end], end
	}
	return keys
}

// Cell names the state key of a CL.THROTTLE key. The whole key is its hash
// tag, so CL.THROTTLE keys spread over a cluster like redis-cell's do;
// with NativeCell it is the key itself.
func (k Keys) Cell(key string) string {
	if k.NativeCell {
		return key
	}
	return k.Prefix + "cl{" + escaper.Replace(key) + "}"
}

// CellArgs builds cell.lua's ARGV for t on these keys: with NativeCell
// the key may hold anything, so a string that is not a GCRA state is
// refused (WRONGTYPE) rather than read as none and overwritten.
func (k Keys) CellArgs(t Throttle) []any {
	strict := "0"
	if k.NativeCell {
		strict = "1"
	}
	return append(t.Args(), strict)
}

// Policies names the hash of the policies (RL.POLICY) and the key of
// their version, raised by every change. Both carry one hash tag, so one
// script changes both; no limiter's key has it (theirs end in ":shard}").
func (k Keys) Policies() (hash, version string) {
	return k.Prefix + "{policies}:p", k.Prefix + "{policies}:v"
}

// PolicyState names the prefix of the generation hashes that keep the
// state of the names of a policy at one epoch (prelude.lua, State
// storage), beside the policies.
func (k Keys) PolicyState(epoch string) string {
	return k.Prefix + "{policies}:s:" + epoch
}
