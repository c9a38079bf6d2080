package server

import (
	"runtime/debug"
	"sync"
	"time"
)

// Limits bound what clients may hold of the proxy. They apply live: a
// Reload changes them for every connection at once.
type Limits struct {
	// MaxClients is the most client connections at once (both listeners);
	// one more is answered "ERR max number of clients reached" and closed.
	MaxClients int
	// Timeout closes a connection idle this long; 0 means never. A client
	// with a request in progress (waiting in RL.ACQUIRE) is not idle.
	Timeout time.Duration
	// MaxRequestBytes bounds one command of an authenticated client, as
	// on the wire.
	MaxRequestBytes int64
	// MaxNameLength bounds limiter names and client names, in bytes.
	MaxNameLength int
}

// DefaultLimits are config.Default()'s limits, for servers built without
// them (tests).
var DefaultLimits = Limits{MaxClients: 10000, MaxRequestBytes: 1 << 20, MaxNameLength: 512}

// Before AUTH, when a password is required, a client may send what Redis
// allows an unauthenticated client since 6.2.6 (CVE-2021-32675): commands
// of at most preAuthArgs arguments of at most preAuthBulk bytes each.
const (
	preAuthArgs = 10
	preAuthBulk = 16 * 1024
)

// bigRequest is the size from which a request's memory is handed back to
// the operating system once it is garbage (releaseMemory).
const bigRequest = 256 * 1024

// memoryRelease returns the memory of big requests to the operating system
// promptly: the Go runtime would keep it (and the process's RSS) until its
// next collection and scavenge, minutes later when the heap is small. One
// release (a full collection) runs at most every releaseEvery.
type memoryRelease struct {
	mu      sync.Mutex
	pending bool
	last    time.Time
}

const releaseEvery = time.Second

// soon schedules a release: a little later, so that the buffers of the
// request that asked for it are garbage by then.
func (m *memoryRelease) soon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending {
		return
	}
	m.pending = true
	wait := max(100*time.Millisecond, releaseEvery-time.Since(m.last))
	time.AfterFunc(wait, func() {
		debug.FreeOSMemory()
		m.mu.Lock()
		m.pending, m.last = false, time.Now()
		m.mu.Unlock()
	})
}
