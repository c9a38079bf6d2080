package proxy

// End-to-end tests of waiting (RL.ACQUIRE ... TIMEOUT d | BLOCK), as
// docs/waiting-and-leases.md documents it: book-ahead algorithms
// (token-bucket, leaky-bucket) hold a reservation's reply until its time,
// queue algorithms (sliding-log, sliding-window, fixed-window) serve
// waiters in arrival order, a denial that cannot turn into a grant within
// the timeout is answered at once, a client that goes away costs nothing,
// and max_waiters bounds the waiting clients.
//
// Durations are checked with lower bounds (a reply is never held for less
// than the limiter said) and generous upper bounds (a loaded machine may
// be slow, never early).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
)

// waitAlgos are the five algorithms, book-ahead ones first.
var waitAlgos = []string{"token-bucket", "leaky-bucket", "sliding-log", "sliding-window", "fixed-window"}

// early is how much sooner than the limiter said a held reply may come:
// retry_after is rounded up to whole milliseconds, plus clock noise.
const early = 5 * time.Millisecond

// slack is the generous upper bound on how late a held reply may come on
// a loaded machine.
const slack = 1500 * time.Millisecond

// setRateArgs builds RL.SETRATE key rate interval ALGO algo [extra...].
func setRateArgs(key string, rate int, interval, algo string, extra ...any) []any {
	args := []any{"RL.SETRATE", key, rate, interval, "ALGO", algo}
	return append(args, extra...)
}

// waiter returns a dedicated connection whose reads may wait as long as a
// held reply, already connected (so dialing is not part of any timing).
func (h *harness) waiter(t testing.TB) conn {
	t.Helper()
	c := h.Conn(t, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
	c.Do(t, "PING").Equal("PONG")
	return c
}

// alone starts another rlproxy on h's backend, for a test that counts
// waiting clients (INFO waiting_clients counts every client of a proxy).
func (h *harness) alone(t testing.TB, tweaks ...func(*config.Config)) *harness {
	t.Helper()
	return startProxy(t, h.backend, append([]func(*config.Config){func(c *config.Config) {
		c.Backends = []string{h.backend.URL()}
	}}, tweaks...)...)
}

// aloneDrained starts a proxy of its own (the test counts waiting clients)
// with a sliding-log limiter of 1 permit per interval, already used up,
// and returns it with a waiting-capable connection.
func (h *harness) aloneDrained(t testing.TB, key, interval string) (*harness, conn) {
	t.Helper()
	h = h.alone(t)
	h.Do(t, setRateArgs(key, 1, interval, "sliding-log")...).Equal(int64(1))
	c := h.waiter(t)
	drained(t, c, key)
	return h, c
}

// timed is a reply received on another goroutine, and when it came.
type timed struct {
	args []any
	val  any
	err  error
	at   time.Time
}

// reply turns it into a reply to check on the test's goroutine.
func (r timed) reply(t testing.TB) *reply {
	return &reply{t: t, args: r.args, val: r.val, err: r.err}
}

// goDo sends a command on another goroutine (t.Fatal may not be called
// there); the reply arrives on the channel.
func goDo(c conn, args ...any) <-chan timed {
	ch := make(chan timed, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		v, err := c.d.Do(ctx, args...).Result()
		ch <- timed{args: args, val: v, err: err, at: time.Now()}
	}()
	return ch
}

// await receives a goDo reply, failing the test if none comes within d.
func await(t testing.TB, ch <-chan timed, d time.Duration) timed {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("no reply within %v", d)
		return timed{}
	}
}

