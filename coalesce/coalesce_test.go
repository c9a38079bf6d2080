package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// recorder is a RunFunc that remembers every batch it ran and answers each
// item with the item itself and its position in the batch, after a short
// pause so that callers pile up behind it.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	pause   time.Duration
	err     error
	inRun   atomic.Int32 // runs in progress
	overlap atomic.Bool  // two runs of one key at once
}

type answerOf struct {
	item, index, batch int
}

func (r *recorder) run(ctx context.Context, items []int) ([]answerOf, error) {
	if r.inRun.Add(1) > 1 {
		r.overlap.Store(true)
	}
	defer r.inRun.Add(-1)
	time.Sleep(r.pause)
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(items))
	b := len(r.batches) - 1
	r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	out := make([]answerOf, len(items))
	for i, it := range items {
		out[i] = answerOf{item: it, index: i, batch: b}
	}
	return out, nil
}

// doAll calls Do for items 0..n-1 on key from n goroutines at once.
func doAll(c *Coalescer[int, answerOf], key string, n int, run RunFunc[int, answerOf]) ([]answerOf, []error) {
	res := make([]answerOf, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = c.Do(context.Background(), key, i, run)
		}()
	}
	close(start)
	wg.Wait()
	return res, errs
}

func TestCoalescerMergesConcurrentCalls(t *testing.T) {
	const n = 200
	var c Coalescer[int, answerOf]
	r := &recorder{pause: 5 * time.Millisecond}
	res, errs := doAll(&c, "k", n, r.run)

	for i := range n {
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		// Each caller gets the answer to its own item: the one at its
		// position in the batch that carried it.
		got := res[i]
		if got.item != i || r.batches[got.batch][got.index] != i {
			t.Fatalf("item %d got %+v (batch %v)", i, got, r.batches[got.batch])
		}
	}
	total := 0
	for _, b := range r.batches {
		total += len(b)
	}
	if total != n {
		t.Errorf("%d items ran in %d batches, want each of %d once", total, len(r.batches), n)
	}
	if len(r.batches) >= n/2 {
		t.Errorf("%d concurrent calls ran in %d batches, want far fewer", n, len(r.batches))
	}
	if r.overlap.Load() {
		t.Error("two batches of one key ran at the same time")
	}
	t.Logf("%d calls ran in %d batches", n, len(r.batches))
	// The key's group goes once its queue is empty.
	redistest.WaitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.groups) == 0 })
}

// Items queued behind a running batch go in the next batch in arrival
// order.
func TestCoalescerKeepsArrivalOrder(t *testing.T) {
	var c Coalescer[int, answerOf]
	release := make(chan struct{})
	var seen [][]int
	var mu sync.Mutex
	run := func(ctx context.Context, items []int) ([]answerOf, error) {
		mu.Lock()
		seen = append(seen, slices.Clone(items))
		first := len(seen) == 1
		mu.Unlock()
		if first {
			<-release // hold the first batch until the rest have queued
		}
		out := make([]answerOf, len(items))
		for i, it := range items {
			out[i] = answerOf{item: it, index: i}
		}
		return out, nil
	}
	done := make(chan error, 6)
	go func() { _, err := c.Do(context.Background(), "k", 0, run); done <- err }()
	redistest.WaitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	for i := 1; i <= 5; i++ {
		go func() {
			got, err := c.Do(context.Background(), "k", i, run)
			if err == nil && (got.item != i || got.index != i-1) {
				err = fmt.Errorf("item %d answered with %+v", i, got)
			}
			done <- err
		}()
		// Queue one at a time, so arrival order is known.
		redistest.WaitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.groups["k"].queue) == i })
	}
	close(release)
	for range 6 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if want := [][]int{{0}, {1, 2, 3, 4, 5}}; !slices.EqualFunc(seen, want, slices.Equal) {
		t.Errorf("batches %v, want %v", seen, want)
	}
}

// goOne is GoAll of one call.
func goOne[I, R any](c *Coalescer[I, R], key string, item I, run RunFunc[I, R], done func(Outcome[R])) {
	c.GoAll([]Call[I, R]{{Key: key, Item: item, Run: run}}, func(_ int, o Outcome[R]) { done(o) })
}

// goAllWait is GoAll that waits for every outcome.
func goAllWait[I, R any](c *Coalescer[I, R], calls []Call[I, R]) []Outcome[R] {
	out := make([]Outcome[R], len(calls))
	var wg sync.WaitGroup
	wg.Add(len(calls))
	c.GoAll(calls, func(i int, o Outcome[R]) { out[i] = o; wg.Done() })
	wg.Wait()
	return out
}

