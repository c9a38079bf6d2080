package limiter

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Several names, one decision (RL.ACQUIRE ... ALSO ...): also.lua decides
// the names that live on one node (on a Redis Cluster, in one slot) in one
// call, all or nothing.

// alsoAlgos are the algorithms also.lua decides (not concurrency: a lease
// is held, not spent).
var alsoAlgos = []Algo{TokenBucket, SlidingLog, SlidingWindow, FixedWindow, LeakyBucket}

// newAlso builds also.lua after make_store(KEYS, ARGV, algo), which
// makes a store: the names of one algorithm whose state is stored alike
// share its set-up (clock, functions, state storage); each has its own
// config and limit. A function per algorithm, its body between the
// prelude and also_name.lua, picked by an if-chain: no table to build
// per call, and no one giant function (the embedded backend's Lua
// compiles one of five preludes too slowly). also_inline.lua comes first:
// the common calls (token buckets and fixed windows of one limit each)
// are decided there, inline, and never reach the stores.
func newAlso(prelude string, files map[Algo]string) *redis.Script {
	return redis.NewScript(alsoSource(prelude, files))
}

func alsoSource(prelude string, files map[Algo]string) string {
	var b, pick strings.Builder
	// The fast path first: a call it decides returns before the stores'
	// functions are made.
	b.WriteString(lua("also_inline.lua"))
	pick.WriteString("local function make_store(KEYS, ARGV, algo)\n")
	for i, a := range alsoAlgos {
		fn := "store_" + strings.ReplaceAll(string(a), "-", "_")
		fmt.Fprintf(&b, "local function %s(KEYS, ARGV, algo)\n", fn)
		if a == FixedWindow {
			// Only the fixed window reads the calendar: defining its
			// functions in every store cost an ALSO call about 2%.
			b.WriteString(lua("calendar.lua"))
		}
		b.WriteString(prelude)
		b.WriteString("local reset_us -- for an algorithm without one (wrapLimit returns it)\n")
		b.WriteString(wrapLimit(lua(files[a])))
		b.WriteString(lua("multi.lua"))
		b.WriteString(lua("also_name.lua"))
		b.WriteString("\nend\n")
		kw := "elseif"
		if i == 0 {
			kw = "if"
		}
		fmt.Fprintf(&pick, "%s algo == %q then return %s(KEYS, ARGV, algo)\n", kw, string(a), fn)
	}
	pick.WriteString("end\nend\n")
	b.WriteString(pick.String())
	b.WriteString(lua("also.lua"))
	return b.String()
}

// Also returns the script that decides several names on one node together.
func (s *Scripts) Also() *redis.Script { return s.also }

// AlsoName is one name of an also.lua call: its algorithm, its script
// config argument (an explicit limiter's epoch, or a policy's config:
// prelude.lua's ARGV[2]) and its keys.
type AlsoName struct {
	Algo Algo
	Conf string
	Keys []string
}

// AlsoMember is one name of a group: Name indexes the call's names.
type AlsoMember struct {
	Name    int
	Permits int64
	MaxWait int64 // ms
	Shadow  bool  // its denial does not deny the group
}

// AlsoArgs builds the KEYS and ARGV of an also.lua acquire.
func AlsoArgs(names []AlsoName, groups [][]AlsoMember) (keys []string, args []any) {
	keys, args = alsoHead("acquire", names)
	args = append(args, len(groups))
	for _, g := range groups {
		args = append(args, len(g))
		for _, m := range g {
			shadow := 0
			if m.Shadow {
				shadow = 1
			}
			args = append(args, m.Name+1, m.Permits, m.MaxWait, shadow)
		}
	}
	return keys, args
}

// UndoArgs builds the KEYS and ARGV of an also.lua undo: per name, the
// permits to give back and the µs (the node's clock) they were granted at.
func UndoArgs(names []AlsoName, permits, grantedAt []int64) (keys []string, args []any) {
	keys, args = alsoHead("undo", names)
	for i := range names {
		args = append(args, permits[i], grantedAt[i])
	}
	return keys, args
}

func alsoHead(op string, names []AlsoName) (keys []string, args []any) {
	args = []any{op, len(names)}
	for _, n := range names {
		keys = append(keys, n.Keys...)
		args = append(args, string(n.Algo), n.Conf, len(n.Keys))
	}
	return keys, args
}

// AlsoNameReply is one name's part of an also.lua reply.
type AlsoNameReply struct {
	Status Status
	Epoch  string
	NowUs  int64 // the node's clock when the name was decided
}

// AlsoGroup is one group's part of an also.lua acquire reply.
type AlsoGroup struct {
	Granted bool
	// Undecided: a name of the group has Status other than OK; nothing
	// of the group was decided.
	Undecided bool
	Members   []Result // as each name alone; Remaining after the group
}

// DecodeAlso decodes an also.lua reply for names and groups (groups nil
// for an undo).
func DecodeAlso(v any, names []AlsoName, groups [][]AlsoMember) ([]AlsoNameReply, []AlsoGroup, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 3*len(names) {
		return nil, nil, fmt.Errorf("also script: unexpected reply %T %v", v, v)
	}
	nr := make([]AlsoNameReply, len(names))
	for i := range nr {
		st, err1 := toInt(arr[3*i])
		epoch, ok := arr[3*i+1].(string)
		now, err2 := toInt(arr[3*i+2])
		if err1 != nil || err2 != nil || !ok {
			return nil, nil, fmt.Errorf("also script: name %d: bad reply %v", i, arr[3*i:3*i+3])
		}
		nr[i] = AlsoNameReply{Status: Status(st), Epoch: epoch, NowUs: now}
	}
	rest := arr[3*len(names):]
	gs := make([]AlsoGroup, len(groups))
	for gi, g := range groups {
		if len(rest) == 0 {
			return nil, nil, fmt.Errorf("also script: reply too short for group %d", gi)
		}
		verdict, err := toInt(rest[0])
		rest = rest[1:]
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("also script: group %d: %w", gi, err)
		case verdict == -2:
			gs[gi].Undecided = true
			continue
		case verdict != 0 && verdict != 1:
			return nil, nil, fmt.Errorf("also script: group %d: verdict %d", gi, verdict)
		case len(rest) < 4*len(g):
			return nil, nil, fmt.Errorf("also script: reply too short for group %d", gi)
		}
		gs[gi].Granted = verdict == 1
		gs[gi].Members = make([]Result, len(g))
		for j := range g {
			var f [4]int64
			for x := range f {
				if f[x], err = toInt(rest[4*j+x]); err != nil {
					return nil, nil, fmt.Errorf("also script: group %d member %d: %w", gi, j, err)
				}
			}
			if f[0] < -1 || f[0] > 1 {
				return nil, nil, fmt.Errorf("also script: group %d member %d: granted %d", gi, j, f[0])
			}
			gs[gi].Members[j] = Result{
				Granted: f[0] == 1, OverCapacity: f[0] == -1, Remaining: f[1],
				RetryAfterMs: usToMs(f[2]), RetryAfterUs: f[2], ResetAfterMs: usToMs(f[3]),
			}
		}
		rest = rest[4*len(g):]
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("also script: reply has %d values too many", len(rest))
	}
	return nr, gs, nil
}
