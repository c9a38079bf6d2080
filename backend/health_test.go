package backend

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// The breaker on its own, with explicit times.
func TestBreaker(t *testing.T) {
	var b breaker
	b.cooldown.Store(int64(time.Second))
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	down := errors.New("dial tcp 127.0.0.1:7002: connect: connection refused")

	if err := b.allow(t0); err != nil || b.isOpen() {
		t.Fatalf("new breaker: allow = %v, open = %v", err, b.isOpen())
	}
	b.record(t0, down)
	if !b.isOpen() {
		t.Fatal("breaker closed after a failure")
	}
	// Fails fast during the cooldown, saying why.
	for _, d := range []time.Duration{0, time.Millisecond, 999 * time.Millisecond, time.Second} {
		err := b.allow(at(d))
		if err == nil || !errors.Is(err, down) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("allow at +%v during the cooldown = %v, want an error wrapping the failure", d, err)
		}
	}
	// After it, one call goes through as a probe; the others still fail
	// fast until the probe's own cooldown ends.
	if err := b.allow(at(1001 * time.Millisecond)); err != nil {
		t.Fatalf("probe after the cooldown refused: %v", err)
	}
	if err := b.allow(at(1002 * time.Millisecond)); err == nil {
		t.Error("a second call went through while the probe was out")
	}
	if !b.isOpen() {
		t.Error("breaker closed before the probe succeeded")
	}
	// The probe fails: open again for a whole cooldown from then.
	b.record(at(1100*time.Millisecond), down)
	if err := b.allow(at(2050 * time.Millisecond)); err == nil {
		t.Error("allowed a call within the cooldown after a failed probe")
	}
	if err := b.allow(at(2101 * time.Millisecond)); err != nil {
		t.Fatalf("second probe refused: %v", err)
	}
	// The probe succeeds: closed, every call goes through.
	b.record(at(2150*time.Millisecond), nil)
	if b.isOpen() {
		t.Fatal("breaker open after a successful probe")
	}
	for i := range 3 {
		if err := b.allow(at(2151 * time.Millisecond)); err != nil {
			t.Fatalf("call %d after the breaker closed: %v", i, err)
		}
	}
}

// It opens only on threshold failures in a row: an answer in between
// starts the count again. It says when it opens and when it closes.
func TestBreakerThreshold(t *testing.T) {
	var b breaker
	b.cooldown.Store(int64(time.Second))
	b.threshold.Store(3)
	now := time.Now()
	down := errors.New("i/o timeout")
	for round := range 3 {
		for i := range 2 {
			if c := b.record(now, down); c != unchanged || b.isOpen() {
				t.Fatalf("round %d: failure %d of a threshold of 3 changed the breaker (%v, open %v)", round, i+1, c, b.isOpen())
			}
		}
		if c := b.record(now, nil); c != unchanged {
			t.Fatalf("round %d: an answer while closed changed the breaker (%v)", round, c)
		}
	}
	b.record(now, down)
	b.record(now, down)
	if c := b.record(now, down); c != opened || !b.isOpen() {
		t.Fatalf("third failure in a row: change %v, open %v; want it opened", c, b.isOpen())
	}
	if c := b.record(now, down); c != unchanged {
		t.Errorf("a failed probe while open: change %v, want none (it was open already)", c)
	}
	if n, _ := b.openings(); n != 1 {
		t.Errorf("opened %d times, want 1", n)
	}
	if c := b.record(now, nil); c != closed || b.isOpen() {
		t.Fatalf("a successful probe: change %v, open %v; want it closed", c, b.isOpen())
	}
	// Closed again, it takes threshold failures in a row to open it anew.
	if c := b.record(now, down); c != unchanged || b.isOpen() {
		t.Errorf("one failure after closing reopened it (%v)", c)
	}
}