// drained acquires single permits without waiting until one is denied,
// and returns that denial and when it was sent: the permits cannot come
// back before sent + RetryAfter (retry_after is rounded up).
func drained(t testing.TB, c conn, key string) (grant, time.Time) {
	t.Helper()
	for range 1000 {
		sent := time.Now()
		if g := c.Do(t, "RL.ACQUIRE", key).Acquire(); !g.Granted {
			if g.RetryAfter <= 0 {
				t.Fatalf("RL.ACQUIRE %s: denied with retry_after %v", key, g.RetryAfter)
			}
			return g, sent
		}
	}
	t.Fatalf("RL.ACQUIRE %s: still granting after 1000 acquires", key)
	return grant{}, time.Time{}
}

// waitingClients reads waiting_clients from INFO.
func waitingClients(t testing.TB, c conn) int { return infoInt(t, c, "waiting_clients") }

// infoInt reads an integer field from INFO.
func infoInt(t testing.TB, c conn, field string) int {
	t.Helper()
	info, ok := c.Do(t, "INFO").OK().(string)
	if !ok {
		t.Fatalf("INFO: want a string")
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s line:\n%s", field, info)
	return 0
}

// waitWaiting waits until exactly n clients are waiting.
func waitWaiting(t testing.TB, c conn, n int) {
	t.Helper()
	var got int
	if err := eventually(3*time.Second, func() error {
		if got = waitingClients(t, c); got != n {
			return fmt.Errorf("waiting_clients is %d, want %d", got, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitArrived waits until n waiters have arrived at c's proxy: waiting
// now, or answered already (a short window may grant the first waiter
// before the last one is sent, so waiting_clients alone may never reach n).
// A waiter is counted once it has its place in the limiter's queue, so
// one sent after this returns is served after them.
func waitArrived(t testing.TB, c conn, n int, answered []<-chan timed) {
	t.Helper()
	if err := eventually(3*time.Second, func() error {
		got := waitingClients(t, c)
		for _, ch := range answered {
			got += len(ch) // a reply not read yet; a waiter in between is missed until it lands
		}
		if got < n {
			return fmt.Errorf("%d waiters arrived, want %d", got, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// decisions reads how many RL.ACQUIRE decisions c's proxy has made since
// it started (INFO granted + denied): a waiter's booking counts as
// granted, its denial as denied.
func decisions(t testing.TB, c conn) int {
	t.Helper()
	return infoInt(t, c, "granted") + infoInt(t, c, "denied")
}

// waitAsked waits until exactly n clients wait on c's proxy and its
// decisions have reached asked: the waiters have asked the limiter and
// sleep until their time or a wake-up. A queue algorithm's waiter
// counted in waiting_clients has its place in the queue but may not have
// asked yet: a change made then is read when it asks, and a test of
// waking passes without waking anyone.
func waitAsked(t testing.TB, c conn, n, asked int) {
	t.Helper()
	waitWaiting(t, c, n)
	if err := eventually(3*time.Second, func() error {
		if got := decisions(t, c); got < asked {
			return fmt.Errorf("%d decisions, want %d: not every waiter has asked yet", got, asked)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TIMEOUT longer than the wait, and BLOCK: the reply is held until the
// permits come (never sooner than the denial's retry_after said), then
// granted with retry_after 0.
func TestWaitHeldUntilGranted(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range waitAlgos {
		for _, tc := range []struct {
			name     string
			rate     int
			interval string
			wait     []any // the RL.ACQUIRE options after permits (nil: TIMEOUT retry_after+2s)
		}{
			{"TIMEOUT", 2, "1s", nil},
			{"BLOCK", 1, "500ms", []any{"BLOCK"}},
		} {
			t.Run(tc.name+"/"+algo, func(t *testing.T) {
				t.Parallel()
				key := "held:" + tc.name + ":" + algo
				h.Do(t, setRateArgs(key, tc.rate, tc.interval, algo)...).Equal(int64(1))
				c := h.waiter(t)
				denied, sent := drained(t, c, key)
				wait := tc.wait
				if wait == nil {
					wait = []any{"TIMEOUT", (denied.RetryAfter + 2*time.Second).Milliseconds()}
				}
				r := await(t, goDo(c, append([]any{"RL.ACQUIRE", key, 1}, wait...)...), 10*time.Second)
				g := r.reply(t).Acquire()
				if !g.Granted || g.RetryAfter != 0 {
					t.Fatalf("%s: want granted with retry_after 0 after waiting", r.reply(t))
				}
				held := r.at.Sub(sent)
				if held < denied.RetryAfter-early {
					t.Errorf("granted %v after the denial, which said retry_after %v", held, denied.RetryAfter)
				}
				if held > denied.RetryAfter+slack {
					t.Errorf("granted %v after the denial, which said retry_after %v: held far too long", held, denied.RetryAfter)
				}
			})
		}
	}

	// leaky-bucket books each waiter into its own slot: five waiters on an
	// empty 5/1s bucket leave 200 ms apart.
	t.Run("leaky-bucket spaces reservations", func(t *testing.T) {
		t.Parallel()
		const key = "held:leaky-spaced"
		h.Do(t, setRateArgs(key, 5, "1s", "leaky-bucket", "BURST", 5)...).Equal(int64(1))
		conns := make([]conn, 5)
		for i := range conns {
			conns[i] = h.waiter(t)
		}
		start := time.Now()
		chans := make([]<-chan timed, len(conns))
		for i, c := range conns {
			chans[i] = goDo(c, "RL.ACQUIRE", key, 1, "TIMEOUT", "3s")
		}
		var at []time.Time
		for _, ch := range chans {
			r := await(t, ch, 10*time.Second)
			if g := r.reply(t).Acquire(); !g.Granted || g.RetryAfter != 0 {
				t.Fatalf("%s: want granted with retry_after 0", r.reply(t))
			}
			at = append(at, r.at)
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		const slot = 200 * time.Millisecond
		for i, a := range at {
			// The first grant is booked no sooner than start; the i-th
			// slot is i*200ms after it.
			// (A lower bound only: a busy machine may deliver a grant
			// late, never early; gaps between deliveries prove nothing.)
			if got := a.Sub(start); got < time.Duration(i)*slot-early {
				t.Errorf("grant %d came %v after the requests, before its slot at %v", i, got, time.Duration(i)*slot)
			}
		}
		if span := at[4].Sub(at[0]); span > 4*slot+slack {
			t.Errorf("five grants took %v, want about %v", span, 4*slot)
		}
	})
}

// TIMEOUT shorter than the wait: the denial is answered at once (like
// Guava's tryAcquire(timeout)), not after the timeout, with a retry_after
// beyond the timeout.
func TestWaitTimeoutTooShort(t *testing.T) {
	t.Parallel()
	h := start(t)
	const timeout = 3 * time.Second
	for _, algo := range waitAlgos {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			key := "short:" + algo
			h.Do(t, setRateArgs(key, 1, "1h", algo)...).Equal(int64(1))
			c := h.waiter(t)
			denied, _ := drained(t, c, key)
			if denied.RetryAfter < 2*timeout {
				// Only a fixed window (aligned to the clock hour) may end
				// this soon; every other algorithm's permit is an hour off.
				if algo != "fixed-window" {
					t.Fatalf("a drained 1-per-hour %s says retry_after %v, want about an hour", algo, denied.RetryAfter)
				}
				t.Skipf("the clock hour ends in %v: too close to tell a wait from an answer", denied.RetryAfter)
			}
			deniedAtOnce(t, c, key, timeout, "on a limiter empty for an hour")
		})
	}

	// leaky-bucket books a waiter only when its slot comes within the
	// timeout: the next slot of a 5/1s bucket is 200 ms away.
	t.Run("leaky-bucket slot beyond the timeout", func(t *testing.T) {
		t.Parallel()
		const key = "short:leaky-slot"
		h.Do(t, setRateArgs(key, 5, "1s", "leaky-bucket", "BURST", 5)...).Equal(int64(1))
		c := h.waiter(t)
		c.Do(t, "RL.ACQUIRE", key).Granted(0)
		g := c.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", 50).Acquire()
		if g.Granted || g.RetryAfter <= 50*time.Millisecond || g.RetryAfter > 200*time.Millisecond {
			t.Errorf("TIMEOUT 50ms with the next slot 200ms away: %+v, want denied with retry_after in (50ms, 200ms]", g)
		}
	})

	// A queue algorithm's waiter that is queued behind another waiter
	// whose wait already ends after its timeout cannot be served in
	// time either: docs/waiting-and-leases.md says such a denial is answered at once.
	t.Run("queued behind a longer wait", func(t *testing.T) {
		t.Parallel()
		const key = "short:queued"
		h, c := h.aloneDrained(t, key, "1h")
		base := decisions(t, c)
		head := h.raw(t)
		head.Send("RL.ACQUIRE", key, "1", "BLOCK") // waits an hour at the head of the queue
		waitAsked(t, c, 1, base+1)                 // asked: the queue knows it asks again in an hour
		deniedAtOnce(t, c, key, timeout, "behind an hour-long wait")
	})
}

// While one client waits, other connections keep flowing; the waiting
// connection's own later commands wait behind its reply.
func TestWaitOthersKeepFlowing(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range []string{"token-bucket", "sliding-log"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			h := h.alone(t) // its own proxy: the test counts waiting clients
			key, other := "flow:"+algo, "flow-other:"+algo
			h.Do(t, setRateArgs(key, 1, "1500ms", algo)...).Equal(int64(1))
			h.Do(t, setRateArgs(other, 10, "1s", algo)...).Equal(int64(1))
			w := h.waiter(t)
			drained(t, w, key)
			ch := goDo(w, "RL.ACQUIRE", key, 1, "BLOCK")
			c := h.waiter(t)
			waitWaiting(t, c, 1)

			c.Do(t, "PING").Equal("PONG")
			c.Do(t, "RL.ACQUIRE", other).Granted(9)
			c.Do(t, "RL.ACQUIRE", key).Denied(0)                  // decided at once, not queued
			c.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", 1).Denied(0) // too short: answered at once
			select {
			case r := <-ch:
				t.Fatalf("the waiter was answered (%s) before the other connection's commands; want them answered while it waits", r.reply(t))
			default:
			}
			r := await(t, ch, 10*time.Second)
			if g := r.reply(t).Acquire(); !g.Granted {
				t.Errorf("%s: want granted", r.reply(t))
			}
		})
	}

	t.Run("same connection waits behind", func(t *testing.T) {
		t.Parallel()
		const key = "flow:pipeline"
		h.Do(t, setRateArgs(key, 1, "500ms", "token-bucket")...).Equal(int64(1))
		c := h.raw(t)
		if got := c.Call("RL.ACQUIRE", key); got != "*4" {
			t.Fatalf("RL.ACQUIRE: reply starts %q, want *4", got)
		}
		for range 4 {
			c.Line()
		}
		sent := time.Now()
		c.Send("RL.ACQUIRE", key, "1", "BLOCK")
		c.Send("PING")
		want := []string{"*4", ":1", ":0", ":0"}
		for _, w := range want {
			if got := c.Line(); got != w {
				t.Fatalf("BLOCK reply line %q, want %q", got, w)
			}
		}
		c.Line() // reset_after
		if got := c.Line(); got != "+PONG" {
			t.Fatalf("PING after BLOCK: %q, want +PONG", got)
		}
		if took := time.Since(sent); took < 400*time.Millisecond {
			t.Errorf("PING pipelined after a BLOCK of ~500ms answered after %v: want it to wait behind the BLOCK", took)
		}
	})
}

// A client that disconnects while it waits costs nothing: a book-ahead
// algorithm gives its reserved permits back, and a queue algorithm's
// waiter leaves the queue so the next waiter is served in its place.
func TestWaitDisconnect(t *testing.T) {
	t.Parallel()
	h := start(t)

	// token-bucket, 1 permit per 2s, drained. A BLOCK books the next
	// permit (2s ahead), which pushes the next one 4s ahead; after the
	// waiter leaves, it is 2s ahead again. With stay, the waiter stays
	// connected (the control).
	for _, stay := range []bool{false, true} {
		name := "token-bucket gives back"
		if stay {
			name = "token-bucket control"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := h.alone(t) // its own proxy: the test counts waiting clients
			key := "gone:" + name
			h.Do(t, "RL.SETRATE", key, 1, "2s").Equal(int64(1))
			c := h.waiter(t)
			c.Do(t, "RL.ACQUIRE", key).Granted(0)
			base := decisions(t, c)
			w := h.raw(t)
			w.Send("RL.ACQUIRE", key, "1", "BLOCK")
			waitAsked(t, c, 1, base+1)
			// Booked: the next permit is more than 2s away. The plain
			// acquire's denial may be remembered by the proxy.
			if g := c.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", 1).Denied(0); g.RetryAfter <= 2*time.Second {
				t.Fatalf("after a BLOCK booked the next permit, retry_after is %v, want > 2s", g.RetryAfter)
			}
			if g := c.Do(t, "RL.ACQUIRE", key).Denied(0); g.RetryAfter <= 2*time.Second {
				t.Fatalf("after a BLOCK booked the next permit, retry_after is %v, want > 2s", g.RetryAfter)
			}
			if !stay {
				_ = w.c.Close()
				waitWaiting(t, c, 0)
			}
			// What the backend says (TIMEOUT skips any remembered denial)
			// and what a plain acquire is told.
			for _, args := range [][]any{{"RL.ACQUIRE", key, 1, "TIMEOUT", 1}, {"RL.ACQUIRE", key}} {
				g := c.Do(t, args...).Denied(0)
				switch booked := g.RetryAfter > 2*time.Second; {
				case booked && !stay:
					t.Errorf("%s after the waiter left: retry_after %v, want below 2s (its permit given back)", show(args), g.RetryAfter)
				case !booked && stay:
					t.Errorf("%s with the waiter still there: retry_after %v, want above 2s (its permit booked)", show(args), g.RetryAfter)
				}
			}
			if stay {
				_ = w.c.Close() // its permit comes back now; nothing else to see
			}
		})
	}

	// sliding-log, 1 permit per second, drained. The head of the queue
	// leaves: the next waiter gets the permit in its place — it could not
	// within its timeout if it had to wait for the head's grant too.
	t.Run("sliding-log head leaves", func(t *testing.T) {
		t.Parallel()
		const key = "gone:sl-head"
		h, c := h.aloneDrained(t, key, "1s")
		head := h.raw(t)
		head.Send("RL.ACQUIRE", key, "1", "BLOCK")
		waitWaiting(t, c, 1)
		next := goDo(h.waiter(t), "RL.ACQUIRE", key, 1, "TIMEOUT", "1500ms")
		waitWaiting(t, c, 2)
		time.Sleep(100 * time.Millisecond)
		_ = head.c.Close()
		r := await(t, next, 10*time.Second)
		if g := r.reply(t).Acquire(); !g.Granted {
			t.Errorf("%s: the head of the queue left, want the next waiter granted in its place", r.reply(t))
		}
		waitWaiting(t, c, 0)
	})

	// A waiter in the middle of the queue leaves: the one behind it moves
	// up and gets the second permit.
	t.Run("sliding-log middle leaves", func(t *testing.T) {
		t.Parallel()
		const key = "gone:sl-middle"
		h, c := h.aloneDrained(t, key, "1s")
		first := goDo(h.waiter(t), "RL.ACQUIRE", key, 1, "BLOCK")
		waitWaiting(t, c, 1)
		middle := h.raw(t)
		middle.Send("RL.ACQUIRE", key, "1", "BLOCK")
		waitWaiting(t, c, 2)
		last := goDo(h.waiter(t), "RL.ACQUIRE", key, 1, "TIMEOUT", "2500ms")
		waitWaiting(t, c, 3)
		_ = middle.c.Close()
		waitWaiting(t, c, 2)
		for _, ch := range []<-chan timed{first, last} {
			r := await(t, ch, 10*time.Second)
			if g := r.reply(t).Acquire(); !g.Granted {
				t.Errorf("%s: want granted (the waiter ahead of it left)", r.reply(t))
			}
		}
	})
}

// Waiters on one limiter are served in arrival order, by every algorithm.
func TestWaitFIFO(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, tc := range []struct {
		algo, interval string
		extra          []any
	}{
		{"token-bucket", "300ms", nil},
		{"sliding-log", "300ms", nil},
		{"leaky-bucket", "300ms", []any{"BURST", 10}},
		{"fixed-window", "300ms", nil},
		{"sliding-window", "200ms", nil},
	} {
		t.Run(tc.algo, func(t *testing.T) {
			t.Parallel()
			h := h.alone(t) // its own proxy: arrival is told by its count of waiting clients
			key := "fifo:" + tc.algo
			h.Do(t, setRateArgs(key, 1, tc.interval, tc.algo, tc.extra...)...).Equal(int64(1))
			conns := make([]conn, 5)
			for i := range conns {
				conns[i] = h.waiter(t)
			}
			drained(t, conns[0], key)
			chans := make([]<-chan timed, len(conns))
			for i, c := range conns {
				if i > 0 {
					waitArrived(t, h.conn, i, chans[:i]) // the ones before arrived: this one comes after them
				}
				opt := []any{"BLOCK"}
				if i%2 == 1 {
					opt = []any{"TIMEOUT", "5s"}
				}
				chans[i] = goDo(c, append([]any{"RL.ACQUIRE", key, 1}, opt...)...)
			}
			at := make([]time.Time, len(chans))
			for i, ch := range chans {
				r := await(t, ch, 10*time.Second)
				if g := r.reply(t).Acquire(); !g.Granted {
					t.Fatalf("waiter %d: %s: want granted", i, r.reply(t))
				}
				at[i] = r.at
			}
			for i := 1; i < len(at); i++ {
				if !at[i].After(at[i-1]) {
					t.Errorf("waiter %d was granted %v before waiter %d, which came earlier", i, at[i-1].Sub(at[i]), i-1)
				}
			}
		})
	}
}

// At most max_waiters clients wait at once; past that the next waiter is
// told so, and the slots free up (and the booked permits come back) when
// waiters leave.
func TestWaitMaxWaiters(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) { c.MaxWaiters = 2 })
	const key = "max-waiters"
	h.Do(t, "RL.SETRATE", key, 1, "1h").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", key).Granted(0)
	base := decisions(t, h.conn)
	waiters := []*raw{h.raw(t), h.raw(t)}
	for i, w := range waiters {
		w.Send("RL.ACQUIRE", key, "1", "BLOCK") // books the permit i+1 hours ahead
		waitAsked(t, h.conn, i+1, base+i+1)
	}
	const tooMany = "ERR too many waiting clients (max_waiters is 2); try again later"
	h.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", "1s").Err(tooMany)
	h.Do(t, "RL.ACQUIRE", key, 1, "BLOCK").Err(tooMany)
	h.Do(t, "RL.ACQUIRE", key).Denied(0) // not waiting: not limited
	h.Do(t, "PING").Equal("PONG")

	for _, w := range waiters {
		_ = w.c.Close()
	}
	waitWaiting(t, h.conn, 0)
	// Both bookings were given back: the next permit is within the hour
	// again, and a waiter is accepted (and denied at once: an hour is
	// beyond its timeout).
	g := h.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", "1s").Denied(0)
	if g.RetryAfter > time.Hour {
		t.Errorf("after both waiters left, retry_after is %v, want at most 1h (their bookings given back)", g.RetryAfter)
	}
}

// Waiting works on a sharded limiter: the grant comes from some shard,
// no sooner than a drained shard refills.
func TestWaitShards(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range []string{"token-bucket", "sliding-log", "leaky-bucket"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			key := "shards:" + algo
			// 4 per second over 4 shards: each refills 1 per second
			// (leaky-bucket: room for 2 queued per shard, so one can wait).
			extra := []any{"SHARDS", 4}
			if algo == "leaky-bucket" {
				extra = append(extra, "BURST", 8)
			}
			h.Do(t, setRateArgs(key, 4, "1s", algo, extra...)...).Equal(int64(1))
			c := h.waiter(t)
			begun := time.Now()
			for range 100 {
				if c.Do(t, "RL.AVAILABLE", key).Int() == 0 {
					break
				}
				c.Do(t, "RL.ACQUIRE", key).Acquire()
			}
			if n := c.Do(t, "RL.AVAILABLE", key).Int(); n != 0 {
				t.Fatalf("RL.AVAILABLE after draining: %d, want 0", n)
			}
			r := await(t, goDo(c, "RL.ACQUIRE", key, 1, "TIMEOUT", "3s"), 10*time.Second)
			if g := r.reply(t).Acquire(); !g.Granted || g.RetryAfter != 0 {
				t.Fatalf("%s: want granted with retry_after 0 after waiting", r.reply(t))
			}
			// No shard granted before begun, and a shard's permit comes
			// back (its next slot comes) 1s after its grant.
			if held := r.at.Sub(begun); held < time.Second-early {
				t.Errorf("granted %v after draining began: sooner than any shard refills", held)
			}
		})
	}
}

// BLOCK is never answered a denial, even when the permits are further
// off than a limiter books ahead (366 days): a debt of two years on a
// limiter of 1 per 366 days. The waiter waits until a change to the
// limiter lets it in.
func TestWaitBlockFarAhead(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range waitAlgos {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			h := h.alone(t) // its own proxy: the test counts waiting clients
			key := "far:" + algo
			h.Do(t, setRateArgs(key, 1, "366d", algo)...).Equal(int64(1))
			c := h.waiter(t)
			c.Do(t, "RL.CHARGE", key, 2).OK()
			base := decisions(t, c)
			ch := goDo(h.waiter(t), "RL.ACQUIRE", key, 1, "BLOCK")
			// It asked and was told two years: a waiter that had not asked
			// yet would be decided under the change below, and pass.
			waitAsked(t, c, 1, base+1)
			select {
			case r := <-ch:
				t.Fatalf("BLOCK with the permits two years off answered %v %v, want it waiting", r.val, r.err)
			default:
			}
			h.Do(t, setRateArgs(key, 10, "1s", algo)...).Equal(int64(1))
			if g := await(t, ch, slack).reply(t).Acquire(); !g.Granted || g.RetryAfter != 0 {
				t.Fatalf("BLOCK after the limiter changed to 10/1s: %+v, want granted now", g)
			}
		})
	}
}

// deniedAtOnce sends RL.ACQUIRE key 1 TIMEOUT timeout on c and checks the
// permits cannot come in time (denied, retry_after past the timeout) and
// that the denial came at once, well before the timeout.
func deniedAtOnce(t *testing.T, c conn, key string, timeout time.Duration, why string) {
	t.Helper()
	sent := time.Now()
	g := c.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", timeout.Milliseconds()).Acquire()
	took := time.Since(sent)
	if g.Granted || g.RetryAfter <= timeout {
		t.Errorf("TIMEOUT %v %s: %+v, want denied with retry_after > %v", timeout, why, g, timeout)
	}
	if took > timeout/2 {
		t.Errorf("the denial took %v, want it at once (well before the %v timeout)", took, timeout)
	}
}
