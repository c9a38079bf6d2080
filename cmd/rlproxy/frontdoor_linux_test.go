package main

// The front door against a real process: memory under the request-size
// attacks of issue 13, the accept loop at the open-file limit, and the
// config reloaded on SIGHUP.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// rssMB is the process's resident set size in MB (/proc/<pid>/status).
func rssMB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// cpuSeconds is the CPU time the process used so far (/proc/<pid>/stat).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, 41)+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // clock ticks; 100 a second on Linux
}

// peakRSS samples the process's RSS until stop is closed.
func peakRSS(t *testing.T, pid int, stop <-chan struct{}) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		peak := 0.0
		for {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
						peak = max(peak, kb/1024)
					}
				}
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// attack opens a connection, sends head and then up to body bytes of
// filler (stopping when the server closes the connection), and returns
// the first line the server answered.
func attack(addr, head string, body int) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := c.Write([]byte(head)); err != nil {
			return
		}
		chunk := []byte(strings.Repeat("$1\r\nx\r\n", 64*1024/7))
		for sent := 0; sent < body; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return // closed by the server: what the guard is for
			}
		}
	}()
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	wg.Wait()
	return strings.TrimSpace(line)
}

// The attacks of issue 13 on a real process with require_pass: nothing
// unauthenticated holds more than Redis's 10 × 16 KiB, nothing
// authenticated more than max_request_bytes, and the memory of a big
// request goes back to the system within seconds. The figures are
// logged (go test -v -run TestBinaryMemory ./cmd/rlproxy).
func TestBinaryMemoryUnderAttack(t *testing.T) {
	port := freePort(t)
	addr := "127.0.0.1:" + port
	p := startBinary(t, nil, "--listen", addr, "--require-pass", "pw")
	p.waitReadyAuth(t, addr, "pw")
	pid := p.cmd.Process.Pid
	time.Sleep(time.Second)
	base := rssMB(t, pid)
	t.Logf("RSS at start: %.1f MB", base)

	const mb = 1 << 20
	auth := "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"
	for _, a := range []struct {
		name    string
		head    string
		body    int
		clients int
		want    string
	}{
		{"unauthenticated: a 100 MB argument", "*2\r\n$4\r\nECHO\r\n$104857600\r\n", 100 * mb, 4,
			"-ERR Protocol error: unauthenticated bulk length"},
		{"unauthenticated: 1M arguments", "*1000000\r\n", 7 * 1000000, 4,
			"-ERR Protocol error: unauthenticated multibulk length"},
		{"authenticated: ECHO of 100 MB", auth + "*2\r\n$4\r\nECHO\r\n$104857600\r\n", 100 * mb, 4,
			"+OK"},
		{"authenticated: COMMAND DOCS with 1M names", auth + "*1000002\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n", 7 * 1000000, 4,
			"+OK"},
		{"authenticated: a 2 MiB command", auth + "*3\r\n$4\r\nECHO\r\n$1048000\r\n" + strings.Repeat("a", 1048000) + "\r\n$1048000\r\n", 2 * mb, 1,
			"+OK"},
	} {
		stop := make(chan struct{})
		peak := peakRSS(t, pid, stop)
		var wg sync.WaitGroup
		answers := make([]string, a.clients)
		for i := range a.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = attack(addr, a.head, a.body)
			}()
		}
		wg.Wait()
		close(stop)
		top := <-peak
		for _, got := range answers {
			if got != a.want {
				t.Errorf("%s: answered %q, want %q", a.name, got, a.want)
			}
		}
		after, waited := settle(t, pid, base)
		t.Logf("%-45s ×%d: RSS peak %+.1f MB, %+.1f MB after %v", a.name, a.clients, top-base, after-base, waited)
		if top-base > 100 {
			t.Errorf("%s: RSS grew by %.1f MB", a.name, top-base)
		}
		if after-base > 20 {
			t.Errorf("%s: RSS still %.1f MB above the start 10s later", a.name, after-base)
		}
	}

	// Big requests that are allowed (8 clients, 1 MB each): their memory
	// is given back once they are answered.
	stop := make(chan struct{})
	peak := peakRSS(t, pid, stop)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr, Password: "pw", MaxRetries: -1})
			defer c.Close()
			big := strings.Repeat("b", 1000000)
			if got, err := c.Echo(context.Background(), big).Result(); err != nil || got != big {
				t.Errorf("ECHO of 1 MB: %d bytes, %v", len(got), err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	top := <-peak
	after, waited := settle(t, pid, base)
	t.Logf("%-45s ×8: RSS peak %+.1f MB, %+.1f MB after %v", "authenticated: ECHO of 1 MB (allowed)", top-base, after-base, waited)
	if after-base > 20 {
		t.Errorf("RSS still %.1f MB above the start 10s after 1 MB requests", after-base)
	}
}

// settle waits up to 10s for the RSS to come within 20 MB of base and
// returns it and how long it took.
func settle(t *testing.T, pid int, base float64) (float64, time.Duration) {
	start := time.Now()
	for {
		rss := rssMB(t, pid)
		if rss-base <= 20 || time.Since(start) > 10*time.Second {
			return rss, time.Since(start).Round(100 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// At the open-file limit the accept loop neither spins nor leaves clients
// hanging: clients past the limit are told so, one log line says why,
// and once descriptors are free again new clients are served.
func TestBinaryOutOfFiles(t *testing.T) {
	port := freePort(t)
	addr := "127.0.0.1:" + port
	bin := binary(t)
	// The child runs with a small RLIMIT_NOFILE, set by the shell.
	cmd := exec.Command("sh", "-c", `ulimit -n 48 && exec "$0" "$@"`, bin, "--listen", addr)
	p := &process{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	p.waitReady(t, addr)
	pid := cmd.Process.Pid

	// Hold more connections than the limit allows.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	refused := 0
	for range 80 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		held = append(held, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			continue
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		switch strings.TrimSpace(line) {
		case "+PONG":
		case "-ERR max number of clients reached":
			refused++
		default:
			t.Errorf("a client got %q, want +PONG or the max clients error", line)
		}
	}
	if refused == 0 {
		t.Fatalf("no client was refused at an open-file limit of 48:\n%s", p.log())
	}
	// Connections in the backlog are answered too, and then the process
	// rests: a spinning accept loop would burn a CPU-second a second.
	cpu0 := cpuSeconds(t, pid)
	time.Sleep(2 * time.Second)
	if used := cpuSeconds(t, pid) - cpu0; used > 0.5 {
		t.Errorf("rlproxy used %.2f CPU-seconds in 2s while out of file descriptors: the accept loop spins", used)
	}
	if n := strings.Count(p.log(), "out of file descriptors"); n != 1 {
		t.Errorf("%d log lines about running out of file descriptors, want 1:\n%s", n, p.log())
	}
	t.Logf("%d of 80 clients refused at RLIMIT_NOFILE 48", refused)

	for _, c := range held {
		c.Close()
	}
	held = nil
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	err := func() error {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := c.Ping(context.Background()).Err()
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err != nil {
		t.Errorf("once descriptors are free again: %v\n%s", err, p.log())
	}
}

// SIGHUP re-reads the config file: users, passwords and limits apply at
// once, other changed keys are logged as needing a restart, and a bad
// file keeps the running config with one log line. The process never
// dies of it.
func TestBinarySIGHUP(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	addr := "127.0.0.1:" + port
	file := filepath.Join(t.TempDir(), "rlproxy.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(fmt.Sprintf("listen: %q\n", addr)+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("require_pass: old\n")
	p := startBinary(t, nil, "--config", file)
	p.waitReadyAuth(t, addr, "old")
	hup := func(logLine string) {
		t.Helper()
		before := strings.Count(p.log(), logLine)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(p.log(), logLine) == before {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", logLine, p.log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ping := func(user, password string) error {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, MaxRetries: -1})
		defer c.Close()
		return c.Ping(context.Background()).Err()
	}

	write(`require_pass: new
users:
  - name: app
    password: apppw
    commands: [acquire]
max_clients: 50
key_prefix: "other:"
log_level: debug
`)
	hup("config reloaded")
	if err := ping("", "new"); err != nil {
		t.Errorf("the new require_pass: %v", err)
	}
	if err := ping("", "old"); err == nil {
		t.Error("the old require_pass still works")
	}
	if err := ping("app", "apppw"); err != nil {
		t.Errorf("the new user: %v", err)
	}
	if !strings.Contains(p.log(), "need a restart") || !strings.Contains(p.log(), "key_prefix") {
		t.Errorf("key_prefix's change is not logged as needing a restart:\n%s", p.log())
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Password: "new"})
	defer c.Close()
	if info := c.Info(context.Background(), "clients").Val(); !strings.Contains(info, "maxclients:50") {
		t.Errorf("max_clients not applied: %q", info)
	}

	// A bad file: one line, and the running config stays.
	write("require_pass: [unterminated\n")
	hup("config reload failed")
	write("max_clients: 0\nrequire_pass: other\n")
	hup("config reload failed")
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(line, "config reload failed") && !strings.Contains(line, "level=ERROR") {
			t.Errorf("a failed reload's line: %q", line)
		}
	}
	if !strings.Contains(p.log(), "max_clients must be > 0") {
		t.Errorf("the failed reload does not name the bad key:\n%s", p.log())
	}
	if err := ping("", "new"); err != nil {
		t.Errorf("after bad files, the running config: %v", err)
	}
	select {
	case <-p.done:
		t.Fatalf("rlproxy exited on SIGHUP: %v\n%s", p.err, p.log())
	default:
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d", code)
	}
}
