package main

import "testing"

func ans(overall string, sts ...descStatus) answer { return answer{overall: overall, statuses: sts} }

// judge calls a difference "all or nothing" only when the reference
// counted the differing descriptor in a refused request and rlproxy has
// more left under the same limit; anything else differs.
func TestJudge(t *testing.T) {
	over := descStatus{"OVER", "2/minute", 0}
	for _, tc := range []struct {
		name      string
		ref, rlp  answer
		uncounted bool // b was counted by the reference in an earlier refused request
		want      string
	}{
		{"same", ans("OK", descStatus{"OK", "2/minute", 1}), ans("OK", descStatus{"OK", "2/minute", 1}), false, same},
		{"counted here by the reference", ans("OVER", over, descStatus{"OK", "2/minute", 1}), ans("OVER", over, descStatus{"OK", "2/minute", 2}), false, allOrNone},
		{"counted before by the reference", ans("OVER", over, descStatus{"OVER", "2/minute", 0}), ans("OK", over, descStatus{"OK", "2/minute", 1}), true, allOrNone},
		{"never counted by the reference", ans("OK", descStatus{"OK", "3/minute", 1}, descStatus{"OK", "2/minute", 0}), ans("OK", descStatus{"OK", "3/minute", 1}, descStatus{"OK", "2/minute", 1}), false, unexplained},
		{"rlproxy has less", ans("OVER", over, descStatus{"OK", "2/minute", 1}), ans("OVER", over, descStatus{"OK", "2/minute", 0}), false, unexplained},
		{"another limit", ans("OVER", over, descStatus{"OK", "2/minute", 1}), ans("OVER", over, descStatus{"OK", "3/minute", 2}), false, unexplained},
		{"rlproxy refuses what the reference grants", ans("OK", descStatus{"OK", "2/minute", 1}), ans("OVER", descStatus{"OVER", "2/minute", 1}), true, unexplained},
		{"an error", ans("OK", descStatus{"OK", "2/minute", 1}), answer{err: "Unavailable"}, false, unexplained},
	} {
		descs := []string{"a=1", "b=1"}[2-len(tc.ref.statuses):]
		uncounted := map[string]bool{"b=1": tc.uncounted}
		if got := judge(descs, tc.ref, tc.rlp, uncounted); got != tc.want {
			t.Errorf("%s: %s against %s: got %q, want %q", tc.name, tc.ref, tc.rlp, got, tc.want)
		}
	}
}
