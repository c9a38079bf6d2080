package proxy

// Any Redis client works with rlproxy: go-redis over RESP3 (its default,
// opening with HELLO 3) and RESP2, redis-cli one-shot and interactive,
// redis-benchmark, and the Node.js and Python clients of testdata/clients.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

func TestGoRedis(t *testing.T) {
	h := start(t)
	for _, tc := range []struct {
		name     string
		protocol int // 0: go-redis' default
		resp     string
	}{
		{"default options", 0, "resp=3"},
		{"Protocol 2", 2, "resp=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := h.Conn(t, func(o *redis.Options) { o.Protocol = tc.protocol })
			if info, _ := c.Do(t, "CLIENT", "INFO").OK().(string); !strings.Contains(info, tc.resp) {
				t.Errorf("CLIENT INFO = %q, want %s", info, tc.resp)
			}
			key := "gr-" + strconv.Itoa(tc.protocol)
			c.Do(t, "RL.SETRATE", key, 10, "1m").Equal(int64(1))
			c.Do(t, "RL.SETRATE", key, 10, "1m").Equal(int64(0))
			c.Do(t, "RL.ACQUIRE", key, 4).Granted(6)
			c.Do(t, "RL.AVAILABLE", key).Equal(int64(6))
			if tc.protocol == 2 {
				c.Do(t, "RL.GETRATE", key).Equal([]any{"rate", int64(10), "interval_ms", int64(60000),
					"algo", "token-bucket", "burst", int64(10), "shards", int64(1), "mode", "OVERALL", "ttl_ms", int64(0)})
			} else {
				c.Do(t, "RL.GETRATE", key).Equal(getRate3(10, 60000, "token-bucket", 10, "OVERALL", 0))
			}
			c.Do(t, "RL.GETRATE", key+"-none").Nil()
			c.Do(t, "RL.ACQUIRE", key+"-none").Err("ERR no such limiter '" + key + "-none' (create it with RL.SETRATE or RL.POLICY SET)")

			// The typed API decodes the same replies.
			ctx := t.Context()
			client := h.client(t, func(o *redis.Options) { o.Protocol = tc.protocol })
			if n, err := client.Do(ctx, "RL.RELEASE", key, 1).Int64(); err != nil || n != 7 {
				t.Errorf("RL.RELEASE via Int64(): %d, %v; want 7", n, err)
			}
			if vals, err := client.Do(ctx, "RL.ACQUIRE", key).Int64Slice(); err != nil || len(vals) != 4 || vals[0] != 1 || vals[1] != 6 {
				t.Errorf("RL.ACQUIRE via Int64Slice(): %v, %v; want [1 6 0 ...]", vals, err)
			}
		})
	}
}

