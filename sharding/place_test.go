package sharding

import (
	"fmt"
	"slices"
	"testing"
)

var threeNodes = []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}

// nodeList returns n stable node names.
func nodeList(n int) []string {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("127.0.0.1:%d", 7000+i)
	}
	return nodes
}

// names returns count limiter names.
func names(count int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("limiter-%d", i)
	}
	return out
}

// on returns the node name of every shard.
func on(placed []int, nodes []string) []string {
	out := make([]string, len(placed))
	for shard, i := range placed {
		out[shard] = nodes[i]
	}
	return out
}

func TestPlacementDeterministic(t *testing.T) {
	reversed := slices.Clone(threeNodes)
	slices.Reverse(reversed)
	for _, name := range []string{"k", "api:user:42", "", "{x}"} {
		for shards := 1; shards <= 16; shards++ {
			first := Placement(name, shards, threeNodes)
			if len(first) != shards {
				t.Fatalf("Placement(%q, %d) = %v, want %d nodes", name, shards, first, shards)
			}
			for shard, i := range first {
				if i < 0 || i >= len(threeNodes) {
					t.Fatalf("Placement(%q, %d)[%d] = %d, out of range", name, shards, shard, i)
				}
			}
			for range 3 {
				if got := Placement(name, shards, threeNodes); !slices.Equal(got, first) {
					t.Fatalf("Placement(%q, %d) = %v, then %v", name, shards, first, got)
				}
			}
			// Placement depends on node names, not on their order.
			if a, b := on(first, threeNodes), on(Placement(name, shards, reversed), reversed); !slices.Equal(a, b) {
				t.Errorf("Placement(%q, %d): %v, but %v when the node list is reversed", name, shards, a, b)
			}
		}
	}
	if got := Placement("k", 3, []string{"only"}); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("Placement on one node = %v, want [0 0 0]", got)
	}
	if got := Placement("k", 3, nil); got != nil {
		t.Errorf("Placement on no nodes = %v, want nil", got)
	}
	if got := Placement("k", 0, threeNodes); got != nil {
		t.Errorf("Placement of no shards = %v, want nil", got)
	}
}

// Placement is rendezvous hashing with bounded loads: each shard, in order,
// is on the highest-scoring node with room, where a node has room below
// floor(S/N) of the earlier shards, and below floor(S/N)+1 while fewer than
// S mod N nodes hold that many. Checked from the outside: the node had room,
// and every node scoring higher had none. Shard 0 (and a single-shard
// limiter) is where plain rendezvous hashing puts it.
func TestPlacementIsBoundedRendezvous(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7} {
		nodes := nodeList(n)
		for _, shards := range []int{1, 2, 3, 4, 5, 8, 13} {
			floor, extra := shards/n, shards%n
			for _, name := range names(50) {
				placed := Placement(name, shards, nodes)
				if top := topScorer(name, nodes); placed[0] != top {
					t.Fatalf("Placement(%q, %d, %d nodes)[0] = %d, plain rendezvous says %d", name, shards, n, placed[0], top)
				}
				held := make([]int, n)
				room := func(i int) bool {
					over := 0
					for _, h := range held {
						if h > floor {
							over++
						}
					}
					return held[i] < floor || held[i] == floor && over < extra
				}
				for shard, got := range placed {
					if !room(got) {
						t.Fatalf("Placement(%q, %d, %d nodes) = %v: shard %d on node %d, which already held %d (%v)", name, shards, n, placed, shard, got, held[got], held)
					}
					for i, node := range nodes {
						if Score(name, shard, node) > Score(name, shard, nodes[got]) && room(i) {
							t.Fatalf("Placement(%q, %d, %d nodes) = %v: shard %d on node %d, but node %d scores higher and has room (%v)", name, shards, n, placed, shard, got, i, held)
						}
					}
					held[got]++
				}
			}
		}
	}
}