// A call that failed because its caller stopped waiting (deadline or
// cancellation) is not the node's failure.
func TestNodeBreakerIgnoresCallersGivingUp(t *testing.T) {
	n := &Node{name: "127.0.0.1:7002"}
	n.breaker.cooldown.Store(int64(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 10 {
		err := n.do(ctx, func() error { return ctx.Err() })
		if err == nil {
			t.Fatal("a cancelled call returned no error")
		}
	}
	if !n.Stats().Up {
		t.Fatal("calls whose callers gave up opened the breaker")
	}
	// The same error with the caller still waiting is the node's failure.
	if err := n.do(context.Background(), func() error { return context.DeadlineExceeded }); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a call past the node's timeout: %v, want it unavailable", err)
	}
	if n.Stats().Up {
		t.Fatal("a call past the node's own timeout did not count (threshold 1)")
	}
}

func TestBreakerDisabled(t *testing.T) {
	var b breaker // cooldown 0: no breaker
	b.record(time.Now(), errors.New("down"))
	if err := b.allow(time.Now()); err != nil {
		t.Errorf("a breaker without cooldown refused a call: %v", err)
	}
}

// replyErr is an error reply from Redis (what go-redis returns for "-ERR ...").
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Node.do runs calls through the breaker and names the node in errors.
func TestNodeBreaker(t *testing.T) {
	const cooldown = 300 * time.Millisecond
	n := &Node{name: "127.0.0.1:7002"}
	n.breaker.cooldown.Store(int64(cooldown))
	var runs atomic.Int32
	call := func(err error) func() error {
		return func() error { runs.Add(1); return err }
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

	// An error reply proves the node is alive: the breaker stays closed.
	err := n.do(context.Background(), call(replyErr("ERR wrong number of arguments")))
	if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "backend 127.0.0.1:7002: ERR wrong number") {
		t.Errorf("error reply: %v, want it passed on with the node's name", err)
	}
	if !n.Stats().Up {
		t.Fatal("an error reply marked the node down")
	}

	// Unreachable: the breaker opens and the node is reported down.
	err = n.do(context.Background(), call(refused))
	if !errors.Is(err, ErrUnavailable) || err.Error() != "backend 127.0.0.1:7002 unavailable: dial tcp: connect: connection refused" {
		t.Fatalf("unreachable node: %v", err)
	}
	if n.Stats().Up {
		t.Fatal("node still up after it could not be reached")
	}

	// During the cooldown calls fail at once, without reaching the node.
	before := runs.Load()
	for range 100 {
		err := n.do(context.Background(), call(nil))
		if !errors.Is(err, ErrUnavailable) || !strings.HasPrefix(err.Error(), "backend 127.0.0.1:7002 unavailable: circuit open") {
			t.Fatalf("call during the cooldown: %v", err)
		}
	}
	if runs.Load() != before {
		t.Errorf("%d calls reached the node while the breaker was open", runs.Load()-before)
	}

	// After the cooldown one probe goes through, even when many call at
	// once; its success closes the breaker.
	time.Sleep(cooldown + 10*time.Millisecond)
	release := make(chan struct{})
	probe := func() error { runs.Add(1); <-release; return nil }
	var wg sync.WaitGroup
	var failedFast atomic.Int32
	before = runs.Load()
	probeDone := make(chan error, 1)
	go func() { probeDone <- n.do(context.Background(), probe) }()
	redistest.WaitFor(t, func() bool { return runs.Load() == before+1 })
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.do(context.Background(), call(nil)); errors.Is(err, ErrUnavailable) {
				failedFast.Add(1)
			}
		}()
	}
	wg.Wait()
	if failedFast.Load() != 10 || runs.Load() != before+1 {
		t.Errorf("while the probe was out: %d of 10 calls failed fast, %d reached the node; want 10 and only the probe", failedFast.Load(), runs.Load()-before)
	}
	close(release)
	if err := <-probeDone; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if !n.Stats().Up {
		t.Fatal("node still down after a successful probe")
	}
	if err := n.do(context.Background(), call(nil)); err != nil {
		t.Fatalf("call after recovery: %v", err)
	}

	s := n.Stats()
	if s.Calls != int64(runs.Load()) || s.Errors != 2+100+10 {
		t.Errorf("stats %+v, want %d calls (those that reached the node) and 112 errors", s, runs.Load())
	}
}
