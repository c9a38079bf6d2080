package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// Concurrent script calls for different keys share pipelines, every call
// gets its own answer, and a node that lost its scripts (SCRIPT FLUSH)
// is recovered inside a pipeline too.
func TestNodePipelinesConcurrentCalls(t *testing.T) {
	srv := redistest.StartServer(t)
	pool, err := Open(context.Background(), Options{Backends: []string{srv.URL()}, Timeout: time.Second},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	node := pool.Nodes()[0]
	echo := redis.NewScript(`return KEYS[1] .. ':' .. ARGV[1]`)
	ctl := srv.Client(t)

	for round := range 2 {
		if round == 1 {
			if err := ctl.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		const n = 200
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key, arg := fmt.Sprintf("k%d", i), fmt.Sprint(i*7)
				v, err := node.Eval(context.Background(), echo, []string{key}, arg)
				if err == nil && v != key+":"+arg {
					err = fmt.Errorf("got %v, want %s:%s", v, key, arg)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, call %d: %v", round, i, err)
			}
		}
	}
	if s := node.Stats(); s.Calls != 400 || s.Errors != 0 {
		t.Errorf("node stats %+v, want 400 calls and no errors", s)
	}
}

// Calls queued behind a pipeline that opens the node's breaker are
// refused ("circuit open") as soon as it fails: none is sent in a
// pipeline of its own to wait out another timeout. The coalescer starts
// that next pipeline right after handing out the results, perhaps before
// the callers run; so the pipeline records its outcome itself. Below the
// threshold, the calls queued behind a failed pipeline are sent: one
// timeout is not a dead node. Pipelines are run here as the coalescer
// runs them, one after the other, so the order cannot depend on the
// scheduler.
func TestNodeQueuedCallsFailWithTheirPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	pool, err := Open(context.Background(), Options{Backends: []string{srv.URL()}, Timeout: 100 * time.Millisecond,
		BreakerCooldown: time.Hour, BreakerFailures: 2},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	node := pool.Nodes()[0]
	echo := redis.NewScript(`return ARGV[1]`)
	// calls queued when the breaker had opened opened times.
	calls := func(n int, opened uint64) []evalCall {
		queued := make([]evalCall, n)
		for i := range queued {
			queued[i] = evalCall{script: echo, args: []any{"x"}, opened: opened}
		}
		return queued
	}
	unavailable := func(what string, rs []evalResult) {
		t.Helper()
		for _, r := range rs {
			if !errors.Is(node.wrap(r.err), ErrUnavailable) || strings.Contains(r.err.Error(), "circuit open") {
				t.Fatalf("%s: %v, want it sent and timed out", what, r.err)
			}
		}
	}
	srv.Pause(t)
	defer srv.Resume(t)
	for _, n := range []int{1, 3} {
		node.breaker.record(time.Now(), nil) // closed, no failures
		before, _ := node.breaker.openings()
		first, _ := node.runPipeline(context.Background(), calls(n, before))
		unavailable("a call to a stalled node", first)
		// One failure of a threshold of 2: the calls queued meanwhile are sent.
		second, _ := node.runPipeline(context.Background(), calls(n, before))
		unavailable("a call queued behind one failed pipeline", second)
		// The second failure in a row opened the breaker: the calls
		// queued before it are refused, not sent (sent, they would time out too).
		next, _ := node.runPipeline(context.Background(), calls(50, before))
		for _, r := range next {
			if r.err == nil || !strings.Contains(r.err.Error(), "circuit open") {
				t.Fatalf("behind pipelines of %d that opened the breaker, a queued call got %v, want it refused (circuit open)", n, r.err)
			}
		}
	}
}
