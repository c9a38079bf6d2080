package commands

import (
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

func TestParseGCRA(t *testing.T) {
	ok := []struct {
		line string
		want limiter.Throttle
	}{
		{"k 15 30 60", limiter.Throttle{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}},
		{"k 0 1 0.5", limiter.Throttle{MaxBurst: 0, Count: 1, Period: 0.5, Quantity: 1}},
		{"k 4 3 1.5 TOKENS 2", limiter.Throttle{MaxBurst: 4, Count: 3, Period: 1.5, Quantity: 2}},
		{"k 4 3 1e-3 tokens 0", limiter.Throttle{MaxBurst: 4, Count: 3, Period: 0.001, Quantity: 0}},
		{"k 1000000000 1000000000 1 TOKENS 1000000000", limiter.Throttle{MaxBurst: 1e9, Count: 1e9, Period: 1, Quantity: 1e9}},
		{"k 0 1 3153600000", limiter.Throttle{MaxBurst: 0, Count: 1, Period: 3153600000, Quantity: 1}}, // 100 years
		{"k 0 10 31536000000", limiter.Throttle{MaxBurst: 0, Count: 10, Period: 31536000000, Quantity: 1}},
	}
	for _, tc := range ok {
		args := append([]string{"GCRA"}, strings.Split(tc.line, " ")...)
		r, err := ParseGCRA(args)
		if err != nil || r.Key != "k" || r.Throttle != tc.want {
			t.Errorf("GCRA %s = %+v, %v; want %+v", tc.line, r, err, tc.want)
		}
	}
	// Redis 8.8's wording for each (gcra.c and object.c), checked in its order.
	bad := []struct{ line, want string }{
		{"k 1 1", "wrong number of arguments for 'gcra' command"},
		{"k 1 1 1 TOKENS 1 x", "wrong number of arguments for 'gcra' command"},
		{"k -1 1 1", "value is out of range, must be positive"},
		{"k x 1 1", "value is out of range, must be positive"},
		{"k +1 1 1", "value is out of range, must be positive"},
		{"k 01 1 1", "value is out of range, must be positive"},
		{"k 1000000001 1 1", "value is out of range, value must between 0 and 1000000000"},
		{"k 1 x 1", "value is not an integer or out of range"},
		{"k 1 99999999999999999999 1", "value is not an integer or out of range"},
		{"k 1 0 1", "value is out of range, value must between 1 and 1000000000"},
		{"k 1 -5 1", "value is out of range, value must between 1 and 1000000000"},
		{"k 1 1 x", "value is not a valid float"},
		{"k 1 1 nan", "value is not a valid float"},
		{"k 1 1 1e999", "value is not a valid float"},
		{"k 1 1 ", "value is not a valid float"},
		{"k 1 1 0", "period must be > 0 and < 1e12"},
		{"k 1 1 -1.5", "period must be > 0 and < 1e12"},
		{"k 1 1 1e12", "period must be > 0 and < 1e12"},
		{"k 1 1 inf", "period must be > 0 and < 1e12"},
		{"k 1 1 1 COUNT 1", "syntax error"},
		{"k 1 1 1 TOKENS", "Missing TOKENS value"},
		{"k 1 1 1 TOKENS x", "value is not an integer or out of range"},
		{"k 1 1 1 TOKENS -1", "value is out of range, value must between 0 and 1000000000"},
		{"k 1 1 1 TOKENS 1000000001", "value is out of range, value must between 0 and 1000000000"},
		// Past Redis's own checks: a full burst over 100 years to refill.
		{"k 0 1 3153600000.001", "combination of period, tokens-per-period and max-burst would cause an overflow: a full burst must refill within 36500 days"},
		{"k 1000000000 1 1000000", "combination of period, tokens-per-period and max-burst would cause an overflow: a full burst must refill within 36500 days"},
	}
	for _, tc := range bad {
		args := append([]string{"GCRA"}, strings.Split(tc.line, " ")...)
		if _, err := ParseGCRA(args); err == nil || err.Error() != tc.want {
			t.Errorf("GCRA %s: err = %v, want %q", tc.line, err, tc.want)
		}
	}
}

func TestParseThrottleLimits(t *testing.T) {
	// Issue 12: this answered a Lua error ("value is not an integer or out
	// of range ... @user_script"); it is a clear error before any backend.
	_, err := ParseThrottle(strings.Split("CL.THROTTLE cx 1000000000 1 1000000000 1000000000", " "))
	if err == nil || !strings.Contains(err.Error(), "36500 days") {
		t.Errorf("CL.THROTTLE with a 10^18 s refill: err = %v, want the refill limit", err)
	}
	// The longest refill allowed: 100 years for max_burst+1 = 4.
	if _, err := ParseThrottle(strings.Split("RL.THROTTLE cx 3 1 788400000 1", " ")); err != nil {
		t.Errorf("RL.THROTTLE with a 100-year refill: %v", err)
	}
	if _, err := ParseThrottle(strings.Split("RL.THROTTLE cx 3 1 788400001 1", " ")); err == nil {
		t.Errorf("RL.THROTTLE with a refill over 100 years: no error")
	}
}

var gcraSeeds = []string{
	"k 15 30 60", "k 0 1 0.5", "k 4 3 1.5 TOKENS 2", "k 4 3 1e-3 tokens 0",
	"k 1000000000 1000000000 1e-9", "k 1000000000 1 1000000", "k 1 1 0x1p-3",
	"k -0 1 1", "k 1 1 1 TOKENS", "k 1 1 1 TOKENS 1 x", "k 1 1 1_0", "k 1 1 .5", "k 1 1 5.",
}

// FuzzParseGCRA checks every GCRA that parses is within cell.lua's range.
func FuzzParseGCRA(f *testing.F) {
	for _, s := range gcraSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"GCRA"}, strings.Split(line, " ")...)
		r, err := ParseGCRA(args)
		if err != nil {
			checkErrText(t, err)
			return
		}
		th := r.Throttle
		if r.Key != args[1] || th.MaxBurst < 0 || th.Count < 1 || th.Quantity < 0 || !(th.Period > 0 && th.Period < 1e12) ||
			th.Check() != nil || th.Emission() < 1 {
			t.Fatalf("%q parsed to an invalid request: %+v", args, r)
		}
	})
}
