package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// get fetches url and returns the status code and the body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitStatus asks url until it answers code and returns how long that
// took and the body.
func waitStatus(t *testing.T, url string, code int, within time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	for {
		got, body := get(t, url)
		if got == code {
			return time.Since(start), body
		}
		if time.Since(start) > within {
			t.Fatalf("%s: %d %q for %v, want %d", url, got, body, within, code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// /readyz follows the backends, real processes all: a node frozen with
// SIGSTOP makes it 503 naming the node within one check (bounded by
// backend_timeout), SIGCONT makes it 200 again, a node that lost its
// scripts gets them back; /healthz stays 200 throughout. On SIGTERM
// /readyz is 503 while clients are still served, for
// shutdown_ready_delay, before the listener closes.
func TestBinaryReadiness(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	port, mport := freePort(t), freePort(t)
	p := startBinary(t, nil, "--listen", "127.0.0.1:"+port, "--backend", a.URL(), "--backend", b.URL(),
		"--metrics-listen", "127.0.0.1:"+mport, "--backend-timeout", "200ms",
		"--shutdown-timeout", "3s", "--shutdown-ready-delay", "700ms")
	p.waitReady(t, "127.0.0.1:"+port)
	base := "http://127.0.0.1:" + mport
	waitStatus(t, base+"/readyz", http.StatusOK, 5*time.Second)
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}

	b.Pause(t)
	took, body := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
	t.Logf("SIGSTOP of a backend: /readyz 503 after %v: %q", took.Round(time.Millisecond), body)
	if !strings.Contains(body, b.Addr()) || strings.Contains(body, a.Addr()) || strings.Count(body, "\n") != 1 {
		t.Errorf("/readyz reason %q, want one line naming %s only", body, b.Addr())
	}
	if took > 2*time.Second {
		t.Errorf("/readyz took %v to see a frozen backend, want about backend_timeout (200ms)", took)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with a backend down: %d, want 200 (the process serves)", code)
	}
	b.Resume(t)
	took, _ = waitStatus(t, base+"/readyz", http.StatusOK, 5*time.Second)
	t.Logf("SIGCONT: /readyz 200 after %v", took.Round(time.Millisecond))

	// A backend that lost its scripts (a restart, SCRIPT FLUSH) gets
	// them back from the next check.
	ctx := context.Background()
	ac := a.Client(t)
	if err := ac.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after SCRIPT FLUSH: %d %q, want 200", code, body)
	}
	for _, s := range limiter.NewScripts().All() {
		if ok, err := s.Exists(ctx, ac).Result(); err != nil || !ok[0] {
			t.Errorf("script %s not loaded again after SCRIPT FLUSH: %v %v", s.Hash(), ok, err)
		}
	}

	// SIGTERM: /readyz goes 503 while PING is still answered, then the
	// listener closes.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	var notReady, refused time.Duration // first 503, first failed PING, after SIGTERM
	servedWhileNotReady := false
	for refused == 0 && time.Since(sent) < 5*time.Second {
		code, body := get(t, base+"/readyz")
		at := time.Since(sent)
		if code == http.StatusServiceUnavailable && notReady == 0 {
			notReady = at
			if !strings.Contains(body, "draining") {
				t.Errorf("/readyz after SIGTERM: %q, want the reason draining", body)
			}
		}
		// A fresh connection each time: is the listener still accepting?
		c2 := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
		err := c2.Ping(ctx).Err()
		c2.Close()
		switch {
		case err != nil:
			refused = time.Since(sent)
		case notReady != 0:
			servedWhileNotReady = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("SIGTERM: /readyz 503 after %v, new connections refused after %v", notReady.Round(time.Millisecond), refused.Round(time.Millisecond))
	if notReady == 0 || refused == 0 || !servedWhileNotReady {
		t.Errorf("after SIGTERM: /readyz 503 at %v, connections refused at %v, served while 503: %v; want 503 first, clients still served, then refused",
			notReady, refused, servedWhileNotReady)
	}
	if refused < 600*time.Millisecond {
		t.Errorf("the listener closed %v after SIGTERM, before shutdown_ready_delay (700ms)", refused)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("no exit within 5s of SIGTERM:\n%s", p.log())
	}
	if p.err != nil {
		t.Errorf("exit: %v\n%s", p.err, p.log())
	}
}
