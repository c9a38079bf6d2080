package backend

import (
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Embedded is an in-memory Redis (miniredis) in this process: the
// zero-setup backend for trying rlproxy out. It is not for production:
// state lives only as long as the process.
type Embedded struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	wg   sync.WaitGroup
}

// clockTick is how often embedded key TTLs are advanced to wall time.
const clockTick = 20 * time.Millisecond

// StartEmbedded starts the in-memory server on a free loopback port.
// miniredis only expires keys when told time has passed, so a goroutine
// advances its clock with wall time; otherwise limiters would never refill.
func StartEmbedded() (*Embedded, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	e := &Embedded{m: m, stop: make(chan struct{})}
	e.wg.Add(1)
	go e.runClock()
	return e, nil
}

func (e *Embedded) runClock() {
	defer e.wg.Done()
	t := time.NewTicker(clockTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			e.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr is the embedded server's loopback address.
func (e *Embedded) Addr() string { return e.m.Addr() }

// Close stops the clock and the server.
func (e *Embedded) Close() {
	close(e.stop)
	e.wg.Wait()
	e.m.Close()
}
