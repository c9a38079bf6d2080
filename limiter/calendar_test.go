package limiter_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// calendarProbe runs calendar.lua's functions on one time (µs): the
// month window holding it, the next window's start, the windows from it
// to two months later.
const calendarProbe = `
local t = tonumber(ARGV[1])
local s = fixed_start(t, MONTH_US)
return {s, fixed_after(s, 1, MONTH_US), fixed_between(s, fixed_after(s, 2, MONTH_US), MONTH_US)}`

// The Lua date math agrees with Go's calendar at the edges (a leap
// February, December to January, the last microsecond of a month, before
// 1970), on a real Redis and on the embedded backend's gopher-lua.
func TestCalendarMonthLua(t *testing.T) {
	src, err := os.ReadFile("lua/calendar.lua")
	if err != nil {
		t.Fatal(err)
	}
	emb, err := backend.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	backends := map[string]*redis.Client{
		"redis":    redistest.StartServer(t).Client(t),
		"embedded": redis.NewClient(&redis.Options{Addr: emb.Addr()}),
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	times := []time.Time{
		at("2024-02-29T23:59:59.999999Z"), // leap February's last µs
		at("2024-03-01T00:00:00Z"),
		at("2023-02-15T12:00:00Z"),
		at("2026-12-31T23:59:59Z"), // December to January
		at("2027-01-01T00:00:00Z"),
		at("2100-02-28T10:00:00Z"), // not a leap year
		at("2000-02-29T10:00:00Z"), // a leap year
		at("1969-12-31T23:59:59Z"), // before the epoch
		time.Now(),
	}
	ctx := context.Background()
	for name, c := range backends {
		for _, tm := range times {
			got, err := c.Eval(ctx, string(src)+calendarProbe, nil, tm.UnixMicro()).Int64Slice()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			start, next := limiter.MonthStart(tm), limiter.NextMonth(tm)
			want := []int64{start.UnixMicro(), next.UnixMicro(), 2}
			if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
				t.Errorf("%s, %s: got %v, want %v (%s, %s)", name, tm, got, want, start, next)
			}
		}
	}
}
