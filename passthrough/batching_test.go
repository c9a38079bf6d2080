package passthrough

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// countedConn counts the writes to a backend connection.
type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// While a command is in flight on the shared backend connection, the
// commands other clients send are queued and go to Redis in one write,
// once that command's reply is in: one backend write per round trip, not
// one per client (docs/gateway-speed.md). Redis is stopped (SIGSTOP)
// meanwhile, so no reply can come early.
func TestSharedConnWritesOncePerRoundTrip(t *testing.T) {
	srv := redistest.StartServer(t)
	g, err := New(Options{URL: srv.URL(), MaxPinned: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var mu sync.Mutex
	var replies []string
	reply := func(_ int, f []byte, _ bool) bool {
		mu.Lock()
		replies = append(replies, string(f))
		mu.Unlock()
		return true
	}
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), replies...)
	}
	open := func() *Session { return g.Open(Tenant{}, func([]byte) {}, func() {}, func() {}) }

	first := open()
	first.Forward(2, [][]string{{"DEL", "n"}}, reply)
	redistest.WaitFor(t, func() bool { return len(got()) == 1 })
	c := first.shared[0]
	var writes atomic.Int64
	c.mu.Lock()
	c.nc = countedConn{c.nc, &writes}
	c.mu.Unlock()

	srv.Pause(t)
	first.Forward(2, [][]string{{"GET", "n"}}, reply)
	const clients = 20
	for range clients {
		open().Forward(2, [][]string{{"INCR", "n"}}, reply)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("%d clients' commands sent behind one in flight took %d writes before its reply, want 1 (the one in flight)", clients, n)
	}
	srv.Resume(t)
	redistest.WaitFor(t, func() bool { return len(got()) == 2+clients })
	if n := writes.Load(); n != 2 {
		t.Errorf("backend writes = %d, want 2: the queued commands in one write", n)
	}
	r := got()
	if r[1] != "$-1\r\n" || r[len(r)-1] != ":20\r\n" {
		t.Errorf("replies %q: want GET's nil, then INCR's 1 to 20 in order", r)
	}
	for i := 1; i <= clients; i++ {
		if want := ":" + strconv.Itoa(i) + "\r\n"; r[1+i] != want {
			t.Fatalf("reply %d = %q, want %q (in the order sent)", 1+i, r[1+i], want)
		}
	}
}
