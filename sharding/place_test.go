package sharding

import (
	"fmt"
	"testing"
)

var threeNodes = []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}

func TestPlaceDeterministic(t *testing.T) {
	for _, name := range []string{"k", "api:user:42", "", "{x}"} {
		for shard := range 16 {
			first := Place(name, shard, threeNodes)
			if first < 0 || first >= len(threeNodes) {
				t.Fatalf("Place(%q, %d) = %d, out of range", name, shard, first)
			}
			for range 3 {
				if got := Place(name, shard, threeNodes); got != first {
					t.Fatalf("Place(%q, %d) = %d, then %d", name, shard, first, got)
				}
			}
			// Placement depends on node names, not on their order.
			reversed := []string{threeNodes[2], threeNodes[1], threeNodes[0]}
			if got := reversed[Place(name, shard, reversed)]; got != threeNodes[first] {
				t.Errorf("Place(%q, %d): %s, but %s when the node list is reversed", name, shard, threeNodes[first], got)
			}
		}
	}
	if got := Place("k", 3, []string{"only"}); got != 0 {
		t.Errorf("Place on one node = %d, want 0", got)
	}
}

type pair struct {
	name  string
	shard int
}

// pairs returns count (name, shard) pairs: limiters of 8 shards each.
func pairs(count int) []pair {
	var ps []pair
	for i := 0; len(ps) < count; i++ {
		for shard := 0; shard < 8 && len(ps) < count; shard++ {
			ps = append(ps, pair{fmt.Sprintf("limiter-%d", i), shard})
		}
	}
	return ps
}

func TestPlaceSpreadsEvenly(t *testing.T) {
	const n = 3000
	counts := make([]int, len(threeNodes))
	for _, p := range pairs(n) {
		counts[Place(p.name, p.shard, threeNodes)]++
	}
	// 1000 each expected; the binomial standard deviation is about 26,
	// so 10% (almost 4 sigma) fails only for a skewed hash.
	for i, c := range counts {
		if c < 900 || c > 1100 {
			t.Errorf("node %s holds %d of %d sub-limiters, want 1000 ± 100 (all: %v)", threeNodes[i], c, n, counts)
		}
	}

	// The shards of one limiter spread too: 8 shards land on at least 2
	// of 3 nodes for almost every limiter.
	single := 0
	for i := range 300 {
		seen := map[int]bool{}
		for shard := range 8 {
			seen[Place(fmt.Sprintf("limiter-%d", i), shard, threeNodes)] = true
		}
		if len(seen) == 1 {
			single++
		}
	}
	// P(all 8 on one node) = 3 * (1/3)^8 ≈ 0.05%.
	if single > 3 {
		t.Errorf("%d of 300 limiters of 8 shards sit on a single node", single)
	}
}

// Rendezvous hashing: adding a node moves only the sub-limiters the new
// node wins, about 1/4 of them with 4 nodes, and none between old nodes.
func TestPlaceAddNodeMovesOnlyToIt(t *testing.T) {
	const n = 3000
	four := append(append([]string(nil), threeNodes...), "127.0.0.1:7003")
	moved := 0
	for _, p := range pairs(n) {
		name, shard := p.name, p.shard
		before, after := Place(name, shard, threeNodes), Place(name, shard, four)
		if before == after {
			continue
		}
		moved++
		if after != 3 {
			t.Fatalf("(%s, %d) moved from %s to %s, an old node", name, shard, threeNodes[before], four[after])
		}
	}
	// 750 expected; standard deviation about 24.
	if moved < 650 || moved > 850 {
		t.Errorf("adding a 4th node moved %d of %d sub-limiters, want about 1/4 (750 ± 100)", moved, n)
	}
}
