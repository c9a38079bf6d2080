package commands

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// opts are the server's defaults (config.Default): one shard, SHARDS AUTO
// sized for 50000 permits/s per shard, at most 64.
var opts = Options{DefaultShards: 1, ShardRate: 50000, MaxAutoShards: 64}

// words splits a command line on spaces.
func words(line string) []string { return strings.Split(line, " ") }

// checkErrText asserts what every parse error a user sees must be: one
// line (the server writes it as "-ERR <msg>\r\n") of bounded length that
// starts in lower case, or with the name of the option at fault (the
// server adds "ERR " to both, never to a user's word taken for a code).
func checkErrText(t testing.TB, err error) {
	t.Helper()
	msg := err.Error()
	if msg == "" || strings.ContainsAny(msg, "\r\n") || len(msg) > 400 {
		t.Fatalf("error text must be one non-empty line of bounded length, got %q", msg)
	}
	first, _, _ := strings.Cut(msg, " ")
	switch first {
	case "BURST", "SHARDS", "MODE", "TTL", "TIMEOUT", "LIMIT", "SHADOW", "Missing", "GCRA": // "Missing TOKENS value" and "GCRA limiting uses ..." are Redis's GCRA wording
	default:
		if msg[0] < 'a' || msg[0] > 'z' {
			t.Fatalf("error text must start in lower case or with an option name: %q", msg)
		}
	}
}

