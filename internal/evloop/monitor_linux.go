//go:build linux

package evloop

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The runtime's monitor thread (sysmon) sleeps deeply whenever every P
// is idle; the next system call wakes it, and it then polls every 20 µs
// for a millisecond before it backs off again. Under load a loop parks
// between bursts of requests and leaves every P idle many times a
// second, so the monitor was woken as often: about 15% of a forwarding
// gateway's CPU, and a wake-up (a futex call, a switch) on the path of
// the system call that woke it. While a loop is under load, the monitor
// keeper holds one P, so the monitor never sleeps deeply and runs at its
// slow period (10 ms) instead: GET and SET through the gateway went from
// 0.78-0.88x twemproxy's throughput to 0.90-1.03x (docs/performance.md).
//
// The P is held by a goroutine blocked in epoll_wait on an empty epoll
// set, made as a raw system call: the runtime does not see it as a
// system call, so it neither takes the P away nor wakes the monitor.
// GOMAXPROCS is raised by one, so the rest of the program keeps as many
// Ps as before; the held one costs no CPU. epoll_wait is never restarted
// after a signal (signal(7)), so the runtime's preemption signal (a
// stop-the-world, or the monitor's 10 ms check) ends the wait, and the
// goroutine yields before it waits again; the wait's own 10 ms bound
// does the same where that signal is off (GODEBUG=asyncpreemptoff=1).
//
// At light load (no loop has more than one request in progress) the
// keeper sleeps instead: the held P then cost a lone request's reply
// 20-30 µs (more threads woken per request), and the monitor's deep
// sleep costs little when requests come one at a time.
var keeper struct {
	start sync.Once
	mu    sync.Mutex
	loops map[*Loop]struct{}
	holds atomic.Int64 // waits holding the P so far (tests)
}

// keepMonitorAwake has the keeper watch l, a loop with a Spinner
// (started, and GOMAXPROCS raised, once per process).
func keepMonitorAwake(l *Loop) {
	keeper.start.Do(startKeeper)
	keeper.mu.Lock()
	keeper.loops[l] = struct{}{}
	keeper.mu.Unlock()
}

// forget stops watching l (closed).
func forget(l *Loop) {
	keeper.mu.Lock()
	delete(keeper.loops, l)
	keeper.mu.Unlock()
}

// underLoad reports whether a loop has more than one request in progress.
func underLoad() bool {
	keeper.mu.Lock()
	defer keeper.mu.Unlock()
	for l := range keeper.loops {
		if l.spin != nil && l.spin.Busy() {
			return true
		}
	}
	return false
}

func startKeeper() {
	keeper.mu.Lock()
	keeper.loops = map[*Loop]struct{}{}
	keeper.mu.Unlock()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return // the loop works without it, at the cost above
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	go func() {
		var ev [1]unix.EpollEvent
		for {
			if !underLoad() {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			keeper.holds.Add(1)
			unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep), uintptr(unsafe.Pointer(&ev[0])), 1, 10, 0, 0)
			runtime.Gosched()
		}
	}()
}
