package proxy

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
)

// rueidis (v1.0.79) binds Redis 8.8's proposed GCRA command with a typed
// builder; an application using it runs unchanged against rlproxy.
func TestRueidisGCRA(t *testing.T) {
	h := start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{h.proxy.Addr()}})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()

	gcra := func(key string, maxBurst, perPeriod int64, period float64, tokens int64) ([]int64, error) {
		return c.Do(ctx, c.B().Gcra().Key(key).MaxBurst(maxBurst).TokensPerPeriod(perPeriod).Period(period).Count(tokens).Build()).AsIntSlice()
	}
	for _, step := range []struct {
		tokens int64
		want   []int64
	}{
		{1, []int64{0, 2, 1, -1, 1}},
		{1, []int64{0, 2, 0, -1, 1}},
		{1, []int64{1, 2, 0, 1, 1}},
	} {
		got, err := gcra("rueidis", 1, 1, 0.5, step.tokens)
		if err != nil || len(got) != 5 || [5]int64(got) != [5]int64(step.want) {
			t.Fatalf("GCRA rueidis 1 1 0.5 TOKENS %d = %v, %v; want %v", step.tokens, got, err, step.want)
		}
	}
	// Without TOKENS, and an error with Redis's wording.
	got, err := c.Do(ctx, c.B().Gcra().Key("rueidis2").MaxBurst(15).TokensPerPeriod(30).Period(60).Build()).AsIntSlice()
	if err != nil || len(got) != 5 || [5]int64(got) != [5]int64{0, 16, 15, -1, 2} {
		t.Errorf("GCRA rueidis2 15 30 60 = %v, %v", got, err)
	}
	// rueidis drops the ERR code from the message.
	if _, err := gcra("bad", 1, 1, 0, 1); err == nil || err.Error() != "period must be > 0 and < 1e12" {
		t.Errorf("period 0: err = %v", err)
	}
	if _, err := gcra("bad", 1, 1, 1, 0); err == nil || err.Error() != "value is out of range, value must between 1 and 9223372036854775807" {
		t.Errorf("TOKENS 0: err = %v", err)
	}
}
