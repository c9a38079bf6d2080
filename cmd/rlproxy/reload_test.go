package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SIGHUP applies the limiter side's keys at once: max_waiters (RL.ACQUIRE
// and RL.LEASE waiters), the deny cache (on/off, size), max_probes,
// on_backend_error and breaker_cooldown are not logged as needing a
// restart; backend_timeout is.
func TestBinarySIGHUPLimiterKeys(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + freePort(t)
	file := filepath.Join(t.TempDir(), "rlproxy.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(fmt.Sprintf("listen: %q\n", addr)+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("max_waiters: 1\ndeny_cache: true\n")
	p := startBinary(t, nil, "--config", file)
	p.waitReady(t, addr)
	hup := func() {
		t.Helper()
		before := strings.Count(p.log(), "config reloaded")
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(p.log(), "config reloaded") == before {
			if time.Now().After(deadline) {
				t.Fatalf("no reload in the log after SIGHUP:\n%s", p.log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: -1, PoolSize: 10})
	defer c.Close()
	fromCache := func() int64 {
		t.Helper()
		m := regexp.MustCompile(`denied_from_cache:(\d+)`).FindStringSubmatch(c.Info(ctx, "stats").Val() + c.Info(ctx, "all").Val())
		if m == nil {
			t.Fatal("no denied_from_cache in INFO")
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	if err := c.Do(ctx, "RL.SETRATE", "w", 1, "1h").Err(); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "RL.ACQUIRE", "w")
	// max_waiters 1: a second waiter is refused.
	first := make(chan error, 1)
	go func() { first <- c.Do(ctx, "RL.ACQUIRE", "w", "TIMEOUT", "3h").Err() }()
	time.Sleep(200 * time.Millisecond)
	if err := c.Do(ctx, "RL.ACQUIRE", "w", "TIMEOUT", "3h").Err(); err == nil || !strings.Contains(err.Error(), "max_waiters is 1") {
		t.Fatalf("second waiter under max_waiters 1: %v, want refused", err)
	}
	// The deny cache answers repeated denials.
	before := fromCache()
	for range 5 {
		c.Do(ctx, "RL.ACQUIRE", "w")
	}
	if fromCache() == before {
		t.Fatal("the deny cache answered none of 5 repeated denials")
	}

	write("max_waiters: 3\ndeny_cache: false\ndeny_cache_size: 1000\nmax_probes: 4\non_backend_error: deny\nbreaker_cooldown: 2s\nbackend_timeout: 700ms\n")
	start := time.Now()
	hup()
	t.Logf("SIGHUP applied in %v", time.Since(start).Round(time.Millisecond))
	second := make(chan error, 1)
	go func() { second <- c.Do(ctx, "RL.ACQUIRE", "w", "TIMEOUT", "5h").Err() }()
	select {
	case err := <-second:
		t.Fatalf("second waiter after max_waiters 3: %v, want it waiting", err)
	case <-time.After(300 * time.Millisecond):
	}
	before = fromCache()
	for range 5 {
		c.Do(ctx, "RL.ACQUIRE", "w")
	}
	if n := fromCache() - before; n != 0 {
		t.Errorf("deny_cache off: %d of 5 denials answered from the cache", n)
	}
	var restart string
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(line, "need a restart") {
			restart = line
		}
	}
	if !strings.Contains(restart, "backend_timeout") {
		t.Errorf("backend_timeout's change is not logged as needing a restart: %q", restart)
	}
	for _, key := range []string{"max_waiters", "deny_cache", "max_probes", "on_backend_error", "breaker_cooldown"} {
		if regexp.MustCompile(`\b` + key + `\b`).MatchString(restart) {
			t.Errorf("%s is logged as needing a restart: %q", key, restart)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d\n%s", code, p.log())
	}
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err == nil || err.Error() != "ERR rlproxy is shutting down" {
			t.Errorf("waiter at SIGTERM: %v, want ERR rlproxy is shutting down", err)
		}
	}
}