// GoAll's items join batches as Do's do, and done gets each one's
// outcome: at once on an idle key (on the caller's goroutine), from the
// batch that carried it on a busy one.
func TestCoalescerGoAll(t *testing.T) {
	var c Coalescer[int, answerOf]
	release := make(chan struct{})
	var mu sync.Mutex
	var seen [][]int
	run := func(ctx context.Context, items []int) ([]answerOf, error) {
		mu.Lock()
		seen = append(seen, slices.Clone(items))
		held := items[0] == 1
		mu.Unlock()
		if held {
			<-release
		}
		out := make([]answerOf, len(items))
		for i, it := range items {
			out[i] = answerOf{item: it, index: i}
		}
		return out, nil
	}

	var got Outcome[answerOf]
	goOne(&c, "k", 0, run, func(o Outcome[answerOf]) { got = o }) // idle: runs now
	if got.Err != nil || got.Res.item != 0 {
		t.Fatalf("idle key: done got %+v before GoAll returned", got)
	}

	outs := make(chan Outcome[answerOf], 4)
	go goOne(&c, "k", 1, run, func(o Outcome[answerOf]) { outs <- o })
	redistest.WaitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2 })
	goOne(&c, "k", 2, run, func(o Outcome[answerOf]) { outs <- o }) // queues: returns at once
	redistest.WaitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.groups["k"].queue) == 1 })
	doDone := make(chan answerOf)
	go func() { a, _ := c.Do(context.Background(), "k", 3, run); doDone <- a }()
	redistest.WaitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.groups["k"].queue) == 2 })
	close(release)

	byItem := map[int]answerOf{}
	for range 2 {
		o := <-outs
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		byItem[o.Res.item] = o.Res
	}
	if a := <-doDone; a.item != 3 || a.index != 1 {
		t.Errorf("Do queued behind GoAll: %+v, want item 3 at index 1", a)
	}
	if byItem[1].index != 0 || byItem[2].index != 0 {
		t.Errorf("GoAll outcomes %+v", byItem)
	}
	if want := [][]int{{0}, {1}, {2, 3}}; !slices.EqualFunc(seen, want, slices.Equal) {
		t.Errorf("batches %v, want %v", seen, want)
	}
}

func TestCoalescerErrorReachesEveryItem(t *testing.T) {
	var c Coalescer[int, answerOf]
	boom := errors.New("boom")
	r := &recorder{pause: 2 * time.Millisecond, err: boom}
	_, errs := doAll(&c, "k", 50, r.run)
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("item %d: err %v, want boom", i, err)
		}
	}

	// A RunFunc that answers the wrong number of items fails its batch.
	short := func(ctx context.Context, items []int) ([]answerOf, error) { return nil, nil }
	if _, err := c.Do(context.Background(), "k2", 1, short); err == nil {
		t.Error("a batch with no results for its item succeeded")
	}
}

func TestCoalescerMaxBatch(t *testing.T) {
	c := Coalescer[int, answerOf]{MaxBatch: 7}
	r := &recorder{pause: 3 * time.Millisecond}
	_, errs := doAll(&c, "k", 100, r.run)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	for i, b := range r.batches {
		if len(b) > 7 {
			t.Errorf("batch %d has %d items, MaxBatch is 7", i, len(b))
		}
	}
	if len(r.batches) < 100/7 {
		t.Errorf("100 items in %d batches of at most 7", len(r.batches))
	}
}

func TestCoalescerKeysDoNotMerge(t *testing.T) {
	var c Coalescer[int, answerOf]
	var mu sync.Mutex
	keysOf := map[int]string{} // item → key of the batch that ran it
	var wg sync.WaitGroup
	for i := range 60 {
		key := fmt.Sprintf("k%d", i%3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := func(ctx context.Context, items []int) ([]answerOf, error) {
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				for _, it := range items {
					keysOf[it] = key
				}
				mu.Unlock()
				out := make([]answerOf, len(items))
				for j, it := range items {
					out[j] = answerOf{item: it}
				}
				return out, nil
			}
			if got, err := c.Do(context.Background(), key, i, run); err != nil || got.item != i {
				t.Errorf("item %d: %+v, %v", i, got, err)
			}
		}()
	}
	wg.Wait()
	for i := range 60 {
		if want := fmt.Sprintf("k%d", i%3); keysOf[i] != want {
			t.Errorf("item %d of key %s ran in a batch of %s", i, want, keysOf[i])
		}
	}
}

