//go:build linux

package evloop

import (
	"runtime"
	"testing"
)

// The P held for the monitor must not keep the world from stopping: a
// garbage collection needs the holder to yield. A wait the preemption
// signal does not end (a restarted read) or a holder that never yields
// hangs here until go test's -timeout: with the world stopped, no timer
// of the test itself could fire.
func TestKeepMonitorAwakeLetsTheWorldStop(t *testing.T) {
	keepMonitorAwake()
	procs := runtime.GOMAXPROCS(0)
	keepMonitorAwake() // once per process
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Fatalf("GOMAXPROCS %d after a second call, want %d", got, procs)
	}
	var m runtime.MemStats
	for range 20 {
		runtime.GC()
		runtime.ReadMemStats(&m)
	}
}
