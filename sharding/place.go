package sharding

import (
	"hash/fnv"
	"strconv"
)

// Place maps sub-limiter shard of limiter name to one of n nodes by
// rendezvous (highest-random-weight) hashing: each node scores the pair and
// the highest score wins, so adding or removing a node moves only the
// sub-limiters that it wins or held. nodes are stable node names.
func Place(name string, shard int, nodes []string) int {
	best, bestScore := 0, uint64(0)
	for i, node := range nodes {
		if s := score(name, shard, node); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

func score(name string, shard int, node string) uint64 {
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
