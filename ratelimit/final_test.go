package ratelimit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// final is the one step every acquire's outcome goes through: SHADOW
// turns a denial into a grant with the denial's figures, and each outcome
// is counted once.
func TestFinal(t *testing.T) {
	denial := limiter.Result{Remaining: 2, RetryAfterMs: 300, ResetAfterMs: 900}
	grant := limiter.Result{Granted: true, Remaining: 1, ResetAfterMs: 100}
	down := fmt.Errorf("node a: %w", backend.ErrUnavailable)
	tests := []struct {
		name   string
		policy Policy
		o      Outcome
		shadow bool
		want   limiter.Result
		err    bool
		stats  Stats // Granted, Denied, Errors, ShadowDenied
	}{
		{name: "grant", o: Outcome{Result: grant}, want: grant, stats: Stats{Granted: 1}},
		{name: "denial", o: Outcome{Result: denial}, want: denial, stats: Stats{Denied: 1}},
		{name: "shadow grant", o: Outcome{Result: grant}, shadow: true, want: grant, stats: Stats{Granted: 1}},
		{name: "shadow denial", o: Outcome{Result: denial}, shadow: true,
			want:  limiter.Result{Granted: true, Remaining: 2, RetryAfterMs: 300, ResetAfterMs: 900, ShadowDenied: true},
			stats: Stats{Granted: 1, ShadowDenied: 1}},
		{name: "shadow error", o: Outcome{Err: errors.New("ERR x")}, shadow: true, err: true, stats: Stats{Errors: 1}},
		{name: "fail closed", policy: FailClosed, o: Outcome{Err: down},
			want: limiter.Result{RetryAfterMs: 1000, ResetAfterMs: 1000}, stats: Stats{Errors: 1}},
		{name: "shadow fails open even when failing closed", policy: FailClosed, o: Outcome{Err: down}, shadow: true,
			want: limiter.Result{Granted: true, RetryAfterMs: 1000, ResetAfterMs: 1000}, stats: Stats{Errors: 1}},
		{name: "fail open", policy: FailOpen, o: Outcome{Err: down}, want: limiter.Result{Granted: true}, stats: Stats{Errors: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &Limiters{}
			l.live.Store(&Options{OnBackendError: tc.policy})
			got := l.final(tc.o, &entry{Stored: &limiter.Stored{Config: limiter.Config{Shadow: tc.shadow}}})
			if (got.Err != nil) != tc.err || got.Result != tc.want {
				t.Errorf("final = %+v, %v; want %+v (error %v)", got.Result, got.Err, tc.want, tc.err)
			}
			s := l.Stats()
			s.WaitingClients, s.DenyCacheEntries, s.DeniedFromCache = 0, 0, 0
			if s != tc.stats {
				t.Errorf("stats %+v, want %+v", s, tc.stats)
			}
		})
	}
}
