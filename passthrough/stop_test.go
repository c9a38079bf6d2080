package passthrough

import (
	"errors"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// TestStop: Stop answers a command blocked on a pinned connection with
// its reason at once and refuses blocking commands sent after it, while
// other commands are still forwarded.
func TestStop(t *testing.T) {
	srv := redistest.StartServer(t)
	g, err := New(Options{URL: srv.URL(), MaxPinned: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	replies := make(chan string, 4)
	s := g.Open(Tenant{}, func([]byte) {}, func() {}, func() {})
	defer s.Close()
	forward := func(args ...string) {
		s.Forward(2, [][]string{args}, func(_ int, f []byte, _ bool) bool { replies <- string(f); return true })
	}
	forward("BLPOP", "stop:list", "0")
	deadline := time.Now().Add(5 * time.Second)
	for g.Stats().Pinned != 1 || !s.pinnedBlocked() {
		if time.Now().After(deadline) {
			t.Fatal("BLPOP was not sent")
		}
		time.Sleep(time.Millisecond)
	}
	g.Stop(errors.New("rlproxy is shutting down"))
	want := "-ERR rlproxy is shutting down\r\n"
	select {
	case got := <-replies:
		if got != want {
			t.Fatalf("blocked BLPOP answered %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked BLPOP was not answered")
	}
	if n := g.Stats().Pinned; n != 0 {
		t.Fatalf("%d connections still pinned", n)
	}
	s2 := g.Open(Tenant{}, func([]byte) {}, func() {}, func() {})
	defer s2.Close()
	s2.Forward(2, [][]string{{"BLPOP", "stop:list", "0"}, {"SET", "stop:k", "v"}}, func(_ int, f []byte, _ bool) bool { replies <- string(f); return true })
	for _, want := range []string{want, "+OK\r\n"} {
		if got := <-replies; got != want {
			t.Fatalf("after Stop: %q, want %q", got, want)
		}
	}
}

// pinnedBlocked reports whether the session's pinned connection awaits
// a blocking command's reply.
func (s *Session) pinnedBlocked() bool {
	s.mu.Lock()
	pin := s.pin
	s.mu.Unlock()
	return pin != nil && pin.blocked()
}
