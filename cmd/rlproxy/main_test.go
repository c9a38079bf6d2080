package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/proxy"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, stderr.String())
	}
	if want := "rlproxy " + proxy.Version + "\n"; stdout.String() != want {
		t.Errorf("--version printed %q, want %q", stdout.String(), want)
	}
	if stderr.Len() > 0 {
		t.Errorf("--version wrote to stderr: %q", stderr.String())
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d", arg, code)
		}
		usage := stdout.String() + stderr.String()
		for _, flag := range []string{"--config", "--listen", "--backend", "--cluster", "--require-pass",
			"--key-prefix", "--default-shards", "--backend-timeout", "--log-level", "--help", "--version", "RLPROXY_"} {
			if !strings.Contains(usage, flag) {
				t.Errorf("%s does not mention %s:\n%s", arg, flag, usage)
			}
		}
	}
}

// A wrong option exits non-zero with one clear line on stderr.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"--nope"}, "--nope"},
		{[]string{"--listen"}, "listen"},
		{[]string{"--backend-timeout", "soon"}, "soon"},
		{[]string{"--backend-timeout", "0s"}, "backend_timeout"},
		{[]string{"--default-shards", "many"}, "many"},
		{[]string{"--default-shards", "0"}, "default_shards"},
		{[]string{"--log-level", "loud"}, "log_level"},
		{[]string{"--listen", "nowhere"}, "listen"},
		{[]string{"--backend", "http://127.0.0.1:6379"}, "scheme"},
		{[]string{"--backend", "redis://127.0.0.1:1", "--cluster", "redis://127.0.0.1:2"}, "mutually exclusive"},
		{[]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
		{[]string{"serve"}, "serve"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code == 0 {
			t.Errorf("%q: exit 0, want non-zero", tc.args)
		}
		checkOneLine(t, fmt.Sprintf("%q", tc.args), stderr.String(), tc.want)
		if stdout.Len() > 0 {
			t.Errorf("%q wrote to stdout: %q", tc.args, stdout.String())
		}
	}
}

func TestBadEnvironment(t *testing.T) {
	t.Setenv("RLPROXY_LISTEN", "not-an-address")
	var stdout, stderr bytes.Buffer
	if code := run(nil, &stdout, &stderr); code == 0 {
		t.Fatal("bad RLPROXY_LISTEN: exit 0, want non-zero")
	}
	checkOneLine(t, "RLPROXY_LISTEN=not-an-address", stderr.String(), "not-an-address")
}

func checkOneLine(t *testing.T, what, stderr, want string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("%s: stderr is not exactly one line:\n%s", what, stderr)
	}
	if !strings.HasPrefix(stderr, "rlproxy: ") || !strings.Contains(stderr, want) {
		t.Errorf("%s: stderr %q, want \"rlproxy: ...\" mentioning %q", what, stderr, want)
	}
}