func TestRedisCLI(t *testing.T) {
	h := start(t)
	redistest.LookPath(t, "redis-cli")

	t.Run("one-shot", func(t *testing.T) {
		// Not on a terminal, redis-cli prints raw values, one per line.
		if out := h.run(t, "redis-cli", "", "RL.SETRATE", "cli", "5", "1s"); out != "1\n" {
			t.Errorf("RL.SETRATE: got %q, want 1", out)
		}
		g := cliInts(t, h.run(t, "redis-cli", "", "RL.ACQUIRE", "cli", "2"))
		if len(g) != 4 || g[0] != 1 || g[1] != 3 || g[2] != 0 || g[3] <= 0 || g[3] > 400 {
			t.Errorf("RL.ACQUIRE cli 2: got %v, want [1 3 0 ~400]", g)
		}
		out := h.run(t, "redis-cli", "", "RL.GETRATE", "cli")
		want := "rate\n5\ninterval_ms\n1000\nalgo\ntoken-bucket\nburst\n5\nshards\n1\nmode\nOVERALL\nttl_ms\n0\n"
		if out != want {
			t.Errorf("RL.GETRATE: got %q, want %q", out, want)
		}
		out = h.run(t, "redis-cli", "", "--no-raw", "RL.ACQUIRE", "cli")
		if !strings.HasPrefix(out, "1) (integer) 1\n2) (integer) 2\n3) (integer) 0\n4) (integer) ") {
			t.Errorf("RL.ACQUIRE --no-raw: got %q", out)
		}
		out = h.run(t, "redis-cli", "", "RL.ACQUIRE", "nope")
		if out != "ERR no such limiter 'nope' (create it with RL.SETRATE or RL.POLICY SET)\n\n" && out != "ERR no such limiter 'nope' (create it with RL.SETRATE or RL.POLICY SET)\n" {
			t.Errorf("RL.ACQUIRE nope: got %q", out)
		}
	})

	t.Run("interactive", func(t *testing.T) {
		stdin := strings.Join([]string{
			"PING",
			"CLIENT SETNAME cli-user",
			"RL.SETRATE inter 2 1h MODE PER_CLIENT",
			"RL.ACQUIRE inter",
			"RL.ACQUIRE inter",
			"RL.ACQUIRE inter",
			"RL.AVAILABLE inter",
			"RL.SETRATE inter 2 1h MODE PER_CLIENT",
			"RL.ACQUIRE inter 0",
			"RL.GETRATE nothing",
			"RL.DEL inter",
			"RL.ACQUIRE inter",
			"ECHO done",
		}, "\n") + "\n"
		out := h.run(t, "redis-cli", stdin, "--no-raw")
		got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		want := []string{
			"PONG",
			"OK",
			"(integer) 1",
			"1) (integer) 1", "2) (integer) 1", "3) (integer) 0", "4) (integer) 1800000",
			"1) (integer) 1", "2) (integer) 0", "3) (integer) 0", "4) (integer) 3600000",
			"1) (integer) 0", "2) (integer) 0", "3) (integer) 1800000", "4) (integer) 3600000",
			"(integer) 0",
			"(integer) 0",
			"(error) ERR permits must be a positive integer, got '0'",
			"(nil)",
			"(integer) 1",
			"(error) ERR no such limiter 'inter' (create it with RL.SETRATE or RL.POLICY SET)",
			`"done"`,
		}
		if len(got) != len(want) {
			t.Fatalf("redis-cli printed %d lines, want %d:\n%s", len(got), len(want), out)
		}
		for i := range want {
			if got[i] != want[i] && !closeDuration(got[i], want[i]) {
				t.Errorf("line %d: got %q, want %q\nfull output:\n%s", i+1, got[i], want[i], out)
			}
		}
	})

	t.Run("COMMAND DOCS", func(t *testing.T) {
		var summary string
		for _, c := range commands.Limiters(nil, commands.Options{}) {
			if c.Name == "RL.ACQUIRE" {
				summary = c.Summary
			}
		}
		if summary == "" {
			t.Fatal("RL.ACQUIRE has no summary in the command table")
		}
		out := h.run(t, "redis-cli", "", "--no-raw", "COMMAND", "DOCS", "RL.ACQUIRE")
		for _, want := range []string{`"rl.acquire"`, `"summary"`, strconv.Quote(summary), `"permits"`, `"TIMEOUT"`} {
			if !strings.Contains(out, want) {
				t.Errorf("COMMAND DOCS RL.ACQUIRE does not show %s:\n%s", want, out)
			}
		}
	})
}

// closeDuration reports whether redis-cli lines "... (integer) N" differ
// only in a duration N of at least 1s that is a little short of the one
// wanted: time passes between calls.
func closeDuration(got, want string) bool {
	const marker = "(integer) "
	gi, wi := strings.Index(got, marker), strings.Index(want, marker)
	if gi < 0 || gi != wi || got[:gi] != want[:wi] {
		return false
	}
	g, err1 := strconv.Atoi(got[gi+len(marker):])
	w, err2 := strconv.Atoi(want[wi+len(marker):])
	return err1 == nil && err2 == nil && w >= 1000 && g <= w && g > w-1000
}

