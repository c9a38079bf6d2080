package limiter

import "fmt"

// NameAsks is one name's part of a names call (names.lua): the KEYS of
// its script (config key, state keys) and its asks, decided in order.
type NameAsks struct {
	Keys []string
	Asks []Ask
}

// NamesArgs builds the KEYS and ARGV of a names call: conf is a policy's
// config (ARGV[2], see prelude.lua); every name has as many keys.
func NamesArgs(conf string, names []NameAsks) (keys []string, args []any) {
	args = []any{string(OpAcquire), conf, len(names[0].Keys)}
	for _, n := range names {
		keys = append(keys, n.Keys...)
		runs := AcquireArgs("", n.Asks)[2:]
		args = append(args, len(runs)/3)
		args = append(args, runs...)
	}
	return keys, args
}

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
		size := runValues * (len(AcquireArgs("", n.Asks)) - 2) / 3
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
