package sharding

// Probe returns the shards one request tries, in order: a start shard
// chosen by r (a random number), then up to probes more, walking on from
// it. Spreading the start evenly spreads load evenly; walking on from a
// denial finds the permits left in other shards when load is uneven.
func Probe(shards, probes int, r uint64) []int {
	n := min(shards, probes+1)
	order := make([]int, n)
	start := int(r % uint64(shards))
	for i := range order {
		order[i] = (start + i) % shards
	}
	return order
}

// Merged combines the answers of the shards one request tried into the
// reply of a denial:
//   - remaining: the most permits one request could get now from one of
//     the shards tried (a request is served by one shard);
//   - retry_after: the soonest any tried shard could grant;
//   - reset_after: when every tried shard is full again.
type Merged struct {
	n   int
	res resultFields
}

type resultFields struct {
	remaining, retryAfter, resetAfter int64
}

func (m *Merged) Add(remaining, retryAfter, resetAfter int64) {
	if m.n == 0 {
		m.res = resultFields{remaining, retryAfter, resetAfter}
	} else {
		m.res.remaining = max(m.res.remaining, remaining)
		m.res.retryAfter = min(m.res.retryAfter, retryAfter)
		m.res.resetAfter = max(m.res.resetAfter, resetAfter)
	}
	m.n++
}

// Len is how many answers were added.
func (m *Merged) Len() int { return m.n }

// Result is the merged denial: remaining, retry_after and reset_after.
func (m *Merged) Result() (remaining, retryAfter, resetAfter int64) {
	return m.res.remaining, m.res.retryAfter, m.res.resetAfter
}
