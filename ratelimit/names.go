package ratelimit

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/limiter"
)

// Requests for different names of one policy on one node are decided by
// one script call (names.lua), the way concurrent requests for one
// sub-limiter are: they are coalesced by node and policy, not by name.
// Only for what the names script serves: one shard (an ask that may wait
// is booked ahead there as alone, then held by the waiting code). On a
// Redis Cluster, by the master that serves each name's slot: a script
// declares the first name's keys and is told the others' (each name has a
// slot of its own), running with allow-cross-slot-keys (Redis 7). A name
// whose slot moved meanwhile is refused by that master before anything is
// written and goes the full path, which follows MOVED/ASK. In PER_CLIENT
// mode each client's budget of a name is a name of its own here (its
// state keys carry the client).

// nameAsk is one request's part of a names call.
type nameAsk struct {
	keys []string
	ask  limiter.Ask
}

// namesCall returns the call that decides r on e's shard 0 together with
// other names of e's policy, or false when the names script cannot.
func (l *Limiters) namesCall(e *entry, r Request) (coalesce.Call[nameAsk, answer], bool) {
	if e.policy == nil || e.Shards != 1 || (l.cluster && l.noCrossSlot.Load()) {
		return coalesce.Call[nameAsk, answer]{}, false
	}
	script := l.scripts.Names(e.Config, l.cluster)
	if script == nil {
		return coalesce.Call[nameAsk, answer]{}, false
	}
	node, keys := e.node(0), l.keysOf(e, 0, clientKey(e.Stored, r.Client))
	at := namesTarget{node: node}
	if l.cluster {
		at.master = node.MasterOf(context.Background(), keys[0])
	}
	b, ok := e.policy.batches.Load(at)
	if !ok {
		conf := e.confArg(0)
		key := node.Name() + "\x00names\x00" + conf
		if l.cluster {
			key += "\x00" + at.master
		}
		b, _ = e.policy.batches.LoadOrStore(at, &namesBatch{key: key, run: l.runNames(node, script, conf)})
	}
	batch := b.(*namesBatch)
	return coalesce.Call[nameAsk, answer]{
		Key:  batch.key,
		Item: nameAsk{keys: keys, ask: limiter.Ask{Permits: r.Permits, MaxWait: r.MaxWait}},
		Run:  batch.run,
	}, true
}

// namesBatch is the coalescer key and the run of a policy's names calls
// to one node (on a cluster, for the names of one master's slots): made
// once per policy and target (policy.batches), not per request.
type namesBatch struct {
	key string
	run coalesce.RunFunc[nameAsk, answer]
}

// namesTarget is where a names call goes: a node of the pool and, on a
// cluster, the master serving the first name's slot.
type namesTarget struct {
	node   *backend.Node
	master string
}

// runNames decides a batch of asks for names of one policy on one node:
// each name's asks in arrival order, in one script call.
func (l *Limiters) runNames(node *backend.Node, script *redis.Script, conf string) coalesce.RunFunc[nameAsk, answer] {
	return func(ctx context.Context, items []nameAsk) ([]answer, error) {
		// Each name once, with its asks in arrival order; the asks of a name
		// asked once (most) are a view of one array, of capacity 1, so
		// that a second ask is appended to a copy.
		names := make([]limiter.NameAsks, 0, len(items))
		nameOf := make([]int, len(items))         // per item, its name
		asks := make([]limiter.Ask, len(items))   // per item, its ask
		index := make(map[string]int, len(items)) // by first state key: a name's (and client's) own
		for i, it := range items {
			asks[i] = it.ask
			n, ok := index[it.keys[1]]
			if ok {
				names[n].Asks = append(names[n].Asks, it.ask)
			} else {
				n = len(names)
				index[it.keys[1]] = n
				names = append(names, limiter.NameAsks{Keys: it.keys, Asks: asks[i : i+1 : i+1]})
			}
			nameOf[i] = n
		}
		keys, args := limiter.NamesArgs(conf, names, l.cluster)
		v, err := node.Eval(ctx, script, keys, args...)
		if err != nil {
			if l.cluster && flagsUnsupported(err) {
				l.noCrossSlot.Store(true)
			}
			return nil, err
		}
		reps, err := limiter.DecodeNames(v, names)
		if err != nil {
			return nil, err
		}
		out := make([]answer, len(items))
		answered := make([]int, len(names)) // per name, its asks answered so far
		for i, n := range nameOf {
			rep := reps[n]
			out[i] = answer{status: rep.Status}
			if rep.Status == limiter.StatusOK {
				out[i].Result = rep.Results[answered[n]]
			}
			answered[n]++
		}
		return out, nil
	}
}

// flagsUnsupported tells a names call's error on a cluster of Redis 6,
// which has no script flags and cannot compile the flag line: from then
// on each name gets a script call of its own. (Redis answers "ERR Error
// compiling script (new function): user_script:1: ..."; HasErrorPrefix
// drops the "ERR ".)
func flagsUnsupported(err error) bool {
	return redis.HasErrorPrefix(err, "Error compiling script")
}