// The real binary, with no backend: one log line about the embedded
// backend (besides the start-up line that says what is served), answers
// redis-cli, exits 0 on SIGTERM.
func TestBinaryEmbedded(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skipf("redis-cli is not installed: %v", err)
	}
	port := freePort(t)
	p := startBinary(t, nil, "--listen", "127.0.0.1:"+port)
	p.waitReady(t, "127.0.0.1:"+port)

	redisCLI := func(args ...string) []int64 {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).Output()
		if err != nil {
			t.Fatalf("redis-cli %q: %v", args, err)
		}
		var ns []int64
		for _, f := range strings.Fields(string(out)) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("redis-cli %q printed %q, want integers", args, out)
			}
			ns = append(ns, n)
		}
		return ns
	}
	// acquire checks granted and remaining, and that reset_after is a
	// little short of resetMs at most (time passes between calls).
	acquire := func(granted, remaining, resetMs int64) {
		t.Helper()
		g := redisCLI("RL.ACQUIRE", "bin")
		if len(g) != 4 || g[0] != granted || g[1] != remaining || g[3] > resetMs || g[3] < resetMs-10_000 {
			t.Errorf("RL.ACQUIRE bin: got %v, want [%d %d _ ~%d]", g, granted, remaining, resetMs)
		}
	}
	if got := redisCLI("RL.SETRATE", "bin", "2", "1h"); len(got) != 1 || got[0] != 1 {
		t.Errorf("RL.SETRATE bin 2 1h: got %v, want [1]", got)
	}
	acquire(1, 1, 1_800_000)
	acquire(1, 0, 3_600_000)
	acquire(0, 0, 3_600_000)

	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0\n%s", code, p.log())
	}
	var embedded []string
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(strings.ToLower(line), "embedded") && !strings.Contains(line, "rlproxy serving") {
			embedded = append(embedded, line)
		}
	}
	if len(embedded) != 1 {
		t.Errorf("the log mentions the embedded backend on %d lines, want 1:\n%s", len(embedded), p.log())
	}
	if !strings.Contains(p.log(), "127.0.0.1:"+port) {
		t.Errorf("the log does not show the listening address:\n%s", p.log())
	}
}

// RLPROXY_* environment variables override the config file.
func TestBinaryEnvOverridesFile(t *testing.T) {
	t.Parallel()
	filePort, envPort := freePort(t), freePort(t)
	file := filepath.Join(t.TempDir(), "rlproxy.yaml")
	yaml := fmt.Sprintf("listen: 127.0.0.1:%s\nkey_prefix: \"test:\"\n", filePort)
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, []string{"RLPROXY_LISTEN=127.0.0.1:" + envPort}, "--config", file)
	p.waitReady(t, "127.0.0.1:"+envPort)
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+filePort, time.Second); err == nil {
		c.Close()
		t.Errorf("rlproxy also listens on the config file's address 127.0.0.1:%s", filePort)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0\n%s", code, p.log())
	}
	if !strings.Contains(p.log(), "127.0.0.1:"+envPort) {
		t.Errorf("the log does not show the address from RLPROXY_LISTEN:\n%s", p.log())
	}
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	// Below Linux's ephemeral range (32768+): a port from there, free now,
	// may be a client connection's local port by the time the binary binds
	// it. Each port is handed out once per test run.
	for range 1000 {
		port := 20000 + rand.IntN(12768)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return strconv.Itoa(port)
	}
	t.Fatal("no free loopback port below 32768")
	return ""
}

// handedOut are the ports freePort has returned.
var handedOut sync.Map

var (
	buildOnce sync.Once
	binDir    string // holds the built binary; removed by TestMain
	binErr    error
)

// binary builds cmd/rlproxy once per test run and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "rlproxy-bin-"); binErr != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			binErr = err
			return
		}
		out, err := exec.Command(goBin, "build", "-o", filepath.Join(binDir, "rlproxy"), ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "rlproxy")
}

// process is a running rlproxy binary.
type process struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, once done
}

func startBinary(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RLPROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &process{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *process) log() string { return p.stderr.String() }

// waitReady waits until the process answers PING on addr.
func (p *process) waitReady(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("rlproxy exited before answering (%v):\n%s", p.err, p.log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rlproxy does not answer on %s: %v\n%s", addr, err, p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReadyAuth waits until the process answers PING with a password.
func (p *process) waitReadyAuth(t *testing.T, addr, password string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("rlproxy exited before answering (%v):\n%s", p.err, p.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rlproxy does not answer on %s: %v\n%s", addr, err, p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and returns the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("rlproxy did not exit within 10s of SIGTERM:\n%s", p.log())
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("rlproxy: %v", p.err)
	}
	return 0
}

// lockedBuffer is a bytes.Buffer safe for a process to write while a
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestDefaultGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	defaultGC("")
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("without GOGC: GC percent %d, want %d", got, gcPercent)
	}
	defaultGC("50") // the runtime already applied GOGC=50: leave it
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent changed to %d", got)
	}
}
