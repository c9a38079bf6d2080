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
	// MaxBatch caps the items of one call (0 = 1024).
	MaxBatch int

	mu     sync.Mutex
	groups map[string]*group[I, R]
}

// RunFunc runs one batch and returns a result per item, in order.
type RunFunc[I, R any] func(ctx context.Context, items []I) ([]R, error)

// Call is one item for DoAll: what to add to which key's next batch.
type Call[I, R any] struct {
	Key  string
	Item I
	Run  RunFunc[I, R] // runs the key's batches; equivalent for every item of a key
}

// Outcome is the result of one Call.
type Outcome[R any] struct {
	Res R
	Err error
}

type group[I, R any] struct {
	key   string
	queue []*pending[I, R]
	run   RunFunc[I, R]
}

type pending[I, R any] struct {
	item I
	out  Outcome[R]
	wg   *sync.WaitGroup  // Done when out is set (Do, DoAll)
	done func(Outcome[R]) // or called with out (Go)
}

// Do adds item to key's next batch, run by run, and waits for its result.
// If ctx ends first Do returns ctx's error, while the item may still be
// decided; callers that must not lose what was decided pass a ctx that
// ends only when nobody is left to use the result.
func (c *Coalescer[I, R]) Do(ctx context.Context, key string, item I, run RunFunc[I, R]) (R, error) {
	var wg sync.WaitGroup
	p := &pending[I, R]{item: item, wg: &wg}
	wg.Add(1)
	if g := c.enqueue(key, p, run); g != nil {
		c.drain(g)
	}
	if ctx.Done() != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			var zero R
			return zero, ctx.Err()
		}
	}
	wg.Wait()
	return p.out.Res, p.out.Err
}

// Go adds item to key's next batch, like Do, and calls done with its
// outcome instead of waiting for it. done runs on the goroutine that ran
// the batch — the caller's, before Go returns, when key was idle; another
// caller's or a fresh one otherwise — so it must be quick and must not
// panic: other items' results wait for it.
func (c *Coalescer[I, R]) Go(key string, item I, run RunFunc[I, R], done func(Outcome[R])) {
	p := &pending[I, R]{item: item, done: done}
	if g := c.enqueue(key, p, run); g != nil {
		c.drain(g)
	}
}

// DoAll adds every call to its key's next batch at once — so calls on one
// key go in one batch, in order — and waits for all of them. Idle keys
// start running on their own goroutines (the last one on the caller's).
func (c *Coalescer[I, R]) DoAll(calls []Call[I, R]) []Outcome[R] {
	var wg sync.WaitGroup
	wg.Add(len(calls))
	ps := make([]pending[I, R], len(calls))
	var idle []*group[I, R]
	c.mu.Lock()
	for i := range calls {
		ps[i] = pending[I, R]{item: calls[i].Item, wg: &wg}
		if g := c.enqueueLocked(calls[i].Key, &ps[i], calls[i].Run); g != nil {
			idle = append(idle, g)
		}
	}
	c.mu.Unlock()
	for i, g := range idle {
		if i < len(idle)-1 {
			go c.drain(g)
		} else {
			c.drain(g)
		}
	}
	wg.Wait()
	out := make([]Outcome[R], len(ps))
	for i := range ps {
		out[i] = ps[i].out
	}
	return out
}

// enqueue queues p on key and returns the key's group when it was idle:
// then the caller must drain it.
func (c *Coalescer[I, R]) enqueue(key string, p *pending[I, R], run RunFunc[I, R]) *group[I, R] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enqueueLocked(key, p, run)
}

func (c *Coalescer[I, R]) enqueueLocked(key string, p *pending[I, R], run RunFunc[I, R]) *group[I, R] {
	if c.groups == nil {
		c.groups = map[string]*group[I, R]{}
	}
	g, busy := c.groups[key]
	if !busy {
		g = &group[I, R]{key: key, run: run}
		c.groups[key] = g
	}
	g.queue = append(g.queue, p)
	if busy {
		return nil
	}
	return g
}

// drain runs batches of g until its queue is empty. The first batch runs
// on the caller's goroutine; later ones on a new goroutine, so the first
// caller gets its answer without waiting for the others.
func (c *Coalescer[I, R]) drain(g *group[I, R]) {
	max := c.MaxBatch
	if max <= 0 {
		max = 1024
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
			p.out.Err = err
		} else {
			p.out.Res = res[i]
		}
		if p.done != nil {
			p.done(p.out)
		} else {
			p.wg.Done()
		}
	}

	c.mu.Lock()
	if len(g.queue) == 0 {
		delete(c.groups, g.key)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.drain(g)
}

type batchShapeError struct{}

func (batchShapeError) Error() string { return "backend: batch returned the wrong number of results" }

var errBatchShape error = batchShapeError{}
