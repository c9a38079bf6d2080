package commands

import (
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

func TestParseLease(t *testing.T) {
	for line, want := range map[string]Lease{
		"k":                       {Name: "k", Permits: 1},
		"k 3":                     {Name: "k", Permits: 3},
		"k 3 TTL 30s":             {Name: "k", Permits: 3, TTL: 30 * time.Second},
		"k ttl 1m timeout 500ms":  {Name: "k", Permits: 1, TTL: time.Minute, Timeout: 500 * time.Millisecond},
		"k 2 BLOCK TTL 10s":       {Name: "k", Permits: 2, TTL: 10 * time.Second, Block: true},
		"k TIMEOUT 2s":            {Name: "k", Permits: 1, Timeout: 2 * time.Second},
		"k 1 TTL 100 TIMEOUT 200": {Name: "k", Permits: 1, TTL: 100 * time.Millisecond, Timeout: 200 * time.Millisecond},
		"k bloc\u212a tTl 1s":     {Name: "k", Permits: 1, TTL: time.Second, Block: true},
		"k t\u0131meout 1s":       {Name: "k", Permits: 1, Timeout: time.Second},
	} {
		got, err := ParseLease(append([]string{"RL.LEASE"}, strings.Split(line, " ")...))
		if err != nil || got != want {
			t.Errorf("ParseLease(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	}
	for line, want := range map[string]string{
		"k 0":                     "permits",
		"k -1":                    "permits",
		"k TTL":                   "TTL needs a value",
		"k TTL 0":                 "TTL",
		"k TTL 1s TTL 2s":         "syntax error: option TTL given twice",
		"k 1 TTL 1s TIMEOUT 1s x": "syntax error near 'x' (expected [permits] [TTL duration] [TIMEOUT duration | BLOCK])",
	} {
		_, err := ParseLease(append([]string{"RL.LEASE"}, strings.Split(line, " ")...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLease(%q) = %v, want an error containing %q", line, err, want)
		}
	}
}

func FuzzParseLease(f *testing.F) {
	for _, s := range []string{"k", "k 3", "k 3 TTL 30s", "k TTL 1m TIMEOUT 1s", "k BLOCK", "k 2 BLOCK TTL 1s", "k TIMEOUT", "k 1 2 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"RL.LEASE"}, strings.Split(line, " ")...)
		r, err := ParseLease(args)
		if err != nil {
			checkErrText(t, err)
			return
		}
		if r.Name != args[1] || r.Permits < 1 || r.Permits > limiter.MaxRate ||
			r.Timeout < 0 || r.Timeout > maxTTL || r.TTL < 0 || r.TTL > maxTTL ||
			(r.Block && r.Timeout != 0) {
			t.Fatalf("%q parsed to an invalid request: %+v", args, r)
		}
	})
}
