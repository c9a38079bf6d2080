package backend

import (
	"context"
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
// own to wait out another timeout, whichever goroutine runs first.
func TestNodeQueuedCallsFailWithTheirPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	pool, err := Open(context.Background(), Options{Backends: []string{srv.URL()}, Timeout: 100 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	pool.SetBreakerCooldown(time.Millisecond)
	node := pool.Nodes()[0]
	echo := redis.NewScript(`return ARGV[1]`)
	eval := func() error {
		_, err := node.Eval(context.Background(), echo, nil, "x")
		return err
	}

	for round := range 10 {
		// A call that reaches the node closes the breaker.
		err := eval()
		for deadline := time.Now().Add(time.Second); err != nil && time.Now().Before(deadline); err = eval() {
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("round %d: the node does not answer: %v", round, err)
		}
		srv.Pause(t)
		first := make(chan error, 1)
		go func() { first <- eval() }()
		time.Sleep(20 * time.Millisecond) // the first call is in flight
		const queued = 50
		errs := make(chan error, queued)
		for range queued {
			go func() { errs <- eval() }()
		}
		if err := <-first; err == nil {
			t.Fatal("a call succeeded on a stalled node")
		}
		for range queued {
			if err := <-errs; err == nil || !strings.Contains(err.Error(), "circuit open") {
				t.Fatalf("round %d: a call queued behind the failed pipeline: %v, want it refused (circuit open)", round, err)
			}
		}
		srv.Resume(t)
	}

	// What makes that so whichever goroutine runs first: a pipeline that
	// finds the node stalled is on record when it returns, before its
	// callers (which record it too) have run, and before the next pipeline.
	for _, calls := range []int{1, 3} {
		srv.Pause(t)
		before, _ := node.breaker.failed()
		queued := make([]evalCall, calls)
		for i := range queued {
			queued[i] = evalCall{script: echo, args: []any{"x"}, failures: before}
		}
		node.runPipeline(context.Background(), queued)
		if after, _ := node.breaker.failed(); after == before {
			t.Errorf("a pipeline of %d call(s) found the node stalled, and its failure is not on record when it returns", calls)
		}
		srv.Resume(t)
	}
}
