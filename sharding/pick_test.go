package sharding

import (
	"slices"
	"testing"
)

func TestProbe(t *testing.T) {
	for _, tc := range []struct {
		shards, probes int
		r              uint64
		want           []int
	}{
		{1, 0, 0, []int{0}},
		{1, 2, 7, []int{0}},               // never more tries than shards
		{4, 0, 6, []int{2}},               // start = r mod shards
		{4, 2, 1, []int{1, 2, 3}},         // then walk on
		{4, 2, 3, []int{3, 0, 1}},         // wrapping around
		{4, 3, 2, []int{2, 3, 0, 1}},      // every shard once
		{4, 9, 5, []int{1, 2, 3, 0}},      // probes beyond shards: each shard once
		{8, 2, 1<<64 - 1, []int{7, 0, 1}}, // the largest r
		{1024, 1, 1023, []int{1023, 0}},
	} {
		if got := Probe(tc.shards, tc.probes, tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("Probe(%d, %d, %d) = %v, want %v", tc.shards, tc.probes, tc.r, got, tc.want)
		}
	}
}

// Every probe order holds distinct shards in range, min(shards, probes+1)
// of them, and the start shards spread evenly when r is uniform.
func TestProbeProperties(t *testing.T) {
	for _, shards := range []int{1, 2, 3, 8, 64, 1024} {
		starts := make([]int, shards)
		for _, probes := range []int{0, 1, 2, 4, 1024} {
			for r := range uint64(3 * shards) {
				order := Probe(shards, probes, r)
				if want := min(shards, probes+1); len(order) != want {
					t.Fatalf("Probe(%d, %d, %d) tries %d shards, want %d", shards, probes, r, len(order), want)
				}
				seen := map[int]bool{}
				for _, s := range order {
					if s < 0 || s >= shards || seen[s] {
						t.Fatalf("Probe(%d, %d, %d) = %v: shard %d out of range or repeated", shards, probes, r, order, s)
					}
					seen[s] = true
				}
				if probes == 0 {
					starts[order[0]]++
				}
			}
		}
		for s, n := range starts {
			if n != 3 {
				t.Errorf("%d shards: shard %d was the start %d times of %d, want 3", shards, s, n, 3*shards)
			}
		}
	}
}

func TestMerged(t *testing.T) {
	type shardAnswer struct{ remaining, retryAfter, resetAfter int64 }
	for _, tc := range []struct {
		name    string
		answers []shardAnswer
		want    resultFields
	}{
		{"one shard", []shardAnswer{{2, 30, 400}}, resultFields{2, 30, 400}},
		{
			// remaining: the most one shard could grant one request, not the sum.
			"three shards", []shardAnswer{{1, 50, 900}, {3, 20, 300}, {0, 80, 1000}},
			resultFields{remaining: 3, retryAfter: 20, resetAfter: 1000},
		},
		{"order does not matter", []shardAnswer{{0, 80, 1000}, {3, 20, 300}, {1, 50, 900}}, resultFields{3, 20, 1000}},
		{"all empty", []shardAnswer{{0, 5, 5}, {0, 7, 7}}, resultFields{0, 5, 7}},
	} {
		var m Merged
		for _, a := range tc.answers {
			m.Add(a.remaining, a.retryAfter, a.resetAfter)
		}
		if m.n != len(tc.answers) || m.res != tc.want {
			t.Errorf("%s: merged %+v = %+v after %d, want %+v after %d", tc.name, tc.answers, m.res, m.n, tc.want, len(tc.answers))
		}
	}
}
