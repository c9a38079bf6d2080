package backend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
