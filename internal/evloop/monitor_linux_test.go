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

	holding := func() bool {
		before := keeper.holds.Load()
		time.Sleep(60 * time.Millisecond) // the keeper looks every 20 ms when idle, 10 ms when holding
		return keeper.holds.Load() > before
	}
	if holding() {
		t.Fatal("the keeper holds its P with no loop under load")
	}
	s.busy.Store(true)
	if !holding() {
		t.Fatal("the keeper does not hold its P with a loop under load")
	}
	var m runtime.MemStats
	for range 20 {
		runtime.GC()
		runtime.ReadMemStats(&m)
	}
	s.busy.Store(false)
	time.Sleep(30 * time.Millisecond)
	if holding() {
		t.Fatal("the keeper still holds its P once the load is gone")
	}
}
