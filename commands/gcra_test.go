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
		{"k 4 3 1e-3 tokens 1", limiter.Throttle{MaxBurst: 4, Count: 3, Period: 0.001, Quantity: 1}},
		{"k 1000000000 1000000000 1 TOKENS 1000000000", limiter.Throttle{MaxBurst: 1e9, Count: 1e9, Period: 1, Quantity: 1e9}},
		{"k 0 1 3153600000", limiter.Throttle{MaxBurst: 0, Count: 1, Period: 3153600000, Quantity: 1}}, // 100 years
		{"k 0 10 31536000000", limiter.Throttle{MaxBurst: 0, Count: 10, Period: 31536000000, Quantity: 1}},
		// tests/unit/gcra.tcl, "GCRA - argument validation": valid calls.
		{"mykey 10 5 60", limiter.Throttle{MaxBurst: 10, Count: 5, Period: 60, Quantity: 1}},
		{"mykey 10 5 60 TOKENS 2", limiter.Throttle{MaxBurst: 10, Count: 5, Period: 60, Quantity: 2}},
		{"mykey 10 5 0.5", limiter.Throttle{MaxBurst: 10, Count: 5, Period: 0.5, Quantity: 1}},
	}
	for _, tc := range ok {
		args := append([]string{"GCRA"}, strings.Split(tc.line, " ")...)
		r, err := ParseGCRA(args)
		if err != nil || r.Key != args[1] || r.Throttle != tc.want {
			t.Errorf("GCRA %s = %+v, %v; want %+v", tc.line, r, err, tc.want)
		}
	}
	const (
		arity     = "wrong number of arguments for 'gcra' command"
		positive  = "value is out of range, must be positive"
		integer   = "value is not an integer or out of range"
		atLeast1  = "value is out of range, value must between 1 and 9223372036854775807"
		float     = "value is not a valid float"
		period    = "period must be > 0 and < 1e12"
		overTok   = "GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow"
		overBurst = "GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow"
	)
	bad := []struct{ line, want string }{
		// tests/unit/gcra.tcl (redis/redis), "GCRA - argument validation"
		// and "GCRA - overflow", with gcra.c's and object.c's full words.
		{"", arity},
		{"mykey", arity},
		{"mykey 10", arity},
		{"mykey 10 5", arity},
		{"mykey -1 5 10", positive},
		{"mykey notanumber 5 10", positive},
		{"mykey 10 0 10", atLeast1},
		{"mykey 10 -1 10", atLeast1},
		{"mykey 10 notanumber 10", integer},
		{"mykey 10 5 0", period},
		{"mykey 10 5 -1", period},
		{"mykey 10 5 notanumber", float},
		{"mykey 10 5 10 TOKENS", "Missing TOKENS value"},
		{"mykey 10 5 10 TOKENS 0", atLeast1},
		{"mykey 10 5 10 TOKENS -1", atLeast1},
		{"mykey 10 5 10 TOKENS notanumber", integer},
		{"mykey 1 1 86400 TOKENS 200000000", overTok},
		{"mykey 200000000 1 86400", overBurst},
		{"mykey 1 1 2147483647 TOKENS 2147483647", overTok},
		// More of gcra.c's edges.
		{"k 1 1 1 TOKENS 1 x", arity},
		{"k +1 1 1", positive},
		{"k 01 1 1", positive},
		{"k 1 x 1", integer},
		{"k 1 99999999999999999999 1", integer},
		{"k 1 1 x", float},
		{"k 1 1 nan", float},
		{"k 1 1 1e999", float},
		{"k 1 1 ", float},
		{"k 1 1 -1.5", period},
		{"k 1 1 1e12", period},
		{"k 1 1 inf", period},
		{"k 1 1 1 COUNT 1", "syntax error"},
		{"k 1 1 1 TOKENS x", integer},
		{"k 1000000000 1 1000000", overBurst},
		{"k 9223372036854775807 1 2e-6", overBurst}, // max-burst+1 stays LONG_MAX in gcra.c
		{"k 0 1 999999999999.99 TOKENS 9224", overTok},
		// Calls Redis would take but past rlproxy's narrower limits.
		{"k 1000000001 1 1", "value is out of range, value must between 0 and 1000000000"},
		{"k 1 10000000000 1", "value is out of range, value must between 1 and 1000000000"},
		{"k 1 1 1 TOKENS 1000000001", "value is out of range, value must between 1 and 1000000000"},
		{"k 0 1 3153600000.001", "combination of period, tokens-per-period and max-burst would cause an overflow: a full burst must refill within 36500 days"},
	}
	for _, tc := range bad {
		args := append([]string{"GCRA"}, strings.Fields(tc.line)...)
		if strings.HasSuffix(tc.line, " ") {
			args = append(args, "")
		}
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
	"k 15 30 60", "k 0 1 0.5", "k 4 3 1.5 TOKENS 2", "k 4 3 1e-3 tokens 0", "k 1 1 86400 TOKENS 200000000",
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
		if r.Key != args[1] || th.MaxBurst < 0 || th.Count < 1 || th.Quantity < 1 || !(th.Period > 0 && th.Period < 1e12) ||
			th.Check() != nil || th.Emission() < 1 {
			t.Fatalf("%q parsed to an invalid request: %+v", args, r)
		}
	})
}