// cliInts parses redis-cli's raw output of an array of integers.
func cliInts(t *testing.T, out string) []int64 {
	t.Helper()
	var ns []int64
	for _, l := range strings.Fields(out) {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("redis-cli output %q: %q is not an integer", out, l)
		}
		ns = append(ns, n)
	}
	return ns
}

func TestRedisBenchmark(t *testing.T) {
	h := start(t)
	redistest.LookPath(t, "redis-benchmark")
	h.Do(t, "RL.SETRATE", "bench", 1000000, "1s").Equal(int64(1))
	// redis-benchmark starts with CONFIG GET save / appendonly; an answer
	// it cannot use only warns.
	out, stderr, err := h.runTool(t, "redis-benchmark", "", "-n", "2000", "-c", "4", "-q", "RL.ACQUIRE", "bench")
	if err != nil {
		t.Fatalf("redis-benchmark failed: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "RL.ACQUIRE bench: ") || !strings.Contains(out, "requests per second") {
		t.Errorf("redis-benchmark printed no requests per second:\nstdout:\n%s\nstderr:\n%s", out, stderr)
	}
	h.Do(t, "RL.AVAILABLE", "bench").Int()
	h.Do(t, "PING").Equal("PONG")
}

// TestOtherClients runs one application's session (testdata/clients)
// through the clients of other languages: ioredis and node-redis, each
// over RESP2 and RESP3 (both open with HELLO), and redis-py (RESP2). The
// scripts check every reply; `make deps` installs the libraries (npm ci,
// and Debian's python3-redis).
func TestOtherClients(t *testing.T) {
	h := start(t)
	node := nodeChecks(t)
	python := pythonWithRedis(t)
	type session struct {
		name, dir string // dir: under testdata/clients
		cmd       []string
	}
	var sessions []session
	for _, lib := range []string{"ioredis", "node-redis"} {
		for _, resp := range []string{"2", "3"} {
			sessions = append(sessions, session{lib + " RESP" + resp, "node", []string{node, "check.mjs", lib, h.port(), resp}})
		}
	}
	sessions = append(sessions, session{"redis-py", "python", []string{python, "check.py", h.port()}})
	for i, s := range sessions {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			prefix := "c" + strconv.Itoa(i) + ":" // each session its own limiters
			cmd := exec.CommandContext(ctx, s.cmd[0], append(s.cmd[1:], prefix)...)
			cmd.Dir = filepath.Join("testdata", "clients", s.dir)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ok ") {
				t.Fatalf("%s: %v\n%s", strings.Join(s.cmd, " "), err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// missingClient skips a client check whose runtime or libraries are not
// installed — `go test ./...` on a machine with only Go and redis-server —
// unless RLPROXY_REQUIRE_CLIENT_CHECKS=1 (make test sets it: CI must not
// lose them), which makes it a failure.
func missingClient(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("RLPROXY_REQUIRE_CLIENT_CHECKS") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (skipped: set RLPROXY_REQUIRE_CLIENT_CHECKS=1 to fail instead)", args...)
}

// nodeChecks returns the node binary, once the Node.js checks' libraries
// are installed.
func nodeChecks(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingClient(t, "node not found on PATH (%v): the client checks need Node.js 20 or later", err)
	}
	if _, err := os.Stat(filepath.Join("testdata", "clients", "node", "node_modules", "ioredis")); err != nil {
		missingClient(t, "the Node.js client libraries are not installed (%v): run `make deps` (npm ci in testdata/clients/node)", err)
	}
	return node
}

// pythonWithRedis returns a Python that can import redis-py: the one on
// PATH, or Debian's, which python3-redis installs into.
func pythonWithRedis(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import redis").Run() == nil {
			return py
		}
	}
	missingClient(t, "no python3 can import redis-py: run `make deps` (apt-get install python3-redis)")
	return ""
}
