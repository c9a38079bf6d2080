//go:build linux

package evloop

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// load is a Spinner that never polls and is as busy as told.
type load struct{ busy atomic.Bool }

func (*load) Spin(func() bool) bool { return false }
func (s *load) Busy() bool          { return s.busy.Load() }

// The keeper holds its P only while a loop is under load, and the held
// P must not keep the world from stopping: a garbage collection needs
// the holder to yield. A wait the preemption signal does not end (a
// restarted read) or a holder that never yields hangs here until go
// test's -timeout: with the world stopped, no timer of the test itself
// could fire.
func TestMonitorKeeper(t *testing.T) {
	s := &load{}
	l := &Loop{spin: s}
	keepMonitorAwake(l)
	defer forget(l)
	procs := runtime.GOMAXPROCS(0)
	keepMonitorAwake(&Loop{}) // started once per process
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Fatalf("GOMAXPROCS %d after a second loop, want %d", got, procs)
	}

	// holding reports whether the keeper waits holding its P within
	// d: it looks every 20 ms when idle, every 10 ms when holding.
	holding := func(d time.Duration) bool {
		before := keeper.holds.Load()
		for end := time.Now().Add(d); time.Now().Before(end); {
			if keeper.holds.Load() > before {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	if holding(100 * time.Millisecond) {
		t.Fatal("the keeper holds its P with no loop under load")
	}
	s.busy.Store(true)
	if !holding(5 * time.Second) {
		t.Fatal("the keeper does not hold its P with a loop under load")
	}
	var m runtime.MemStats
	for range 20 {
		runtime.GC()
		runtime.ReadMemStats(&m)
	}
	s.busy.Store(false)
	time.Sleep(100 * time.Millisecond) // a wait under way ends within 10 ms
	if holding(100 * time.Millisecond) {
		t.Fatal("the keeper still holds its P once the load is gone")
	}
}

// A loop without a Spinner (busy_poll off, or Go on one CPU) has nothing
// to tell the keeper of load: it is not watched, and GOMAXPROCS is not
// raised for it.
func TestLoopWithoutSpinnerLeavesTheKeeper(t *testing.T) {
	l, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	keeper.mu.Lock()
	_, watched := keeper.loops[l]
	keeper.mu.Unlock()
	if watched {
		t.Fatal("a loop without a Spinner is watched by the keeper")
	}
}
