package commands

import (
	"strings"
	"testing"
	"time"
)

// Argument parsing on the way of every request: RL.ACQUIRE's on each
// call, RL.SETRATE's (which many applications send before each acquire),
// CL.THROTTLE's, durations, and the command table lookup.

func BenchmarkParseAcquire(b *testing.B) {
	for _, c := range []struct{ name, line string }{
		{"key", "RL.ACQUIRE api:user:42"},
		{"permits", "RL.ACQUIRE api:user:42 5"},
		{"timeout", "RL.ACQUIRE api:user:42 1 TIMEOUT 250ms"},
		{"block", "RL.ACQUIRE api:user:42 BLOCK"},
	} {
		args := strings.Split(c.line, " ")
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseAcquire(args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseSetRate(b *testing.B) {
	o := Options{DefaultShards: 1, ShardRate: 50000, MaxAutoShards: 64}
	for _, line := range []string{
		"RL.SETRATE api:user:42 100 1s",
		"RL.SETRATE api:user:42 100000 1m ALGO sliding-window SHARDS AUTO MODE PER_CLIENT TTL 1h KEEPSTATE",
	} {
		args := strings.Split(line, " ")
		b.Run(map[bool]string{true: "minimal", false: "all-options"}[len(args) == 4], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseSetRate(args, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseThrottle(b *testing.B) {
	args := strings.Split("CL.THROTTLE user123 15 30 60 1", " ")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseThrottle(args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseDuration(b *testing.B) {
	for _, s := range []string{"1000", "250ms", "1.5m"} {
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseDuration("interval", s, 24*time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTableLookup(b *testing.B) {
	t := NewTable([]Command{{Name: "RL.ACQUIRE"}, {Name: "RL.SETRATE"}, {Name: "PING"}, {Name: "CLIENT"}})
	for _, name := range []string{"RL.ACQUIRE", "rl.acquire"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if t.Lookup(name) == nil {
					b.Fatal("not found")
				}
			}
		})
	}
}
