package redistest

import (
	"slices"
	"testing"
)

// ReportAlsoCost measures a lone acquire and an ALSO of two names side by
// side: each cost function returns Redis's CPU µs and script µs per call,
// and they run alternated for rounds rounds (so load moves both alike).
// It reports the medians of each and the ALSO's ratios to the lone
// acquire.
func ReportAlsoCost(b *testing.B, rounds int, single, also func() (cpu, script float64)) {
	var cpu1, cpu2, lua1, lua2 []float64
	for range rounds {
		c, l := single()
		cpu1, lua1 = append(cpu1, c), append(lua1, l)
		c, l = also()
		cpu2, lua2 = append(cpu2, c), append(lua2, l)
	}
	b.ReportMetric(median(lua1), "single-script-µs/call")
	b.ReportMetric(median(lua2), "also2-script-µs/call")
	b.ReportMetric(median(lua2)/median(lua1), "script-ratio")
	b.ReportMetric(median(cpu1), "single-cpu-µs/call")
	b.ReportMetric(median(cpu2), "also2-cpu-µs/call")
	b.ReportMetric(median(cpu2)/median(cpu1), "cpu-ratio")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
