package commands

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// The fuzz targets take one command line after the command name, split
// on spaces into arguments (so "k 10 1s ALGO x" is five arguments; ""
// is one empty argument). `make test` runs each for a few seconds; the
// seeds below also run as ordinary tests.

var setRateSeeds = []string{
	"k 10 1s",
	"k 10 1000",
	"k 1 1",
	"k 1000000000 366d",
	"k 1 366d BURST 1000000000",
	"k 10 1s LIMIT 1000 1d",
	"k 10 1s LIMIT 1000 1d LIMIT 50 1m ALGO sliding-log SHARDS 4",
	"k 10 1s LIMIT 1000 1d ALGO leaky-bucket",
	"k 10 1s LIMIT 3 1d SHARDS 4",
	"k 10 1s LIMIT 1000",
	"k 10 1s LIMIT 0 1d",
	"k 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s",
	"k 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s LIMIT 1 1s",
	"k 1 1d BURST 36500",
	"k 1 1d BURST 36501 ALGO leaky-bucket",
	"k 1000000001 1s",
	"k 99999999999999999999 1s",
	"k -99999999999999999999 1s",
	"k 0 1s",
	"k -1 1s",
	"k +5 1s",
	"k 10 1.5s",
	"k 10 1.001s",
	"k 10 0.5ms",
	"k 10 1.5",
	"k 10 1e3",
	"k 10 inf",
	"k 10 0x10",
	"k 10 1d",
	"k 10 367d",
	"k 10 ",
	"k 10 1s ALGO sliding-log",
	"k 10 1s ALGO Sliding-Window",
	"k 10 1s ALGO FIXED-WINDOW",
	"k 10 1s ALGO leaky-bucket BURST 20",
	"k 10 1s ALGO sliding-log BURST 20",
	"k 10 1s ALGO gcra",
	"k 10 1s BURST 3 SHARDS 3",
	"k 10 1s BURST 2 SHARDS 3",
	"k 10 1s SHARDS 4",
	"k 10 1s SHARDS 11",
	"k 10 1s SHARDS 1025",
	"k 10 1s SHARDS 0",
	"k 1000000 1s SHARDS AUTO",
	"k 1000000 1s BURST 3 SHARDS auto",
	"k 1000000000 1 SHARDS AUTO",
	"k 10 1s MODE PER_CLIENT",
	"k 10 1s MODE per_client TTL 1h",
	"k 10 1s MODE other",
	"k 10 1s TTL 3650d",
	"k 10 1s TTL 3651d",
	"k 10 1s TTL 0",
	"k 10 1s NX",
	"k 10 1s KEEPSTATE",
	"k 10 1s NX KEEPSTATE",
	"k 10 1s NX NX",
	"k 10 1s SHADOW",
	"k 10 1s shadow SHADOW",
	"k 10 1s LIMIT 100 1d SHADOW KEEPSTATE",
	"k 10 1s ALGO",
	"k 10 1s FOO bar",
	"k 10 1s ALGO token-bucket BURST 100 SHARDS 10 MODE OVERALL TTL 10m KEEPSTATE",
	"k 100 1m NX TTL 1d MODE PER_CLIENT SHARDS 5 BURST 50 ALGO leaky-bucket",
	"k 10\r\n 1s",
	"k",
	"",
}

var acquireSeeds = []string{
	"k",
	"k ALSO t",
	"k 2 ALSO t 3 ALSO g TIMEOUT 1s",
	"k ALSO t ALSO t",
	"k ALSO",
	"k ALSO t BLOCK",
	"ALSO ALSO ALSO 2",
	"k ALSO a ALSO b ALSO c ALSO d ALSO e ALSO f ALSO g ALSO h",
	"k 1",
	"k 5",
	"k 0",
	"k -1",
	"k 1000000000",
	"k 1000000001",
	"k 99999999999999999999",
	"k TIMEOUT 1s",
	"k 2 timeout 1.5s",
	"k TIMEOUT 0",
	"k TIMEOUT",
	"k TIMEOUT 3651d",
	"k BLOCK",
	"k 3 block",
	"k BLOCK TIMEOUT 1s",
	"k 1 2",
	"k 1 TIMEOUT 1s BLOCK",
	"k TIMEOUT 1s TIMEOUT 2s",
	"k BLOCK BLOCK",
	"k 1 TIMEOUT 1s x",
	"k bloc\u212a",
	"k TTL 1s",
	"k x\r\n",
	"",
}

