package limiter

import "fmt"

// NameAsks is one name's part of a names call (names.lua): the KEYS of
// its script (config key, state keys) and its asks, decided in order.
type NameAsks struct {
	Keys []string
	Asks []Ask
}

// NamesArgs builds the KEYS and ARGV of a names call: conf is a policy's
// config (ARGV[2], see prelude.lua); every name has as many keys. On a
// Redis Cluster (crossSlot) only the first name's keys are KEYS, the
// others go in ARGV: a call may declare the keys of one slot only.
func NamesArgs(conf string, names []NameAsks, crossSlot bool) (keys []string, args []any) {
	args = []any{string(OpAcquire), conf, len(names[0].Keys), 0}
	keys = names[0].Keys
	if len(names) > 1 {
		keys = append([]string(nil), keys...)
	}
	for _, n := range names[1:] {
		if crossSlot {
			for _, k := range n.Keys {
				args = append(args, k)
			}
			continue
		}
		keys = append(keys, n.Keys...)
	}
	args[3] = len(args) - 4
	for _, n := range names {
		if single(n.Asks) {
			args = append(args, -n.Asks[0].Permits)
			continue
		}
		runs := AcquireArgs("", n.Asks)[2:]
		args = append(args, len(runs)/3)
		args = append(args, runs...)
	}
	return keys, args
}

// single reports whether asks go in a names call's short form: one ask
// that does not wait (its reply is 4 values, not a run's 8).
func single(asks []Ask) bool {
	return len(asks) == 1 && asks[0].MaxWait == 0 && asks[0].Permits > 0
}

// singleValues is the number of reply values of a name asked once.
const singleValues = 4

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
	rest := arr[2:]
	for i, n := range names {
		if len(rest) == 0 {
			return nil, fmt.Errorf("names script: reply too short for name %d", i)
		}
		st, err := toInt(rest[0])
		if err != nil {
			return nil, fmt.Errorf("names script: name %d: %w", i, err)
		}
		rest = rest[1:]
		if st != int64(StatusOK) {
			out[i].Status = Status(st)
			continue
		}
		if single(n.Asks) {
			if len(rest) < singleValues {
				return nil, fmt.Errorf("names script: reply too short for name %d", i)
			}
			var f [singleValues]int64
			for k := range f {
				if f[k], err = toInt(rest[k]); err != nil {
					return nil, fmt.Errorf("names script: name %d: %w", i, err)
				}
			}
			rest = rest[singleValues:]
			// As a run of one: granted, remaining, retry, reset are the
			// grant's (first = last) or the denial's.
			run := []any{f[0], f[1], f[2], f[3], f[3], int64(0), int64(0), int64(0)}
			if f[0] == 0 {
				run = []any{f[0], int64(0), int64(0), int64(0), int64(0), f[1], f[2], f[3]}
			}
			if out[i], err = DecodeReply(append([]any{int64(0), arr[1]}, run...), OpAcquire, n.Asks); err != nil {
				return nil, err
			}
			continue
		}
		runs := 0
		for j := 0; j < len(n.Asks); j = runEnd(n.Asks, j) {
			runs++
		}
		size := runValues * runs
		if len(rest) < size {
			return nil, fmt.Errorf("names script: reply too short for name %d", i)
		}
		one := append([]any{int64(0), arr[1]}, rest[:size]...)
		if out[i], err = DecodeReply(one, OpAcquire, n.Asks); err != nil {
			return nil, err
		}
		rest = rest[size:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("names script: reply has %d values too many", len(rest))
	}
	return out, nil
}