func TestParseDuration(t *testing.T) {
	const max = limiter.MaxInterval // 366d
	bad := func(s string) string {
		return "invalid interval " + quote(s) + ": use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"
	}
	notWhole := func(s string) string {
		return "interval " + quote(s) + " must be a whole number of milliseconds, at least 1"
	}
	tooBig := func(s string) string { return "interval " + quote(s) + " is out of range (at most 366d)" }
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "1", want: time.Millisecond},
		{in: "250", want: 250 * time.Millisecond},
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "1s", want: time.Second},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "1.001s", want: 1001 * time.Millisecond}, // float64 makes this 1000.9999...
		{in: "4.35s", want: 4350 * time.Millisecond},
		{in: "0.067s", want: 67 * time.Millisecond},
		{in: "0.001s", want: time.Millisecond},
		{in: "10m", want: 10 * time.Minute},
		{in: "1.5m", want: 90 * time.Second},
		{in: "2h", want: 2 * time.Hour},
		{in: "1d", want: 24 * time.Hour},
		{in: "0.5d", want: 12 * time.Hour},
		{in: "366d", want: max},
		{in: "8784h", want: max},
		{in: "1S", want: time.Second},
		{in: "10MS", want: 10 * time.Millisecond},
		{in: "007s", want: 7 * time.Second},
		{in: "1.500000000000000000000s", want: 1500 * time.Millisecond},
		{in: "00000000000000000000000000001s", want: time.Second},

		{in: "", err: bad("")},
		{in: "ms", err: bad("ms")},
		{in: "s", err: bad("s")},
		{in: "-1s", err: bad("-1s")},
		{in: "-1", err: bad("-1")},
		{in: "+1s", err: bad("+1s")},
		{in: "1x", err: bad("1x")},
		{in: "1e3", err: bad("1e3")},
		{in: "inf", err: bad("inf")},
		{in: "nan", err: bad("nan")},
		{in: "0x10", err: bad("0x10")},
		{in: "1_000", err: bad("1_000")},
		{in: " 1s", err: bad(" 1s")},
		{in: "1 s", err: bad("1 s")},
		{in: ".5s", err: bad(".5s")},
		{in: "1.", err: bad("1.")},
		{in: "1.s", err: bad("1.s")},
		{in: "1.2.3s", err: bad("1.2.3s")},
		{in: "1sec", err: bad("1sec")},
		{in: "1us", err: bad("1us")},
		{in: "1m30s", err: bad("1m30s")},
		{in: "١", err: bad("١")}, // an Arabic-Indic digit
		{in: "1s\r\nPING", err: bad("1s\r\nPING")},

		{in: "0", err: notWhole("0")},
		{in: "0s", err: notWhole("0s")},
		{in: "0.0", err: notWhole("0.0")},
		{in: "1.5", err: notWhole("1.5")},
		{in: "0.5ms", err: notWhole("0.5ms")},
		{in: "0.0001s", err: notWhole("0.0001s")},
		{in: "0.000000000001d", err: notWhole("0.000000000001d")},
		{in: "1.00000000000000000001s", err: notWhole("1.00000000000000000001s")},

		{in: "367d", err: tooBig("367d")},
		{in: "366.001d", err: tooBig("366.001d")},
		{in: "31622400001", err: tooBig("31622400001")},
		{in: "99999999999999999999", err: tooBig("99999999999999999999")},
		{in: "99999999999999999999999999999999d", err: tooBig("99999999999999999999999999999999d")},
	}
	for _, tt := range tests {
		got, err := ParseDuration("interval", tt.in, max)
		if tt.err != "" {
			if err == nil {
				t.Errorf("ParseDuration(%q) = %v, want error %q", tt.in, got, tt.err)
				continue
			}
			checkErrText(t, err)
			if err.Error() != tt.err {
				t.Errorf("ParseDuration(%q) error\n got %q\nwant %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// TestParseDurationFractions checks every fraction of a second, minute,
// hour and day with up to three decimals against integer arithmetic.
func TestParseDurationFractions(t *testing.T) {
	units := []struct {
		suffix string
		ms     int64
	}{{"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}}
	for _, u := range units {
		for whole := int64(0); whole < 3; whole++ {
			for frac := int64(0); frac < 1000; frac++ {
				in := fmt.Sprintf("%d.%03d", whole, frac)
				in = strings.TrimRight(strings.TrimRight(in, "0"), ".") + u.suffix
				want := whole*u.ms + frac*u.ms/1000
				got, err := ParseDuration("TTL", in, 1000*24*time.Hour)
				if want == 0 {
					if err == nil {
						t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
					}
					continue
				}
				if err != nil || got != time.Duration(want)*time.Millisecond {
					t.Fatalf("ParseDuration(%q) = %v, %v; want %dms", in, got, err, want)
				}
			}
		}
	}
}

func TestParseSetRate(t *testing.T) {
	// base is the config of "RL.SETRATE k 10 1s" with opts.
	base := limiter.Config{Algo: limiter.TokenBucket, Rate: 10, Interval: time.Second,
		Burst: 10, Shards: 1, Mode: limiter.Overall}
	with := func(f func(c *limiter.Config)) limiter.Config {
		c := base
		f(&c)
		return c
	}
	tests := []struct {
		line string
		o    *Options // opts when nil
		want limiter.Config
		nx   bool
		keep bool
	}{
		{line: "k 10 1s", want: base},
		{line: "k 10 1000", want: base},
		{line: "k 1 1", want: with(func(c *limiter.Config) { c.Rate, c.Burst, c.Interval = 1, 1, time.Millisecond })},
		{line: "k 1000000000 366d", want: with(func(c *limiter.Config) {
			c.Rate, c.Burst, c.Interval = limiter.MaxRate, limiter.MaxRate, limiter.MaxInterval
		})},
		{line: "k 10 1s ALGO token-bucket", want: base},
		{line: "k 10 1s algo TOKEN-BUCKET", want: base},
		{line: "k 10 1s ALGO sliding-log", want: with(func(c *limiter.Config) { c.Algo = limiter.SlidingLog })},
		{line: "k 10 1s Algo Sliding-Log", want: with(func(c *limiter.Config) { c.Algo = limiter.SlidingLog })},
		{line: "k 10 1s ALGO sliding-window", want: with(func(c *limiter.Config) { c.Algo = limiter.SlidingWindow })},
		{line: "k 10 1s ALGO SLIDING-WINDOW", want: with(func(c *limiter.Config) { c.Algo = limiter.SlidingWindow })},
		{line: "k 10 1s ALGO fixed-window", want: with(func(c *limiter.Config) { c.Algo = limiter.FixedWindow })},
		{line: "k 10 1s ALGO Fixed-Window", want: with(func(c *limiter.Config) { c.Algo = limiter.FixedWindow })},
		{line: "k 10 1s ALGO leaky-bucket", want: with(func(c *limiter.Config) { c.Algo = limiter.LeakyBucket })},
		{line: "k 10 1s ALGO LEAKY-bucket", want: with(func(c *limiter.Config) { c.Algo = limiter.LeakyBucket })},
		{line: "k 10 1s BURST 20", want: with(func(c *limiter.Config) { c.Burst = 20 })},
		{line: "k 10 1s burst 3", want: with(func(c *limiter.Config) { c.Burst = 3 })},
		{line: "k 10 1s BURST 1000000000", want: with(func(c *limiter.Config) { c.Burst = limiter.MaxRate })},
		{line: "k 10 1s BURST 20 ALGO leaky-bucket", want: with(func(c *limiter.Config) { c.Burst, c.Algo = 20, limiter.LeakyBucket })},
		{line: "k 10 1s ALGO leaky-bucket BURST 20", want: with(func(c *limiter.Config) { c.Burst, c.Algo = 20, limiter.LeakyBucket })},
		{line: "k 10 1s SHARDS 4", want: with(func(c *limiter.Config) { c.Shards = 4 })},
		{line: "k 10 1s shards 10", want: with(func(c *limiter.Config) { c.Shards = 10 })},
		{line: "k 10 1s SHARDS 1", want: base},
		{line: "k 2000 1s SHARDS 1024", want: with(func(c *limiter.Config) { c.Rate, c.Burst, c.Shards = 2000, 2000, 1024 })},
		{line: "k 20 1s BURST 5 SHARDS 5", want: with(func(c *limiter.Config) { c.Rate, c.Burst, c.Shards = 20, 5, 5 })},
		{line: "k 10 1s MODE PER_CLIENT", want: with(func(c *limiter.Config) { c.Mode = limiter.PerClient })},
		{line: "k 10 1s mode per_client", want: with(func(c *limiter.Config) { c.Mode = limiter.PerClient })},
		{line: "k 10 1s MODE overall", want: base},
		{line: "k 10 1s TTL 1h", want: with(func(c *limiter.Config) { c.TTL = time.Hour })},
		{line: "k 10 1s ttl 1500", want: with(func(c *limiter.Config) { c.TTL = 1500 * time.Millisecond })},
		{line: "k 10 1s TTL 3650d", want: with(func(c *limiter.Config) { c.TTL = maxTTL })},
		{line: "k 10 1s NX", want: base, nx: true},
		{line: "k 10 1s nx", want: base, nx: true},
		{line: "k 10 1s KEEPSTATE", want: base, keep: true},
		{line: "k 10 1s keepstate", want: base, keep: true},
		{line: "k 10 1s SHADOW", want: with(func(c *limiter.Config) { c.Shadow = true })},
		{line: "k 10 1s shadow KEEPSTATE", want: with(func(c *limiter.Config) { c.Shadow = true }), keep: true},
		{line: "k 10 1s SHADOW NX LIMIT 100 1d", want: with(func(c *limiter.Config) {
			c.Shadow, c.Limits[0] = true, limiter.Limit{Rate: 100, Interval: 24 * time.Hour}
		}), nx: true},
		{line: "k 100 1m ALGO leaky-bucket BURST 50 SHARDS 5 MODE PER_CLIENT TTL 1d KEEPSTATE",
			want: limiter.Config{Algo: limiter.LeakyBucket, Rate: 100, Interval: time.Minute, Burst: 50,
				Shards: 5, Mode: limiter.PerClient, TTL: 24 * time.Hour}, keep: true},
		{line: "k 100 1m NX TTL 1d MODE PER_CLIENT SHARDS 5 BURST 50 ALGO leaky-bucket",
			want: limiter.Config{Algo: limiter.LeakyBucket, Rate: 100, Interval: time.Minute, Burst: 50,
				Shards: 5, Mode: limiter.PerClient, TTL: 24 * time.Hour}, nx: true},

		// SHARDS AUTO: ceil(permits per second / ShardRate), at most
		// MaxAutoShards, the rate and the burst.
		{line: "k 100 1s SHARDS AUTO", want: with(func(c *limiter.Config) { c.Rate, c.Burst = 100, 100 })},
		{line: "k 50000 1s SHARDS AUTO", want: with(func(c *limiter.Config) { c.Rate, c.Burst = 50000, 50000 })},
		{line: "k 50001 1s SHARDS auto", want: with(func(c *limiter.Config) { c.Rate, c.Burst, c.Shards = 50001, 50001, 2 })},
		{line: "k 1000000 1s SHARDS Auto", want: with(func(c *limiter.Config) { c.Rate, c.Burst, c.Shards = 1000000, 1000000, 20 })},
		{line: "k 3000000 1m SHARDS AUTO", want: with(func(c *limiter.Config) { // 50000/s
			c.Rate, c.Burst, c.Interval = 3000000, 3000000, time.Minute
		})},
		{line: "k 6000000 1m SHARDS AUTO", want: with(func(c *limiter.Config) {
			c.Rate, c.Burst, c.Interval, c.Shards = 6000000, 6000000, time.Minute, 2
		})},
		{line: "k 100 1 SHARDS AUTO", want: with(func(c *limiter.Config) { // 100000/s
			c.Rate, c.Burst, c.Interval, c.Shards = 100, 100, time.Millisecond, 2
		})},
		{line: "k 1000000000 1s SHARDS AUTO", want: with(func(c *limiter.Config) {
			c.Rate, c.Burst, c.Shards = limiter.MaxRate, limiter.MaxRate, 64
		})},
		{line: "k 1000000000 1 SHARDS AUTO", want: with(func(c *limiter.Config) {
			c.Rate, c.Burst, c.Interval, c.Shards = limiter.MaxRate, limiter.MaxRate, time.Millisecond, 64
		})},
		{line: "k 1000000 1s BURST 3 SHARDS AUTO", want: with(func(c *limiter.Config) { // capped by the burst
			c.Rate, c.Burst, c.Shards = 1000000, 3, 3
		})},
		{line: "k 5 1 SHARDS AUTO", o: &Options{ShardRate: 1, MaxAutoShards: 64}, want: with(func(c *limiter.Config) { // capped by the rate
			c.Rate, c.Burst, c.Interval, c.Shards = 5, 5, time.Millisecond, 5
		})},
		{line: "k 1000000 1s SHARDS AUTO", o: &Options{ShardRate: 50000, MaxAutoShards: 4}, want: with(func(c *limiter.Config) {
			c.Rate, c.Burst, c.Shards = 1000000, 1000000, 4
		})},
		{line: "k 1000000 1s SHARDS AUTO", o: &Options{ShardRate: 50000, MaxAutoShards: 64, MaxShards: 8}, want: with(func(c *limiter.Config) {
			c.Rate, c.Burst, c.Shards = 1000000, 1000000, 8
		})},

		// The configured default shard count, within what the limiter allows.
		{line: "k 10 1s", o: &Options{DefaultShards: 4}, want: with(func(c *limiter.Config) { c.Shards = 4 })},
		{line: "k 2 1s", o: &Options{DefaultShards: 4}, want: with(func(c *limiter.Config) { c.Rate, c.Burst, c.Shards = 2, 2, 2 })},
		{line: "k 10 1s BURST 3", o: &Options{DefaultShards: 4}, want: with(func(c *limiter.Config) { c.Burst, c.Shards = 3, 3 })},
		{line: "k 10 1s SHARDS 1", o: &Options{DefaultShards: 4}, want: base},
		{line: "k 10 1s", o: &Options{}, want: base},
	}
	for _, tt := range tests {
		o := opts
		if tt.o != nil {
			o = *tt.o
		}
		args := append([]string{"RL.SETRATE"}, words(tt.line)...)
		r, err := ParseSetRate(args, o)
		if err != nil {
			t.Errorf("RL.SETRATE %s: %v", tt.line, err)
			continue
		}
		if r.Name != "k" || r.Config != tt.want || r.NX != tt.nx || r.KeepState != tt.keep {
			t.Errorf("RL.SETRATE %s:\n got %+v nx=%v keepstate=%v\nwant %+v nx=%v keepstate=%v",
				tt.line, r.Config, r.NX, r.KeepState, tt.want, tt.nx, tt.keep)
		}
	}
}

func TestParseSetRateErrors(t *testing.T) {
	const unknownOpt = " (expected LIMIT, ALGO, BURST, SHARDS, MODE, TTL, NX, KEEPSTATE or SHADOW)"
	const algos = " (expected one of token-bucket, sliding-log, sliding-window, fixed-window, leaky-bucket, concurrency)"
	tests := []struct {
		args []string
		o    *Options
		err  string
	}{
		{args: words("RL.SETRATE"), err: "wrong number of arguments for 'rl.setrate' command"},
		{args: words("rl.setrate k"), err: "wrong number of arguments for 'rl.setrate' command"},
		{args: words("RL.SETRATE k 10"), err: "wrong number of arguments for 'rl.setrate' command"},

		{args: words("RL.SETRATE k abc 1s"), err: "rate must be a positive integer, got 'abc'"},
		{args: words("RL.SETRATE k 0 1s"), err: "rate must be a positive integer, got '0'"},
		{args: words("RL.SETRATE k -1 1s"), err: "rate must be a positive integer, got '-1'"},
		{args: words("RL.SETRATE k -99999999999999999999 1s"), err: "rate must be a positive integer, got '-99999999999999999999'"},
		{args: words("RL.SETRATE k 1.5 1s"), err: "rate must be a positive integer, got '1.5'"},
		{args: words("RL.SETRATE k 1e3 1s"), err: "rate must be a positive integer, got '1e3'"},
		{args: words("RL.SETRATE k 0x10 1s"), err: "rate must be a positive integer, got '0x10'"},
		{args: []string{"RL.SETRATE", "k", "", "1s"}, err: "rate must be a positive integer, got ''"},
		{args: []string{"RL.SETRATE", "k", " 10", "1s"}, err: "rate must be a positive integer, got ' 10'"},
		{args: words("RL.SETRATE k 99999999999999999999 1s"), err: "rate is out of range, got '99999999999999999999' (at most 1000000000)"},
		{args: words("RL.SETRATE k 1000000001 1s"), err: "rate is out of range, got '1000000001' (at most 1000000000)"},

		{args: []string{"RL.SETRATE", "k", "10", ""}, err: "invalid interval '': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"},
		{args: words("RL.SETRATE k 10 -1s"), err: "invalid interval '-1s': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"},
		{args: words("RL.SETRATE k 10 0"), err: "interval '0' must be a whole number of milliseconds, at least 1"},
		{args: words("RL.SETRATE k 10 1.5"), err: "interval '1.5' must be a whole number of milliseconds, at least 1"},
		{args: words("RL.SETRATE k 10 367d"), err: "interval '367d' is out of range (at most 366d)"},

		{args: words("RL.SETRATE k 10 1s FOO"), err: "syntax error: unknown option 'FOO'" + unknownOpt},
		{args: words("RL.SETRATE k 10 1s NX foo bar"), err: "syntax error: unknown option 'foo'" + unknownOpt},
		{args: words("RL.SETRATE k 10 1s 5"), err: "syntax error: unknown option '5'" + unknownOpt},
		{args: words("RL.SETRATE k 10 1s ALGO sliding-log ALGO token-bucket"), err: "syntax error: option ALGO given twice"},
		{args: words("RL.SETRATE k 10 1s burst 2 BURST 3"), err: "syntax error: option BURST given twice"},
		{args: words("RL.SETRATE k 10 1s NX nx"), err: "syntax error: option NX given twice"},
		{args: words("RL.SETRATE k 10 1s TTL 1s MODE OVERALL ttl 2s"), err: "syntax error: option TTL given twice"},
		{args: words("RL.SETRATE k 10 1s ALGO"), err: "syntax error: option ALGO needs a value"},
		{args: words("RL.SETRATE k 10 1s NX burst"), err: "syntax error: option BURST needs a value"},
		{args: words("RL.SETRATE k 10 1s SHARDS"), err: "syntax error: option SHARDS needs a value"},
		{args: words("RL.SETRATE k 10 1s MODE"), err: "syntax error: option MODE needs a value"},
		{args: words("RL.SETRATE k 10 1s TTL"), err: "syntax error: option TTL needs a value"},
		{args: words("RL.SETRATE k 10 1s NX KEEPSTATE"), err: "syntax error: NX and KEEPSTATE cannot be combined"},
		{args: words("RL.SETRATE k 10 1s SHADOW shadow"), err: "syntax error: option SHADOW given twice"},
		{args: words("RL.SETRATE k 10 1s keepstate TTL 1s nx"), err: "syntax error: NX and KEEPSTATE cannot be combined"},

		{args: words("RL.SETRATE k 10 1s ALGO gcra"), err: "unknown algorithm 'gcra'" + algos},
		{args: words("RL.SETRATE k 10 1s ALGO token_bucket"), err: "unknown algorithm 'token_bucket'" + algos},
		{args: []string{"RL.SETRATE", "k", "10", "1s", "ALGO", ""}, err: "unknown algorithm ''" + algos},
		{args: words("RL.SETRATE k 10 1s ALGO sliding-log BURST 5"), err: "BURST applies to token-bucket and leaky-bucket only, not sliding-log"},
		{args: words("RL.SETRATE k 10 1s BURST 5 ALGO fixed-window"), err: "BURST applies to token-bucket and leaky-bucket only, not fixed-window"},
		{args: words("RL.SETRATE k 10 1s BURST 5 ALGO sliding-window"), err: "BURST applies to token-bucket and leaky-bucket only, not sliding-window"},
		{args: words("RL.SETRATE k 10 1s BURST 0"), err: "BURST must be a positive integer, got '0'"},
		{args: words("RL.SETRATE k 10 1s BURST -5"), err: "BURST must be a positive integer, got '-5'"},
		{args: words("RL.SETRATE k 10 1s BURST x"), err: "BURST must be a positive integer, got 'x'"},
		{args: words("RL.SETRATE k 10 1s BURST 1000000001"), err: "BURST is out of range, got '1000000001' (at most 1000000000)"},

		{args: words("RL.SETRATE k 10 1s SHARDS 0"), err: "SHARDS must be a positive integer, got '0'"},
		{args: words("RL.SETRATE k 10 1s SHARDS -1"), err: "SHARDS must be a positive integer, got '-1'"},
		{args: words("RL.SETRATE k 10 1s SHARDS many"), err: "SHARDS must be a positive integer, got 'many'"},
		{args: words("RL.SETRATE k 10 1s SHARDS 1025"), err: "SHARDS is out of range, got '1025' (at most 1024)"},
		{args: words("RL.SETRATE k 10 1s SHARDS 99999999999999999999"), err: "SHARDS is out of range, got '99999999999999999999' (at most 1024)"},
		{args: words("RL.SETRATE k 100 1s SHARDS 9"), o: &Options{MaxShards: 8}, err: "SHARDS is out of range, got '9' (at most 8)"},
		{args: words("RL.SETRATE k 4 1s SHARDS 5"), err: "SHARDS 5 is more than the limiter's 4 permits: every sub-limiter needs at least one"},
		{args: words("RL.SETRATE k 10 1s BURST 2 SHARDS 3"), err: "SHARDS 3 is more than the limiter's 2 permits: every sub-limiter needs at least one"},

		{args: words("RL.SETRATE k 10 1s MODE shared"), err: "MODE must be OVERALL or PER_CLIENT, got 'shared'"},
		{args: words("RL.SETRATE k 10 1s MODE PER-CLIENT"), err: "MODE must be OVERALL or PER_CLIENT, got 'PER-CLIENT'"},
		{args: words("RL.SETRATE k 10 1s TTL 0"), err: "TTL '0' must be a whole number of milliseconds, at least 1"},
		{args: words("RL.SETRATE k 10 1s TTL forever"), err: "invalid TTL 'forever': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"},
		{args: words("RL.SETRATE k 10 1s TTL 3651d"), err: "TTL '3651d' is out of range (at most 3650d)"},

		// A user's CR/LF never reaches the reply; long values are cut.
		{args: []string{"RL.SETRATE", "k", "1\r\n2", "1s"}, err: `rate must be a positive integer, got '1  2'`},
		{args: []string{"RL.SETRATE", "k", "10", "1s\r\n"}, err: `invalid interval '1s  ': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)`},
		{args: []string{"RL.SETRATE", "k", "10", "1s", "MODE", "\n"}, err: `MODE must be OVERALL or PER_CLIENT, got ' '`},
		{args: []string{"RL.SETRATE", "k", "10", "1s", "X\r\nY"}, err: `syntax error: unknown option 'X  Y'` + unknownOpt},
		{args: []string{"RL.SETRATE", "k", strings.Repeat("9", 200), "1s"},
			err: "rate is out of range, got '" + strings.Repeat("9", 128) + "...' (at most 1000000000)"},
	}
	for _, tt := range tests {
		o := opts
		if tt.o != nil {
			o = *tt.o
		}
		r, err := ParseSetRate(tt.args, o)
		expectParseError(t, tt.args, r, err, tt.err)
	}
}

func TestParseAcquire(t *testing.T) {
	tests := []struct {
		line string
		want Acquire
	}{
		{line: "k", want: Acquire{Name: "k", Permits: 1}},
		{line: "k 5", want: Acquire{Name: "k", Permits: 5}},
		{line: "k 1000000000", want: Acquire{Name: "k", Permits: limiter.MaxRate}},
		{line: "k TIMEOUT 1s", want: Acquire{Name: "k", Permits: 1, Timeout: time.Second}},
		{line: "k timeout 250", want: Acquire{Name: "k", Permits: 1, Timeout: 250 * time.Millisecond}},
		{line: "k 3 TIMEOUT 1.5s", want: Acquire{Name: "k", Permits: 3, Timeout: 1500 * time.Millisecond}},
		{line: "k BLOCK", want: Acquire{Name: "k", Permits: 1, Block: true}},
		{line: "k 7 block", want: Acquire{Name: "k", Permits: 7, Block: true}},
		{line: "TIMEOUT", want: Acquire{Name: "TIMEOUT", Permits: 1}}, // the key may be any word
		{line: "BLOCK BLOCK", want: Acquire{Name: "BLOCK", Permits: 1, Block: true}},
		// Words in any case as strings.EqualFold or strings.ToUpper takes them.
		{line: "k bloc\u212a", want: Acquire{Name: "k", Permits: 1, Block: true}},
		{line: "k t\u0131meout 2s", want: Acquire{Name: "k", Permits: 1, Timeout: 2 * time.Second}},
		// ALSO: more names, each with its permits (default 1).
		{line: "k ALSO t", want: Acquire{Name: "k", Permits: 1, Also: []ratelimit.NameAsk{{Name: "t", Permits: 1}}}},
		{line: "k 2 also t 3 ALSO g", want: Acquire{Name: "k", Permits: 2,
			Also: []ratelimit.NameAsk{{Name: "t", Permits: 3}, {Name: "g", Permits: 1}}}},
		{line: "k ALSO t 4 TIMEOUT 1s", want: Acquire{Name: "k", Permits: 1, Timeout: time.Second,
			Also: []ratelimit.NameAsk{{Name: "t", Permits: 4}}}},
		{line: "k ALSO BLOCK BLOCK", want: Acquire{Name: "k", Permits: 1, Block: true, // a key may be any word
			Also: []ratelimit.NameAsk{{Name: "BLOCK", Permits: 1}}}},
		{line: "ALSO ALSO x", want: Acquire{Name: "ALSO", Permits: 1, Also: alsoNames("x")}},
		{line: "k ALSO a ALSO b ALSO c ALSO d ALSO e ALSO f ALSO g", want: Acquire{Name: "k", Permits: 1,
			Also: alsoNames("a", "b", "c", "d", "e", "f", "g")}},
	}
	for _, tt := range tests {
		got, err := ParseAcquire(append([]string{"RL.ACQUIRE"}, words(tt.line)...))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("RL.ACQUIRE %s = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
}

// alsoNames are names after ALSO, each of 1 permit.
func alsoNames(names ...string) []ratelimit.NameAsk {
	out := make([]ratelimit.NameAsk, len(names))
	for i, n := range names {
		out[i] = ratelimit.NameAsk{Name: n, Permits: 1}
	}
	return out
}

func TestParseAcquireErrors(t *testing.T) {
	const near = " (expected [permits] [ALSO key [permits]]... [TIMEOUT duration | BLOCK])"
	tests := []struct {
		args []string
		err  string
	}{
		{args: words("RL.ACQUIRE"), err: "wrong number of arguments for 'rl.acquire' command"},
		{args: words("RL.ACQUIRE k 0"), err: "permits must be a positive integer, got '0'"},
		{args: words("RL.ACQUIRE k -1"), err: "permits must be a positive integer, got '-1'"},
		{args: words("RL.ACQUIRE k many"), err: "permits must be a positive integer, got 'many'"},
		{args: words("RL.ACQUIRE k 1.5"), err: "permits must be a positive integer, got '1.5'"},
		{args: words("RL.ACQUIRE k 1000000001"), err: "permits is out of range, got '1000000001' (at most 1000000000)"},
		{args: words("RL.ACQUIRE k 99999999999999999999"), err: "permits is out of range, got '99999999999999999999' (at most 1000000000)"},
		{args: words("RL.ACQUIRE k TIMEOUT"), err: "syntax error: option TIMEOUT needs a value"},
		{args: words("RL.ACQUIRE k 2 timeout"), err: "syntax error: option TIMEOUT needs a value"},
		{args: words("RL.ACQUIRE k TIMEOUT 0"), err: "TIMEOUT '0' must be a whole number of milliseconds, at least 1"},
		{args: words("RL.ACQUIRE k TIMEOUT 1x"), err: "invalid TIMEOUT '1x': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"},
		{args: words("RL.ACQUIRE k TIMEOUT -1s"), err: "invalid TIMEOUT '-1s': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"},
		{args: words("RL.ACQUIRE k TIMEOUT 3651d"), err: "TIMEOUT '3651d' is out of range (at most 3650d)"},
		{args: words("RL.ACQUIRE k BLOCK TIMEOUT 1s"), err: "syntax error: TIMEOUT and BLOCK cannot be combined"},
		{args: words("RL.ACQUIRE k 1 TIMEOUT 1s BLOCK"), err: "syntax error: TIMEOUT and BLOCK cannot be combined"},
		{args: words("RL.ACQUIRE k BLOCK 1"), err: "syntax error near '1'" + near},
		{args: words("RL.ACQUIRE k 1 TIMEOUT 1s extra"), err: "syntax error near 'extra'" + near},
		{args: words("RL.ACQUIRE k 1 TTL 1s"), err: "syntax error near 'TTL'" + near}, // RL.LEASE's option only
		{args: words("RL.ACQUIRE k TTL 1s"), err: "permits must be a positive integer, got 'TTL'"},
		{args: words("RL.ACQUIRE k 1 2"), err: "syntax error near '2'" + near},
		{args: words("RL.ACQUIRE k 1 WAIT"), err: "syntax error near 'WAIT'" + near},
		{args: []string{"RL.ACQUIRE", "k", "1", "X\r\n"}, err: `syntax error near 'X  '` + near},
		{args: words("RL.ACQUIRE k ALSO"), err: "syntax error: ALSO needs a key"},
		{args: words("RL.ACQUIRE k 2 ALSO t ALSO"), err: "syntax error: ALSO needs a key"},
		{args: words("RL.ACQUIRE k ALSO t 0"), err: "permits must be a positive integer, got '0'"},
		{args: words("RL.ACQUIRE k ALSO t many"), err: "permits must be a positive integer, got 'many'"},
		{args: words("RL.ACQUIRE k 0 ALSO t"), err: "permits must be a positive integer, got '0'"},
		{args: words("RL.ACQUIRE k ALSO t 1 2"), err: "syntax error near '2'" + near},
		{args: words("RL.ACQUIRE k ALSO t TIMEOUT 1s ALSO g"), err: "syntax error near 'ALSO'" + near},
		{args: words("RL.ACQUIRE k ALSO t BLOCK TIMEOUT 1s"), err: "syntax error: TIMEOUT and BLOCK cannot be combined"},
		{args: words("RL.ACQUIRE k ALSO k"), err: "limiter 'k' is named twice in one RL.ACQUIRE"},
		{args: words("RL.ACQUIRE k ALSO t 2 ALSO t"), err: "limiter 't' is named twice in one RL.ACQUIRE"},
		{args: words("RL.ACQUIRE k ALSO a ALSO b ALSO c ALSO d ALSO e ALSO f ALSO g ALSO h"), err: "too many names: at most 8 in one RL.ACQUIRE"},
	}
	for _, tt := range tests {
		r, err := ParseAcquire(tt.args)
		expectParseError(t, tt.args, r, err, tt.err)
	}
}

// RL.ACQUIRE and RL.LEASE share [permits] [TIMEOUT duration | BLOCK]:
// the same mistake there is the same error, but for the hint of each
// command's own syntax.
func TestParseAcquireLeaseSameErrors(t *testing.T) {
	const near = " (expected <syntax>)"
	tests := []struct{ line, err string }{
		{"k TIMEOUT 1s TIMEOUT 2s", "syntax error: option TIMEOUT given twice"},
		{"k 3 timeout 1s TIMEOUT", "syntax error: option TIMEOUT given twice"},
		{"k TIMEOUT 1s BLOCK", "syntax error: TIMEOUT and BLOCK cannot be combined"},
		{"k 1 block timeout 1s", "syntax error: TIMEOUT and BLOCK cannot be combined"},
		{"k BLOCK TIMEOUT", "syntax error: TIMEOUT and BLOCK cannot be combined"},
		{"k BLOCK BLOCK", "syntax error: option BLOCK given twice"},
		{"k 2 block Block", "syntax error: option BLOCK given twice"},
		{"k TIMEOUT", "syntax error: option TIMEOUT needs a value"},
		{"k 2 timeout", "syntax error: option TIMEOUT needs a value"},
		{"k TIMEOUT 0", "TIMEOUT '0' must be a whole number of milliseconds, at least 1"},
		{"k TIMEOUT soon", "invalid TIMEOUT 'soon': use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)"},
		{"k 1 WAIT", "syntax error near 'WAIT'" + near},
		{"k 1 TIMEOUT 1s WAIT 1s", "syntax error near 'WAIT'" + near},
		{"k BLOCK 1", "syntax error near '1'" + near},
		{"k 1 2", "syntax error near '2'" + near},
		{"k WAIT", "permits must be a positive integer, got 'WAIT'"},
		{"k 0", "permits must be a positive integer, got '0'"},
		{"k -1 BLOCK", "permits must be a positive integer, got '-1'"},
		{"k 1.5", "permits must be a positive integer, got '1.5'"},
		{"k 1000000001", "permits is out of range, got '1000000001' (at most 1000000000)"},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			name   string
			syntax waitSyntax
			parse  func([]string) (any, error)
		}{
			{"RL.ACQUIRE", acquireSyntax, func(a []string) (any, error) { return ParseAcquire(a) }},
			{"RL.LEASE", leaseSyntax, func(a []string) (any, error) { return ParseLease(a) }},
		} {
			args := append([]string{c.name}, words(tt.line)...)
			r, err := c.parse(args)
			expectParseError(t, args, r, err, strings.Replace(tt.err, "<syntax>", c.syntax.expected, 1))
		}
	}
}

func TestArityErrorAndQuote(t *testing.T) {
	if got := ArityError("RL.Acquire").Error(); got != "wrong number of arguments for 'rl.acquire' command" {
		t.Errorf("ArityError = %q", got)
	}
	for in, want := range map[string]string{
		"":                        "''",
		"abc":                     "'abc'",
		"a\r\nb":                  "'a  b'",
		strings.Repeat("x", 129):  "'" + strings.Repeat("x", 128) + "...'",
		strings.Repeat("\n", 200): "'" + strings.Repeat(" ", 128) + "...'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %q, want %q", in, got, want)
		}
	}
}

// expectParseError checks that parsing args failed with exactly want,
// worded as every error must be (checkErrText).
func expectParseError(t *testing.T, args []string, got any, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%q: got %+v, want error %q", args, got, want)
		return
	}
	checkErrText(t, err)
	if err.Error() != want {
		t.Errorf("%q:\n got %q\nwant %q", args, err, want)
	}
}
