//go:build linux

package evloop

import (
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The runtime's monitor thread (sysmon) sleeps deeply whenever every P
// is idle; the next system call wakes it, and it then polls every 20 µs
// for a millisecond before it backs off again. A loop that parks between
// bursts of requests leaves every P idle many times a second, so the
// monitor was woken as often: about 15% of a forwarding gateway's CPU,
// and a wake-up (a futex call, a switch) on the path of the system call
// that woke it. keepMonitorAwake keeps one P busy for the life of the
// process, so the monitor never sleeps deeply and runs at its slow
// period (10 ms) instead: GET and SET through the gateway went from
// 0.84-0.87x twemproxy's throughput to 1.07-1.13x (docs/performance.md).
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
var keepMonitorAwake = sync.OnceFunc(func() {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return // the loop works without it, at the cost above
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	go func() {
		var ev [1]unix.EpollEvent
		for {
			unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep), uintptr(unsafe.Pointer(&ev[0])), 1, 10, 0, 0)
			runtime.Gosched()
		}
	}()
})