// The hot-limiter case: N shards over N nodes land one per node, so each
// node serves exactly 1/N of the limiter's calls.
func TestPlacementNShardsOverNNodes(t *testing.T) {
	for n := 1; n <= 16; n++ {
		nodes := nodeList(n)
		for _, name := range names(200) {
			placed := Placement(name, n, nodes)
			if sorted := slices.Sorted(slices.Values(placed)); !slices.Equal(sorted, nodeIndexes(n)) {
				t.Fatalf("Placement(%q, %d shards, %d nodes) = %v, want one shard per node", name, n, n, placed)
			}
		}
	}
}

func nodeIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Any shard count spreads as evenly as it can: per-node counts differ by at
// most one.
func TestPlacementSpreadsEvenly(t *testing.T) {
	for n := 1; n <= 10; n++ {
		nodes := nodeList(n)
		for shards := 1; shards <= 40; shards++ {
			for _, name := range names(20) {
				counts := make([]int, n)
				for _, i := range Placement(name, shards, nodes) {
					counts[i]++
				}
				if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1 {
					t.Fatalf("Placement(%q, %d shards, %d nodes): per-node counts %v", name, shards, n, counts)
				}
			}
		}
	}
}

// Different limiters' shards still spread over the nodes: the shard-0 node
// of many limiters is uniform.
func TestPlacementSpreadsLimiters(t *testing.T) {
	const n = 3000
	counts := make([]int, len(threeNodes))
	for _, name := range names(n) {
		counts[Placement(name, 2, threeNodes)[0]]++
	}
	// 1000 each expected; the binomial standard deviation is about 26,
	// so 10% (almost 4 sigma) fails only for a skewed hash.
	for i, c := range counts {
		if c < 900 || c > 1100 {
			t.Errorf("node %s holds shard 0 of %d of %d limiters, want 1000 ± 100 (all: %v)", threeNodes[i], c, n, counts)
		}
	}
}

// moves compares two placements of the same limiters by node name.
type moves struct {
	shards, moved int
	to, from      int // moved onto / off a given node
	maxPerLimiter int // most shards one limiter moved
}

func (m moves) fraction() float64 { return float64(m.moved) / float64(m.shards) }

func compare(limiters []string, shards int, before, after []string, node string) moves {
	var m moves
	for _, name := range limiters {
		b, a := on(Placement(name, shards, before), before), on(Placement(name, shards, after), after)
		moved := 0
		for shard := range shards {
			m.shards++
			if b[shard] == a[shard] {
				continue
			}
			moved++
			if a[shard] == node {
				m.to++
			}
			if b[shard] == node {
				m.from++
			}
		}
		m.moved += moved
		m.maxPerLimiter = max(m.maxPerLimiter, moved)
	}
	return m
}

// A single-shard limiter is plain rendezvous hashing: adding a node moves
// only the limiters it wins, about 1/4 of them with 4 nodes, and none
// between old nodes; removing it moves them back and nothing else.
func TestPlacementSingleShardMovesOnlyToFromTheNode(t *testing.T) {
	const n = 3000
	four := nodeList(4)
	added := compare(names(n), 1, threeNodes, four, four[3])
	if added.to != added.moved {
		t.Errorf("adding a 4th node moved %d limiters, only %d of them to it", added.moved, added.to)
	}
	// 750 expected; standard deviation about 24.
	if added.moved < 650 || added.moved > 850 {
		t.Errorf("adding a 4th node moved %d of %d limiters, want about 1/4 (750 ± 100)", added.moved, n)
	}
	removed := compare(names(n), 1, four, threeNodes, four[3])
	if removed != (moves{shards: n, moved: added.moved, from: added.moved, maxPerLimiter: 1}) {
		t.Errorf("removing the 4th node: %+v, want exactly its %d limiters to move", removed, added.moved)
	}
}

