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

// Calls queued behind a pipeline that finds the node stalled are refused
// ("circuit open") as soon as it fails: none is sent in a pipeline of its
// own to wait out another timeout. The coalescer starts that next
// pipeline right after handing out the results, perhaps before the
// callers that would record the failure run; so the pipeline records it
// itself. Pipelines are run here as the coalescer runs them, one after
// the other, so the order cannot depend on the scheduler.
func TestNodeQueuedCallsFailWithTheirPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	pool, err := Open(context.Background(), Options{Backends: []string{srv.URL()}, Timeout: 100 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	node := pool.Nodes()[0]
	echo := redis.NewScript(`return ARGV[1]`)
	// calls queued when the node had failed failures times.
	calls := func(n int, failures uint64) []evalCall {
		queued := make([]evalCall, n)
		for i := range queued {
			queued[i] = evalCall{script: echo, args: []any{"x"}, failures: failures}
		}
		return queued
	}
	srv.Pause(t)
	defer srv.Resume(t)
	for _, n := range []int{1, 3} {
		before, _ := node.breaker.failed()
		first, _ := node.runPipeline(context.Background(), calls(n, before))
		for _, r := range first {
			if !errors.Is(node.wrap(r.err), ErrUnavailable) {
				t.Fatalf("a call to a stalled node: %v, want it unavailable", r.err)
			}
		}
		// Queued meanwhile (before the failure), run next: refused, not
		// sent (sent, they would time out too).
		next, _ := node.runPipeline(context.Background(), calls(50, before))
		for _, r := range next {
			if r.err == nil || !strings.Contains(r.err.Error(), "circuit open") {
				t.Fatalf("behind a pipeline of %d that found the node stalled, a queued call got %v, want it refused (circuit open)", n, r.err)
			}
		}
	}
}
