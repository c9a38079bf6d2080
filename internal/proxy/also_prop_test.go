package proxy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// A property of RL.ACQUIRE ... ALSO on one backend, over random mixes of
// names (explicit limiters and a policy's names, every rate algorithm,
// several limits, SHADOW), permits and name counts: a call is granted
// exactly when every name that is not SHADOW has room alone (never more
// than a name would grant alone); a granted call takes each name's
// permits (a SHADOW name's only when it had room); a denied call leaves
// every name as it was (RL.AVAILABLE before and after).
func TestAlsoProperty(t *testing.T) {
	h := start(t)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)

	type name struct {
		key    string
		cap    int64
		shadow bool
	}
	// Long intervals: nothing refills while the test runs (a token
	// bucket of 1h gives one permit back in minutes).
	var names []name
	algos := []string{"token-bucket", "leaky-bucket", "fixed-window", "sliding-window", "sliding-log"}
	for i, algo := range algos {
		for j := 0; j < 2; j++ {
			key := fmt.Sprintf("p-%s-%d", algo, j)
			rate := int64(3 + rng.IntN(8))
			args := []any{"RL.SETRATE", key, rate, "1h", "ALGO", algo}
			if j == 1 && algo != "leaky-bucket" {
				args = append(args, "LIMIT", rate+2, "2h") // several limits
			}
			h.Do(t, args...).Equal(int64(1))
			names = append(names, name{key: key, cap: rate})
		}
		// A policy's names (state in its hashes).
		h.Do(t, "RL.POLICY", "SET", fmt.Sprintf("pol%d:*", i), 4+i, "1h", "ALGO", algo).Equal(int64(1))
		for j := 0; j < 2; j++ {
			names = append(names, name{key: fmt.Sprintf("pol%d:%d", i, j), cap: int64(4 + i)})
		}
	}
	h.Do(t, "RL.SETRATE", "p-shadow", 3, "1h", "SHADOW").Equal(int64(1))
	names = append(names, name{key: "p-shadow", cap: 3, shadow: true})
	// A leaky bucket grants only when empty: alone, it grants any
	// permits up to its burst then; RL.AVAILABLE says burst or 0.

	avail := func(key string) int64 { return h.Do(t, "RL.AVAILABLE", key).Int() }
	granted, denied := 0, 0
	for step := 0; step < 250; step++ {
		k := 2 + rng.IntN(4)
		pick := rng.Perm(len(names))[:k]
		args := []any{"RL.ACQUIRE"}
		before := make([]int64, k)
		permits := make([]int64, k)
		for i, p := range pick {
			n := names[p]
			before[i] = avail(n.key)
			permits[i] = 1 + rng.Int64N(min(n.cap, 3))
			if i > 0 {
				args = append(args, "ALSO")
			}
			args = append(args, n.key, permits[i])
		}
		g := h.Do(t, args...).Also()
		wantGrant := true
		for i, p := range pick {
			if !names[p].shadow && before[i] < permits[i] {
				wantGrant = false
			}
		}
		if g.Granted != wantGrant {
			t.Fatalf("step %d: %v answered %+v; available before %v: want granted=%v", step, args, g, before, wantGrant)
		}
		for i, p := range pick {
			n := names[p]
			after := avail(n.key)
			want := before[i]
			if g.Granted && before[i] >= permits[i] {
				want = before[i] - permits[i]
				if strings.HasPrefix(n.key, "p-leaky") || strings.HasPrefix(n.key, "pol1:") { // a leaky bucket holds burst or 0
					want = 0
				}
			}
			if after != want {
				t.Fatalf("step %d: %v answered %+v; %s had %d, has %d, want %d", step, args, g, n.key, before[i], after, want)
			}
		}
		if g.Granted {
			granted++
		} else {
			denied++
		}
		if step%50 == 49 { // fresh state now and then, so grants keep coming
			for _, n := range names {
				h.Do(t, "RL.RESET", n.key)
			}
		}
	}
	t.Logf("250 calls: %d granted, %d denied, every name as alone", granted, denied)
	if granted == 0 || denied == 0 {
		t.Errorf("the mix never granted or never denied: %d/%d", granted, denied)
	}
}