// With 8 shards the load bound cascades: a node addition moves the shards
// the new node takes (exactly 2 of 8 per limiter: its fair share) plus some
// shuffling among the old nodes. Measured: 34% moved, 74% of the moves onto
// the new node.
func TestPlacementAddNodeMovesMostlyToIt(t *testing.T) {
	const limiters, shards = 500, 8
	four := nodeList(4)
	m := compare(names(limiters), shards, threeNodes, four, four[3])
	t.Logf("adding a 4th node to 3: %d of %d shards moved (%.1f%%), %d onto the new node (%.0f%% of moves), at most %d of one limiter's %d",
		m.moved, m.shards, 100*m.fraction(), m.to, 100*float64(m.to)/float64(m.moved), m.maxPerLimiter, shards)
	if m.to != limiters*2 {
		t.Errorf("the new node took %d shards, want 2 of each limiter's 8 (%d)", m.to, limiters*2)
	}
	if m.fraction() > 0.40 {
		t.Errorf("adding a 4th node moved %.1f%% of shards, want at most 40%% (a fair share is 25%%)", 100*m.fraction())
	}
	if float64(m.to) < 0.6*float64(m.moved) {
		t.Errorf("only %d of %d moves went to the new node, want most (≥ 60%%)", m.to, m.moved)
	}
}

// Removing a node moves its shards plus a bounded cascade among the rest.
func TestPlacementRemoveNodeMovesMostlyItsShards(t *testing.T) {
	const limiters, shards = 500, 8
	four := nodeList(4)
	for gone := range four {
		rest := slices.Delete(slices.Clone(four), gone, gone+1)
		m := compare(names(limiters), shards, four, rest, four[gone])
		t.Logf("removing node %d of 4: %d of %d shards moved (%.1f%%), %d off the removed node (%.0f%% of moves), at most %d of one limiter's %d",
			gone, m.moved, m.shards, 100*m.fraction(), m.from, 100*float64(m.from)/float64(m.moved), m.maxPerLimiter, shards)
		if m.from != limiters*2 {
			t.Errorf("removing node %d moved %d shards off it, want the 2 of each limiter's 8 it held (%d)", gone, m.from, limiters*2)
		}
		if m.fraction() > 0.40 {
			t.Errorf("removing node %d moved %.1f%% of shards, want at most 40%% (its share is 25%%)", gone, 100*m.fraction())
		}
		if float64(m.from) < 0.6*float64(m.moved) {
			t.Errorf("only %d of %d moves were off removed node %d, want most (≥ 60%%)", m.from, m.moved, gone)
		}
	}
}

// topScorer is plain rendezvous hashing of shard 0: the node with the
// highest score.
func topScorer(name string, nodes []string) int {
	best, bestScore := 0, uint64(0)
	for i, node := range nodes {
		if s := Score(name, 0, node); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// With a plugged-in hash the placement can be worked out by hand: the
// score is the node's number times 10 plus the shard number when the
// node's letter is the shard's own, else the node's number. Shard 0 goes
// to "c" (30 beats 20 and 10), shard 1 to "b" (21 beats 10; "c" is full
// at one shard of three over three nodes), shard 2 to "a".
func TestPlacerWithPluggedHash(t *testing.T) {
	hash := func(name string, shard int, node string) uint64 {
		n := uint64(node[0]-'a'+1) * 10
		if int(node[0]-'a') == shard {
			n += uint64(shard)
		}
		return n
	}
	got := Placer{Hash: hash}.Place("k", 3, []string{"a", "b", "c"})
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("Place = %v, want %v", got, want)
	}
	// Four shards over three nodes: one node may hold two. "c" scores
	// best for shards 0 and 1 (30 against 20+1 and 10), so it takes both;
	// then it is full, and shard 2 goes to "b" (20 beats 10), shard 3 to
	// "a", the only node with room.
	got = Placer{Hash: hash}.Place("k", 4, []string{"a", "b", "c"})
	if want := []int{2, 2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("Place of 4 = %v, want %v", got, want)
	}
	// The zero Placer is Placement.
	if a, b := (Placer{}).Place("k", 8, []string{"x", "y"}), Placement("k", 8, []string{"x", "y"}); !slices.Equal(a, b) {
		t.Errorf("Placer{} = %v, Placement = %v", a, b)
	}
}
