package limiter

import "fmt"

// CellArgs builds the ARGV of cell.lua, redis-cell's CL.THROTTLE: at most
// maxBurst+1 actions at once, count actions per period seconds, and this
// call takes quantity of them (0 only looks). The caller validates them as
// redis-cell does; cell.lua answers an error for a zero or negative rate.
func CellArgs(maxBurst, count, period, quantity int64) []any {
	return []any{maxBurst, count, period, quantity}
}

// Indexes of the five integers of a CL.THROTTLE reply, in redis-cell's order.
const (
	CellLimited    = iota // 1 when the action was limited, else 0
	CellLimit             // max_burst + 1
	CellRemaining         // actions left now
	CellRetryAfter        // seconds until a retry could succeed; -1 when allowed
	CellResetAfter        // seconds until the limit is fully available again
)

// DecodeCell checks and decodes cell.lua's reply: five integers, indexed by
// CellLimited ... CellResetAfter. A reply of another shape is an error.
func DecodeCell(v any) ([5]int64, error) {
	var out [5]int64
	arr, ok := v.([]any)
	if !ok || len(arr) != len(out) {
		return out, fmt.Errorf("cell script: unexpected reply %T %v", v, v)
	}
	for i := range out {
		n, err := toInt(arr[i])
		if err != nil {
			return [5]int64{}, fmt.Errorf("cell script: reply %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}
