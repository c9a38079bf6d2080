// Package coalesce merges concurrent calls on the same key into one call
// that decides every item in order — like groupcache's singleflight, but
// each caller gets its own item's result rather than a shared one.
//
// The first caller on an idle key runs at once; callers arriving while
// that call is in flight queue up and go together in the next call, one
// call per key in flight. An idle key costs no extra latency. With
// MaxGather set, a follow-up call that would be much smaller than the
// key's recent calls waits a little for more items (see Coalescer): when
// the backend is slow, that keeps batches large, so its time goes to
// deciding items rather than to per-call overhead.
package coalesce

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Coalescer merges concurrent calls on the same key into one call. The
// zero value is ready to use.
type Coalescer[I, R any] struct {
	// MaxBatch caps the items of one call (0 = 1024).
	MaxBatch int
	// MaxGather bounds how long a follow-up call may wait for items to
	// gather (0 = never wait). A follow-up call — the next call of a key
	// whose last call just returned — that holds items of fewer than
	// seven eighths of the callers recently busy on the key waits until it
	// has that many, or for MaxGather. (A caller is one Do, or one GoAll's
	// items on the key: one client's pipeline counts once.) Closed-loop callers (a client that
	// sends its next request when it has the last reply) come back
	// together: without the wait the first few of them would go in a call
	// of their own while the rest queue behind it, and when the backend is
	// slow (busy, CPU-capped) its time would go to per-call overhead
	// instead of deciding items. A key whose recent calls had one item
	// never waits, so light load pays nothing.
	MaxGather time.Duration

	mu     sync.Mutex
	groups map[string]*group[I, R]
}

// RunFunc runs one batch and returns a result per item, in order.
type RunFunc[I, R any] func(ctx context.Context, items []I) ([]R, error)

// Call is one item for GoAll: what to add to which key's next batch.
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

	// Callers, not items, are what gathering counts: a client's pipeline
	// of many items is one caller, and waiting for the rest of it would
	// wait for what cannot come until this batch is answered.
	callers int // callers with items in queue
	peak    int // callers recently busy on the key (decays by 1/8, at least 1, a batch)
	want    int // while gathering: close full at this many callers queued
	full    chan struct{}
}

type pending[I, R any] struct {
	item  I
	out   Outcome[R]
	wg    *sync.WaitGroup       // Done when out is set (Do)
	done  func(int, Outcome[R]) // or called with at and out (GoAll)
	at    int                   // the item's index in its GoAll
	first bool                  // the first item of its Do or GoAll on this key
}

// Do adds item to key's next batch, run by run, and waits for its result.
// If ctx ends first Do returns ctx's error, while the item may still be
// decided; callers that must not lose what was decided pass a ctx that
// ends only when nobody is left to use the result.
func (c *Coalescer[I, R]) Do(ctx context.Context, key string, item I, run RunFunc[I, R]) (R, error) {
	var wg sync.WaitGroup
	p := &pending[I, R]{item: item, wg: &wg, first: true}
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

// GoAll adds every call to its key's next batch at once — so calls on one
// key go in one batch, in order — and calls done with each call's index
// and outcome as it comes. Idle keys start running on their own
// goroutines, the last one on the caller's (so GoAll returns when that
// batch is done). done runs on the goroutine that ran the batch, perhaps
// for several calls at once: it must be quick, must not panic, and must
// be safe to call concurrently.
func (c *Coalescer[I, R]) GoAll(calls []Call[I, R], done func(i int, o Outcome[R])) {
	ps := make([]pending[I, R], len(calls))
	var idle []*group[I, R]
	var seen []string // the keys this GoAll has added to (usually a few)
	c.mu.Lock()
	for i := range calls {
		ps[i] = pending[I, R]{item: calls[i].Item, done: done, at: i, first: !slices.Contains(seen, calls[i].Key)}
		if ps[i].first {
			seen = append(seen, calls[i].Key)
		}
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
	if p.first {
		g.callers++
	}
	if busy {
		if g.full != nil && g.callers >= g.want {
			close(g.full)
			g.full = nil
		}
		return nil
	}
	return g
}

// drain runs g's first batch on the caller's goroutine; later batches
// follow on their own (run, followUp) until the queue is empty.
func (c *Coalescer[I, R]) drain(g *group[I, R]) {
	c.mu.Lock()
	batch := c.take(g)
	c.mu.Unlock()
	c.run(g, batch)
}

// followUp runs g's next batch, queued behind the one that just
// returned, after letting it gather (MaxGather). With MaxGather set, a
// busy key's group lingers even when its queue is empty, so that the
// callers just answered, coming back one by one, do not each start a
// call of their own: the first of them would, while the rest queue
// behind it.
func (c *Coalescer[I, R]) followUp(g *group[I, R]) {
	c.mu.Lock()
	if want := min(g.peak-g.peak/8, c.maxBatch()); c.MaxGather > 0 && g.callers < want {
		full := make(chan struct{})
		g.want, g.full = want, full
		c.mu.Unlock()
		t := time.NewTimer(c.MaxGather)
		select {
		case <-full:
		case <-t.C:
		}
		t.Stop()
		c.mu.Lock()
		g.full = nil
	}
	if len(g.queue) == 0 {
		// Nobody came back: the key is idle again.
		delete(c.groups, g.key)
		c.mu.Unlock()
		return
	}
	batch := c.take(g)
	c.mu.Unlock()
	c.run(g, batch)
}

func (c *Coalescer[I, R]) maxBatch() int {
	if c.MaxBatch <= 0 {
		return 1024
	}
	return c.MaxBatch
}

// take removes g's next batch from its queue (c.mu held).
func (c *Coalescer[I, R]) take(g *group[I, R]) []*pending[I, R] {
	batch := g.queue[:min(len(g.queue), c.maxBatch())]
	g.queue = g.queue[len(batch):]
	g.callers -= callers(batch)
	return batch
}

// callers counts the callers with items in batch.
func callers[I, R any](batch []*pending[I, R]) int {
	n := 0
	for _, p := range batch {
		if p.first {
			n++
		}
	}
	return n
}

// run runs one batch of g, hands out its results, and starts the next
// batch when items queued meanwhile — on a new goroutine, so the caller
// that ran this one gets its answer without waiting for the others.
func (c *Coalescer[I, R]) run(g *group[I, R], batch []*pending[I, R]) {
	items := make([]I, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	res, err := g.run(context.Background(), items)
	if err == nil && len(res) != len(batch) {
		err = ErrBatchShape
	}
	for i, p := range batch {
		if err != nil {
			p.out.Err = err
		} else {
			p.out.Res = res[i]
		}
		if p.done != nil {
			p.done(p.at, p.out)
		} else {
			p.wg.Done()
		}
	}

	c.mu.Lock()
	// The callers of this batch and those queued behind it: how many come
	// and go on this key (decaying, so it follows a load that drops).
	g.peak = max(callers(batch)+g.callers, g.peak-max(1, g.peak/8))
	if len(g.queue) == 0 && (c.MaxGather <= 0 || g.peak < 2) {
		delete(c.groups, g.key)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.followUp(g)
}
