package limiter

import (
	"fmt"
	"strconv"
)

// NameAsks is one name's part of a names call (names.lua): the KEYS of
// its script (config key, state keys) and its asks, decided in order.
type NameAsks struct {
	Keys []string
	Asks []Ask
}

// NamesArgs builds the KEYS and ARGV of a names call: conf is a policy's
// config (ARGV[2], see prelude.lua); every name has as many keys. KEYS
// are every name's config key, then every name's state keys (names.lua
// takes each group with one command). On a Redis Cluster (crossSlot)
// only the first name's keys are KEYS, the others go in ARGV, each
// name's in a row: a call may declare the keys of one slot only.
func NamesArgs(conf string, names []NameAsks, crossSlot bool) (keys []string, args []any) {
	per := len(names[0].Keys)
	argKeys := 0 // the other names' keys, in ARGV on a cluster
	if crossSlot {
		argKeys = per * (len(names) - 1)
	}
	args = make([]any, 4, 4+argKeys+len(names))
	args[0], args[1], args[2], args[3] = opNames, conf, per, argKeys
	keys = names[0].Keys
	if len(names) > 1 && !crossSlot {
		keys = make([]string, len(names), per*len(names))
		for i, n := range names {
			keys[i] = n.Keys[0]
		}
		for _, n := range names {
			keys = append(keys, n.Keys[1:]...)
		}
	}
	if crossSlot {
		for _, n := range names[1:] {
			for _, k := range n.Keys {
				args = append(args, k)
			}
		}
	}
	if p, ok := sameSingles(names); ok {
		return keys, append(args, "*"+strconv.FormatInt(-p, 10))
	}
	for _, n := range names {
		if single(n.Asks) {
			args = append(args, negated(n.Asks[0].Permits))
			continue
		}
		runs := AcquireArgs("", n.Asks)[2:]
		args = append(args, len(runs)/3)
		args = append(args, runs...)
	}
	return keys, args
}

// sameSingles returns the permits every name asks when each is asked
// once, not waiting, for as many (most calls): its ARGV is then one
// value for all names ('*' and the permits negated), not one per name.
func sameSingles(names []NameAsks) (int64, bool) {
	p := names[0].Asks[0].Permits
	for _, n := range names {
		if !single(n.Asks) || n.Asks[0].Permits != p {
			return 0, false
		}
	}
	return p, true
}

// opNames is a names call's op (ARGV[1]): it tells prelude.lua that
// names.lua checks every name's config key itself.
const opNames = "names"

// negatives are -0 .. -64 as ARGV values: a names call gives most names'
// permits negated (the short form), and an int64 in an interface is an
// allocation unless it is one of these.
var negatives = func() (n [65]any) {
	for i := range n {
		n[i] = int64(-i)
	}
	return n
}()

func negated(permits int64) any {
	if permits >= 0 && permits < int64(len(negatives)) {
		return negatives[permits]
	}
	return -permits
}

// single reports whether asks go in a names call's short form: one ask
// that does not wait (its reply is 4 values, not a run's 8).
func single(asks []Ask) bool {
	return len(asks) == 1 && asks[0].MaxWait == 0 && asks[0].Permits > 0
}

// A name asked once replies a plain grant (granted, no wait) as its
// remaining and reset (remaining >= 0: grantValues); any other answer as
// longForm then granted, remaining, retry, reset; or leftSingle alone
// when the name is left to the caller (names.lua).
const (
	grantValues = 2
	longForm    = -1
	leftSingle  = -2
)

// DecodeNames decodes the reply of a names call into one Reply per name:
// its Results, or StatusEpochChange when the name has a config of its own
// (or the whole call said so).
func DecodeNames(v any, names []NameAsks) ([]Reply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return nil, fmt.Errorf("names script: unexpected reply %T %v", v, v)
	}
	out := make([]Reply, len(names))
	status, err := toInt(arr[0])
	if err != nil {
		return nil, fmt.Errorf("names script: status: %w", err)
	}
	if status != int64(StatusOK) {
		for i := range out {
			out[i].Status = Status(status)
		}
		return out, nil
	}
	epoch, ok := arr[1].(string)
	if !ok {
		return nil, fmt.Errorf("names script: epoch: not a string: %T %v", arr[1], arr[1])
	}
	// The Results of the names asked once (most), in one array.
	singles := make([]Result, len(names))
	rest := arr[2:]
	for i, n := range names {
		if len(rest) == 0 {
			return nil, fmt.Errorf("names script: reply too short for name %d", i)
		}
		// A name's first value: for a name asked once, a grant's
		// remaining, longForm or leftSingle; for others, 2 (left to the
		// caller) alone or a status 0 before its runs.
		first, err := toInt(rest[0])
		if err != nil {
			return nil, fmt.Errorf("names script: name %d: %w", i, err)
		}
		out[i] = Reply{Epoch: epoch}
		if !single(n.Asks) {
			if first == int64(StatusEpochChange) {
				out[i].Status, rest = StatusEpochChange, rest[1:]
				continue
			}
			if first != int64(StatusOK) {
				return nil, fmt.Errorf("names script: name %d: status %d", i, first)
			}
			if out[i].Results, rest, err = decodeRuns(make([]Result, 0, len(n.Asks)), rest[1:], n.Asks); err != nil {
				return nil, fmt.Errorf("names script: name %d: %w", i, err)
			}
			continue
		}
		if first == leftSingle {
			out[i].Status, rest = StatusEpochChange, rest[1:]
			continue
		}
		// v: granted, remaining, retry, reset.
		var v [4]int64
		width := grantValues
		if first == longForm {
			width = 1 + len(v)
		} else if first < 0 {
			return nil, fmt.Errorf("names script: name %d: form %d", i, first)
		}
		if len(rest) < width {
			return nil, fmt.Errorf("names script: reply too short for name %d", i)
		}
		if width == grantValues {
			v[0], v[1] = 1, first
			v[3], err = toInt(rest[1])
		}
		for k := 0; k < len(v) && width > grantValues && err == nil; k++ {
			v[k], err = toInt(rest[1+k])
		}
		if err != nil {
			return nil, fmt.Errorf("names script: name %d: %w", i, err)
		}
		rest = rest[width:]
		if v[0] < -1 || v[0] > 1 {
			return nil, fmt.Errorf("names script: name %d: %d granted of one", i, v[0])
		}
		// As a run of one: granted, remaining, retry, reset are the
		// grant's (first = last) or the denial's.
		f := [runValues]int64{v[0], v[1], v[2], v[3], v[3]}
		if v[0] == 0 {
			f = [runValues]int64{5: v[1], 6: v[2], 7: v[3]}
		}
		out[i].Results = expandRun(singles[i:i:i+1], f, n.Asks[0].Permits, 1)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("names script: reply has %d values too many", len(rest))
	}
	return out, nil
}
