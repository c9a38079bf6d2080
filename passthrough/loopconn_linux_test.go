package passthrough

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rlproxy/rlproxy/internal/evloop"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// loopGateway is a gateway whose shared connections an event loop reads.
func loopGateway(t *testing.T, srv *redistest.Server) *Gateway {
	t.Helper()
	l, err := evloop.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	g, err := New(Options{URL: srv.URL(), MaxPinned: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	g.ReadInLoop(l)
	return g
}

// forwardWait forwards calls on s and returns their replies (streamed
// parts joined), in order.
func forwardWait(s *Session, calls ...[]string) []string {
	var mu sync.Mutex
	got := make([]strings.Builder, len(calls))
	done := make(chan struct{}, len(calls))
	s.Forward(2, calls, func(i int, f []byte, more bool) bool {
		mu.Lock()
		got[i].Write(f)
		mu.Unlock()
		if !more {
			done <- struct{}{}
		}
		return true
	})
	for range calls {
		<-done
	}
	out := make([]string, len(calls))
	for i := range got {
		out[i] = got[i].String()
	}
	return out
}

// With the loop reading the shared connection, clients' commands run at
// once get every reply whole and in order: small ones, ones bigger than
// the connection's read buffer (read by a goroutine, which gives the
// connection back) and streamed ones (1 MB and more).
func TestLoopReadsSharedConn(t *testing.T) {
	srv := redistest.StartServer(t)
	g := loopGateway(t, srv)
	open := func() *Session { return g.Open(Tenant{}, func([]byte) {}, func() {}, func() {}) }
	sizes := []int{5, 40 << 10, 2 << 20}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for client := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := open()
			defer s.Close()
			for round := range 5 {
				var calls [][]string
				var want []string
				for i, size := range sizes {
					k := fmt.Sprintf("k%d:%d", client, i)
					v := strings.Repeat(string(rune('a'+client)), size-1) + fmt.Sprint(round%10)
					calls = append(calls, []string{"SET", k, v}, []string{"GET", k}, []string{"INCR", fmt.Sprint("n", client)})
					want = append(want, "+OK\r\n", fmt.Sprintf("$%d\r\n%s\r\n", size, v), fmt.Sprintf(":%d\r\n", round*len(sizes)+i+1))
				}
				got := forwardWait(s, calls...)
				for i := range want {
					if got[i] != want[i] {
						errs <- fmt.Errorf("client %d round %d reply %d: %.40q (%d bytes), want %.40q (%d bytes)", client, round, i, got[i], len(got[i]), want[i], len(want[i]))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c, err := g.sharedConnAt(srv.Addr(), Tenant{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.loop == nil {
		t.Fatal("the shared connection is not read by the loop")
	}
	// The goroutine that read the last big reply hands it out before it
	// gives the connection back: soon after, not before.
	redistest.WaitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inLoop
	})
}

// When Redis closes a shared connection the loop reads, its commands are
// answered an error and the next ones go on a new connection, read by
// the loop too.
func TestLoopSharedConnBroken(t *testing.T) {
	srv := redistest.StartServer(t)
	g := loopGateway(t, srv)
	s := g.Open(Tenant{}, func([]byte) {}, func() {}, func() {})
	defer s.Close()
	if got := forwardWait(s, []string{"SET", "a", "1"}); got[0] != "+OK\r\n" {
		t.Fatalf("SET: %q", got[0])
	}
	old, err := g.sharedConnAt(srv.Addr(), Tenant{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t).Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return old.err != nil && !old.inLoop
	})
	if got := forwardWait(s, []string{"GET", "a"}); got[0] != "$1\r\n1\r\n" {
		t.Fatalf("GET after the connection broke: %q", got[0])
	}
	c, err := g.sharedConnAt(srv.Addr(), Tenant{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c == old || c.loop == nil {
		t.Fatalf("after the break: a new connection %v, read by the loop %v", c != old, c.loop != nil)
	}
}