func FuzzParseSetRate(f *testing.F) {
	for _, s := range setRateSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"RL.SETRATE"}, strings.Split(line, " ")...)
		for _, o := range []Options{opts, {DefaultShards: 3, ShardRate: 1, MaxAutoShards: 1024, MaxShards: 16}} {
			r, err := ParseSetRate(args, o)
			if err != nil {
				checkErrText(t, err)
				continue
			}
			checkSetRate(t, args, o, r)
		}
	})
}

// checkSetRate asserts a parsed RL.SETRATE is one the backend can store,
// and that it reads back the same when written out canonically.
func checkSetRate(t *testing.T, args []string, o Options, r SetRate) {
	t.Helper()
	c := r.Config
	fail := func(what string) {
		t.Helper()
		t.Fatalf("%q parsed to an invalid request (%s): %+v nx=%v keepstate=%v", args, what, c, r.NX, r.KeepState)
	}
	if r.Name != args[1] {
		fail("name")
	}
	if c.Rate < 1 || c.Rate > limiter.MaxRate {
		fail("rate")
	}
	if c.Interval < time.Millisecond || c.Interval > limiter.MaxInterval || c.Interval%time.Millisecond != 0 {
		fail("interval")
	}
	if c.Burst < 1 || c.Burst > limiter.MaxRate || (!c.Algo.HasBurst() && c.Burst != c.Rate) {
		fail("burst")
	}
	if c.Shards < 1 || int64(c.Shards) > min(c.Rate, c.Burst) || c.Shards > o.maxShards() {
		fail("shards")
	}
	if c.TTL < 0 || c.TTL > maxTTL || c.TTL%time.Millisecond != 0 || (c.TTL > 0 && c.TTL < time.Millisecond) {
		fail("ttl")
	}
	if c.Check() != nil {
		fail("refill time")
	}
	for i, l := range c.Limits {
		used := i < len(c.Limits.List())
		if used && (l.Rate < 1 || l.Rate > limiter.MaxRate || l.Rate < int64(c.Shards) || l.Interval < time.Millisecond ||
			l.Interval > limiter.MaxInterval || l.Interval%time.Millisecond != 0 || !c.Algo.MultiLimit()) || (!used && l != limiter.Limit{}) {
			fail("limits")
		}
	}
	if c.Mode != limiter.Overall && c.Mode != limiter.PerClient {
		fail("mode")
	}
	known := false
	for _, a := range limiter.Algos {
		known = known || a == c.Algo
	}
	if !known {
		fail("algo")
	}
	if r.NX && r.KeepState {
		fail("NX and KEEPSTATE")
	}

	// Written out with every option spelled, it parses to the same request.
	again := []string{"RL.SETRATE", r.Name, strconv.FormatInt(c.Rate, 10),
		strconv.FormatInt(c.Interval.Milliseconds(), 10), "ALGO", strings.ToUpper(string(c.Algo)),
		"SHARDS", strconv.Itoa(c.Shards), "MODE", strings.ToLower(string(c.Mode))}
	if c.Algo.HasBurst() {
		again = append(again, "BURST", strconv.FormatInt(c.Burst, 10))
	}
	if c.TTL > 0 {
		again = append(again, "TTL", strconv.FormatInt(c.TTL.Milliseconds(), 10)+"ms")
	}
	for _, l := range c.Limits.List() {
		again = append(again, "limit", strconv.FormatInt(l.Rate, 10), strconv.FormatInt(l.Interval.Milliseconds(), 10))
	}
	if r.NX {
		again = append(again, "NX")
	}
	if r.KeepState {
		again = append(again, "keepstate")
	}
	if c.Shadow {
		again = append(again, "Shadow")
	}
	r2, err := ParseSetRate(again, o)
	if err != nil || r2 != r {
		t.Fatalf("%q parsed to %+v, but its canonical form %q parsed to %+v, %v", args, r, again, r2, err)
	}
}