// A caller whose ctx ends stops waiting; the batch still runs and others
// get their answers.
func TestCoalescerCallerGivesUp(t *testing.T) {
	var c Coalescer[int, answerOf]
	release := make(chan struct{})
	ran := make(chan []int, 2)
	run := func(ctx context.Context, items []int) ([]answerOf, error) {
		ran <- slices.Clone(items)
		if items[0] == 0 {
			<-release
		}
		return make([]answerOf, len(items)), nil
	}
	first := make(chan error, 1)
	go func() { _, err := c.Do(context.Background(), "k", 0, run); first <- err }()
	<-ran
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Do(ctx, "k", 1, run); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do with an ended ctx: %v, want DeadlineExceeded", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first caller: %v", err)
	}
	select {
	case b := <-ran:
		if !slices.Equal(b, []int{1}) {
			t.Errorf("second batch %v, want [1]", b)
		}
	case <-time.After(5 * time.Second):
		t.Error("the abandoned item never ran")
	}
}

// closedLoop runs n callers that each send their next item as soon as
// they have the last one's result, for rounds items each, against a slow
// run, and returns the batch sizes.
func closedLoop(c *Coalescer[int, answerOf], n, rounds int, pause time.Duration) []int {
	r := &recorder{pause: pause}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				// A client's way back takes a while, and not the same for all.
				time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
				c.Do(context.Background(), "k", i, r.run) //nolint:errcheck
			}
		}()
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	sizes := make([]int, len(r.batches))
	for i, b := range r.batches {
		sizes[i] = len(b)
	}
	return sizes
}

// With MaxGather, callers answered together go out together again:
// closed-loop callers do not split into a lone first caller and the rest
// queued behind it, so there are fewer, larger batches than without.
func TestCoalescerGathersClosedLoopCallers(t *testing.T) {
	const n, rounds = 40, 20
	var plain Coalescer[int, answerOf]
	gather := Coalescer[int, answerOf]{MaxGather: 20 * time.Millisecond}
	without := closedLoop(&plain, n, rounds, 2*time.Millisecond)
	with := closedLoop(&gather, n, rounds, 2*time.Millisecond)
	t.Logf("batches: %d without gathering, %d with", len(without), len(with))
	// The first batch is a lone caller, and the second holds those that
	// had started by the time it returned (the count of busy callers is
	// learnt from them); as callers finish their rounds at different times
	// the last batches shrink. In between every batch holds most callers.
	small := 0
	middle := with[2 : len(with)*2/3]
	for _, s := range middle {
		if s < n/2 {
			small++
		}
	}
	if small > 0 {
		t.Errorf("with gathering, %d of the %d middle batches held fewer than %d items: %v", small, len(middle), n/2, with)
	}
	if len(with) >= len(without) {
		t.Errorf("gathering ran %d batches, no fewer than %d without it", len(with), len(without))
	}
	redistest.WaitFor(t, func() bool { gather.mu.Lock(); defer gather.mu.Unlock(); return len(gather.groups) == 0 })
}

// A key used by one caller at a time never waits to gather.
func TestCoalescerLoneCallerDoesNotWait(t *testing.T) {
	c := Coalescer[int, answerOf]{MaxGather: time.Second}
	r := &recorder{}
	start := time.Now()
	for i := range 20 {
		if _, err := c.Do(context.Background(), "k", i, r.run); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("20 lone calls took %v: one waited for others to gather", d)
	}
}

// After two callers, one caller alone soon stops waiting to gather: the
// key's count of busy callers decays even when it is small.
func TestCoalescerGatherDecays(t *testing.T) {
	c := Coalescer[int, answerOf]{MaxGather: 200 * time.Millisecond}
	closedLoop(&c, 2, 5, time.Millisecond)
	r := &recorder{}
	start := time.Now()
	for i := range 20 {
		if _, err := c.Do(context.Background(), "k", i, r.run); err != nil {
			t.Fatal(err)
		}
	}
	// Each wait to gather costs 200ms; a couple are allowed while the
	// count decays, not one per call.
	if d := time.Since(start); d > time.Second {
		t.Errorf("20 lone calls after a pair took %v: they kept waiting for a second caller", d)
	}
}

// One client's pipeline is one caller, however many items it has and
// however its reads split it: it never waits to gather more of itself
// (the rest of it cannot come until this batch is answered).
func TestCoalescerPipelineIsOneCaller(t *testing.T) {
	c := Coalescer[int, answerOf]{MaxGather: 200 * time.Millisecond}
	r := &recorder{}
	calls := func(n int) []Call[int, answerOf] {
		out := make([]Call[int, answerOf], n)
		for i := range out {
			out[i] = Call[int, answerOf]{Key: "k", Item: i, Run: r.run}
		}
		return out
	}
	start := time.Now()
	for i := range 20 {
		for j, o := range goAllWait(&c, calls(10+6*(i%2))) { // reads of 16, then of 10
			if o.Err != nil || o.Res.item != j {
				t.Fatalf("round %d item %d: %+v", i, j, o)
			}
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("20 pipelines of one caller took %v: they waited to gather items of their own", d)
	}
}
