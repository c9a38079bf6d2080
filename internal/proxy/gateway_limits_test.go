package proxy

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// TestPassthroughTimeout stops the backend Redis (SIGSTOP) under a
// pipelined load from many clients: every command waiting on it is
// answered passthrough_timeout's error within the timeout, each reply
// is its own request's or that error, never another's, and once Redis
// runs again the same clients are served on new connections. A blocking
// command is not timed out.
func TestPassthroughTimeout(t *testing.T) {
	srv := redistest.StartServer(t)
	const timeout = 300 * time.Millisecond
	h := startProxy(t, srv, passthroughOn, func(c *config.Config) {
		c.Backends = []string{srv.URL()}
		c.PassthroughTimeout = timeout
	})
	// BLPOP waits longer than the timeout, and is answered its nil.
	start := time.Now()
	if line := h.raw(t).Call("BLPOP", "to:nothing", "0.6"); line != "*-1" {
		t.Fatalf("BLPOP answered %q, want *-1 (a blocking command has no reply timeout)", line)
	}
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Fatalf("BLPOP returned after %v", took)
	}

	const clients, depth = 12, 4
	const timedOut = "-ERR passthrough backend connection broken: no reply in 300ms (passthrough_timeout)"
	var good, errs atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	fails := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.raw(t)
			for r := 0; !stop.Load(); r++ {
				for d := range depth {
					// Redis's error names the first argument: the reply
					// says which request it answers.
					c.Send("NOSUCHCMD", fmt.Sprintf("tok-%d-%d-%d", i, r, d))
					c.Send("SET", fmt.Sprintf("to:%d", i), fmt.Sprintf("%d-%d-%d", i, r, d), "GET")
				}
				for d := range depth {
					sent := time.Now()
					got := c.Line()
					want := fmt.Sprintf("'tok-%d-%d-%d'", i, r, d)
					if got != timedOut && !strings.Contains(got, want) {
						fails <- fmt.Errorf("client %d: NOSUCHCMD %s answered %q", i, want, got)
						return
					}
					if got == timedOut {
						errs.Add(1)
					}
					switch got = c.Line(); {
					case got == timedOut:
						errs.Add(1)
					case got == "$-1":
						good.Add(1)
					case strings.HasPrefix(got, "$"):
						// The value this client wrote before.
						if got = c.Line(); !strings.HasPrefix(got, fmt.Sprintf("%d-", i)) {
							fails <- fmt.Errorf("client %d: SET ... GET answered %q (another client's value)", i, got)
							return
						}
						good.Add(1)
					default:
						fails <- fmt.Errorf("client %d: SET ... GET answered %q", i, got)
						return
					}
					if wait := time.Since(sent); wait > timeout+2*time.Second {
						fails <- fmt.Errorf("client %d: a reply took %v", i, wait)
						return
					}
				}
			}
		}()
	}
	waitFor := func(what string, f func() bool) {
		t.Helper()
		if err := eventually(10*time.Second, func() error {
			if !f() {
				return errors.New(what)
			}
			return nil
		}); err != nil {
			stop.Store(true)
			t.Fatal(err)
		}
	}
	waitFor("no reply before the pause", func() bool { return good.Load() > clients })
	srv.Pause(t)
	waitFor("no timeout while Redis is stopped", func() bool { return errs.Load() >= clients })
	srv.Resume(t)
	after := good.Load()
	waitFor("no reply after Redis resumed", func() bool { return good.Load() > after+clients })
	stop.Store(true)
	wg.Wait()
	close(fails)
	for err := range fails {
		t.Error(err)
	}
	t.Logf("%d replies right, %d timed out", good.Load(), errs.Load())
}

// TestPassthroughClientBuffer: a client that pipelines big GETs and never
// reads holds up no one sharing its backend connections, and is closed
// once passthrough_client_buffer bytes wait for it.
func TestPassthroughClientBuffer(t *testing.T) {
	srv := redistest.StartServer(t)
	h := startProxy(t, srv, passthroughOn, func(c *config.Config) {
		c.Backends = []string{srv.URL()}
		c.PassthroughClientBuffer = 256 << 10
	})
	big := strings.Repeat("x", 64<<10)
	h.Do(t, "SET", "cb:big", big).Equal("OK")
	h.Do(t, "SET", "cb:small", "s").Equal("OK")

	slow := h.raw(t)
	// 12.8 MB of replies, 50 times the buffer. (The backend still sends
	// them all on the shared connection ahead of the other clients'
	// replies: many more cost seconds under -race on a busy machine.)
	const gets = 200
	var b []byte
	for range gets {
		b = append(b, "*2\r\n$3\r\nGET\r\n$6\r\ncb:big\r\n"...)
	}
	if _, err := slow.c.Write(b); err != nil {
		t.Fatal(err)
	}
	// Eight clients (every shared connection is some's) keep being
	// answered meanwhile.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.raw(t)
			for range 50 {
				if got := c.Call("GET", "cb:small"); got != "$1" {
					t.Errorf("GET answered %q", got)
					return
				}
				c.Line()
			}
		}()
	}
	wg.Wait()
	// The slow client was closed: what reaches it ends well short of its
	// replies.
	_ = slow.c.SetReadDeadline(time.Now().Add(callTimeout))
	n, err := io.Copy(io.Discard, slow.r)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the slow client's connection: %v after %d bytes, want it closed", err, n)
	}
	if full := int64(gets * (len(big) + 11)); n >= full {
		t.Fatalf("the slow client got all %d bytes", n)
	}
	t.Logf("the slow client got %d bytes before it was closed", n)
	h.Do(t, "GET", "cb:small").Equal("s")
}

// TestPassthroughShutdownBlocked: SIGTERM answers a client blocked in
// BLPOP (pinned) "ERR rlproxy is shutting down" at once, like an
// RL.ACQUIRE waiter, and closes its pinned connection.
func TestPassthroughShutdownBlocked(t *testing.T) {
	srv := redistest.StartServer(t)
	h := startProxy(t, srv, passthroughOn, func(c *config.Config) { c.Backends = []string{srv.URL()} })
	blocked := h.raw(t)
	blocked.Send("BLPOP", "sd:list", "0")
	waitPinned(t, h, "1")
	start := time.Now()
	if err := h.proxy.Shutdown(10 * time.Second); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Shutdown took %v with a client blocked in BLPOP", took)
	}
	if got := blocked.Line(); got != "-ERR rlproxy is shutting down" {
		t.Fatalf("the blocked client got %q", got)
	}
	// Redis no longer has the blocked connection.
	rc := srv.Client(t)
	if err := eventually(5*time.Second, func() error {
		info, err := rc.Info(t.Context(), "clients").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "blocked_clients:0") {
			return errors.New("Redis still has a blocked client")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