func FuzzParseAcquire(f *testing.F) {
	for _, s := range acquireSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"RL.ACQUIRE"}, strings.Split(line, " ")...)
		for _, w := range args[2:] {
			for _, name := range waitOptions {
				if got := isWord(w, name); got != (upperIs(w, name) || strings.EqualFold(w, name)) {
					t.Fatalf("isWord(%q, %s) = %v", w, name, got)
				}
			}
		}
		r, err := ParseAcquire(args)
		if !slices.ContainsFunc(args[2:], func(w string) bool { return isWord(w, "ALSO") }) {
			sameAsLease(t, args, r, err) // RL.LEASE has no ALSO
		}
		if err != nil {
			checkErrText(t, err)
			return
		}
		if len(r.Also) > 0 {
			// Every name once, at most 8, and the canonical form of the
			// request parses to the same request.
			if err := ratelimit.CheckNames(r.names()); err != nil || len(r.Also) > ratelimit.MaxNames-1 {
				t.Fatalf("%q parsed to an invalid request: %+v (%v)", args, r, err)
			}
			again := []string{"RL.ACQUIRE", r.Name, strconv.FormatInt(r.Permits, 10)}
			for _, n := range r.Also {
				again = append(again, "ALSO", n.Name, strconv.FormatInt(n.Permits, 10))
			}
			if r.Block {
				again = append(again, "BLOCK")
			} else if r.Timeout > 0 {
				again = append(again, "TIMEOUT", strconv.FormatInt(r.Timeout.Milliseconds(), 10))
			}
			if r2, err := ParseAcquire(again); err != nil || !reflect.DeepEqual(r2, r) {
				t.Fatalf("%q parsed to %+v, but its canonical form %q parsed to %+v, %v", args, r, again, r2, err)
			}
		}
		if r.Name != args[1] || r.Permits < 1 || r.Permits > limiter.MaxRate ||
			r.Timeout < 0 || r.Timeout > maxTTL || r.Timeout%time.Millisecond != 0 ||
			(r.Block && r.Timeout != 0) {
			t.Fatalf("%q parsed to an invalid request: %+v", args, r)
		}
	})
}

// sameAsLease checks that RL.LEASE, given RL.ACQUIRE's words without a
// TTL, answers what RL.ACQUIRE did (r, err): the same request, or the
// same error but for the hint naming its own syntax.
func sameAsLease(t *testing.T, args []string, r Acquire, err error) {
	t.Helper()
	for _, w := range args[2:] {
		if leaseSyntax.option(w) == optTTL {
			return
		}
	}
	l, lerr := ParseLease(append([]string{"RL.LEASE"}, args[1:]...))
	if err == nil {
		if want := (Lease{Name: r.Name, Permits: r.Permits, Timeout: r.Timeout, Block: r.Block}); lerr != nil || l != want {
			t.Fatalf("RL.LEASE %q = %+v, %v; want %+v as RL.ACQUIRE's", args[1:], l, lerr, want)
		}
		return
	}
	want := err.Error()
	if hint := " (expected " + acquireSyntax.expected + ")"; strings.HasSuffix(want, hint) {
		want = strings.TrimSuffix(want, hint) + " (expected " + leaseSyntax.expected + ")"
	}
	if lerr == nil || lerr.Error() != want {
		t.Fatalf("RL.LEASE %q = %+v, %v; want RL.ACQUIRE's error %q", args[1:], l, lerr, want)
	}
}

// FuzzParseDuration is not run by `make test`; run it with
// go test -fuzz=FuzzParseDuration ./commands.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1", "1s", "1.5s", "1.001s", "0.5ms", "366d", "367d", "1e3", "", "-1", "99999999999999999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration("interval", s, limiter.MaxInterval)
		if err != nil {
			checkErrText(t, err)
			return
		}
		if d < time.Millisecond || d > limiter.MaxInterval || d%time.Millisecond != 0 {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
		// Plain milliseconds read back the same.
		ms := strconv.FormatInt(d.Milliseconds(), 10)
		if d2, err := ParseDuration("interval", ms, limiter.MaxInterval); err != nil || d2 != d {
			t.Fatalf("ParseDuration(%q) = %v, but ParseDuration(%q) = %v, %v", s, d, ms, d2, err)
		}
	})
}
