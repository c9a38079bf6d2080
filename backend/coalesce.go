package backend

import (
	"context"
	"sync"
)

// Coalescer merges concurrent calls on the same key into one backend
// call. The first caller on an idle key runs at once; callers arriving
// while that call is in flight queue up and go together in the next call,
// which starts the moment the previous one returns. There is no batching
// window: an idle key costs no extra latency, and a busy key turns many
// round trips into one script call that decides every item in order.
type Coalescer[I, R any] struct {
	// MaxBatch caps the items of one call (0 = 256).
	MaxBatch int

	mu     sync.Mutex
	groups map[string]*group[I, R]
}

// RunFunc runs one batch and returns a result per item, in order.
type RunFunc[I, R any] func(ctx context.Context, items []I) ([]R, error)

type group[I, R any] struct {
	queue []*pending[I, R]
	run   RunFunc[I, R]
}

type pending[I, R any] struct {
	item I
	res  R
	err  error
	done chan struct{}
}

// Do adds item to key's next batch, run by run, and waits for its result.
// Items of one key must all be run by equivalent RunFuncs. If ctx ends
// first Do returns ctx's error, while the item may still be decided;
// callers that must not lose what was decided pass a ctx that ends only
// when nobody is left to use the result.
func (c *Coalescer[I, R]) Do(ctx context.Context, key string, item I, run RunFunc[I, R]) (R, error) {
	p := &pending[I, R]{item: item, done: make(chan struct{})}
	c.mu.Lock()
	if c.groups == nil {
		c.groups = map[string]*group[I, R]{}
	}
	g, busy := c.groups[key]
	if !busy {
		g = &group[I, R]{run: run}
		c.groups[key] = g
	}
	g.queue = append(g.queue, p)
	c.mu.Unlock()
	if !busy {
		c.drain(key, g)
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// drain runs batches for key until its queue is empty. The first batch
// runs on the caller's goroutine; later ones on a new goroutine, so the
// first caller gets its answer without waiting for the others.
func (c *Coalescer[I, R]) drain(key string, g *group[I, R]) {
	max := c.MaxBatch
	if max <= 0 {
		max = 256
	}
	c.mu.Lock()
	batch := g.queue
	if len(batch) > max {
		batch = batch[:max]
	}
	g.queue = g.queue[len(batch):]
	c.mu.Unlock()

	items := make([]I, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	res, err := g.run(context.Background(), items)
	if err == nil && len(res) != len(batch) {
		err = errBatchShape
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.res = res[i]
		}
		close(p.done)
	}

	c.mu.Lock()
	if len(g.queue) == 0 {
		delete(c.groups, key)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.drain(key, g)
}

type batchShapeError struct{}

func (batchShapeError) Error() string { return "backend: batch returned the wrong number of results" }

var errBatchShape error = batchShapeError{}
