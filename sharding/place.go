package sharding

import (
	"hash/fnv"
	"strconv"
)

// Placement maps every shard of limiter name to a node index: rendezvous
// hashing with bounded loads. Shards are placed in order 0, 1, ...; each goes
// to the node with the highest score for (name, shard) among the nodes with
// room left. With S shards over N nodes, a node has room below S/N shards,
// and below S/N+1 while fewer than S mod N nodes hold that many. So N shards
// over N nodes land one per node, and any shard count spreads as evenly as
// it can: per-node counts differ by at most one (a bound of ceil(S/N) alone
// would let 4 shards over 3 nodes sit 2, 2, 0). nodes are stable node names;
// their order does not matter. It returns nil if there are no nodes or no
// shards. It scores every (shard, node) pair, so callers place a limiter
// once and keep the result.
//
// What moves when a node is added or removed: a limiter of one shard is
// plain rendezvous hashing, so only the limiters the node wins or held move.
// With more shards the node takes or gives up its fair share of each
// limiter's shards, and the bound cascades: a shard displaced from a full
// node takes its next-best node with room, which may displace another.
// Adding a 4th node to 3 moves about a third of the shards of 8-shard
// limiters (a quarter is the node's share), three in four of the moves onto
// the new node; removing it moves the same shards back. Measured over 1-40
// shards and 2-11 nodes, one added node moves at most about 43% of shards,
// most when S is near N (where fewer than half of the moves are onto it).
func Placement(name string, shards int, nodes []string) []int {
	return Placer{}.Place(name, shards, nodes)
}

// Hash scores a (limiter, shard, node) triple for rendezvous hashing:
// the shard goes to the node with the highest score among those with room.
type Hash func(name string, shard int, node string) uint64

// Placer places shards as Placement does, by a Hash a test can plug in
// to check placements by hand (the zero value uses Score).
type Placer struct {
	Hash Hash
}

// Place maps every shard of limiter name to a node index (see Placement).
func (p Placer) Place(name string, shards int, nodes []string) []int {
	score := p.Hash
	if score == nil {
		score = Score
	}
	if len(nodes) == 0 || shards <= 0 {
		return nil
	}
	limit, extra := shards/len(nodes), shards%len(nodes) // extra nodes hold limit+1
	var buf [16]int
	held := buf[:]
	if len(nodes) > len(buf) {
		held = make([]int, len(nodes))
	}
	placed := make([]int, shards)
	for shard := range placed {
		best, bestScore := -1, uint64(0)
		for i, node := range nodes {
			if held[i] > limit || held[i] == limit && extra == 0 {
				continue
			}
			if s := score(name, shard, node); best < 0 || s > bestScore {
				best, bestScore = i, s
			}
		}
		placed[shard] = best
		held[best]++
		if held[best] > limit {
			extra--
		}
	}
	return placed
}

// Score is the default Hash: FNV-1a of node, name and shard, mixed.
func Score(name string, shard int, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(name))
	h.Write([]byte{0})
	var buf [20]byte
	h.Write(strconv.AppendInt(buf[:0], int64(shard), 10))
	return mix(h.Sum64())
}

// mix spreads FNV's output over all 64 bits (the splitmix64 finalizer), so
// scores of similar inputs do not correlate.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
