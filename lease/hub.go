package lease

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/backend"
)

// hub delivers wake-ups: one Pub/Sub connection per backend node,
// subscribed to the channels of the sub-limiters this proxy has waiters
// on. concurrency.lua PUBLISHes the tickets of the waiters whose permits
// fit (after a return, an expiry, a waiter leaving); "*" wakes them all.
// Each channel keeps its local waiters in arrival order: the first one
// also sleeps only until the earliest lease expires, so an expiry is
// noticed without anyone returning anything.
type hub struct {
	mu    sync.Mutex
	nodes map[*backend.Node]*nodeSub
}

type nodeSub struct {
	ps       *backend.Subscription // nil: the node cannot subscribe (timers only)
	channels map[string]*local
}

// local is this proxy's waiters on one channel, in arrival order.
type local struct {
	waiters []*waiter
	ready   chan struct{} // closed once subscribed
	idle    *time.Timer   // set while no one waits: unsubscribes when it fires
}

// waiter is one client waiting in RL.LEASE.
type waiter struct {
	ticket string
	wake   chan struct{} // buffered: a wake-up is never lost while the waiter is busy
}

func newHub() *hub { return &hub{nodes: map[*backend.Node]*nodeSub{}} }

// join adds w behind the local waiters on channel, subscribing to it
// when this proxy is not yet. It returns nil when subscribed, or else a
// channel closed once subscribed (another waiter is subscribing): a waiter
// that asked before then asks once more, for a message sent meanwhile was
// not received.
func (h *hub) join(node *backend.Node, channel string, w *waiter) <-chan struct{} {
	h.mu.Lock()
	ns := h.nodes[node]
	if ns == nil {
		ns = &nodeSub{channels: map[string]*local{}}
		if ps, err := node.Subscribe(context.Background()); err == nil {
			ns.ps = ps
			go h.listen(ns)
		}
		h.nodes[node] = ns
	}
	l := ns.channels[channel]
	subscribe := false
	if l == nil {
		l = &local{ready: make(chan struct{})}
		ns.channels[channel] = l
		if ns.ps == nil {
			close(l.ready) // timers only
		} else {
			subscribe = true
		}
	}
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	l.waiters = append(l.waiters, w)
	ps := ns.ps
	h.mu.Unlock()
	if subscribe {
		// Outside the lock: messages keep flowing to the others meanwhile.
		// A failed subscribe only costs promptness: the waiters' timers
		// still run (go-redis resubscribes after reconnecting).
		_ = ps.Subscribe(context.Background(), channel)
		close(l.ready)
	}
	select {
	case <-l.ready:
		return nil
	default:
		return l.ready
	}
}

// leave removes w. The next local waiter becomes the head: it is woken to
// take over the head's timer. A channel no one waits on is unsubscribed
// after idleUnsubscribe (waiters come and go; resubscribing for each
// would lose the messages sent in between).
func (h *hub) leave(node *backend.Node, channel string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.nodes[node]
	if ns == nil || ns.channels[channel] == nil {
		return
	}
	l := ns.channels[channel]
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i:i], l.waiters[i+1:]...)
			if i == 0 && len(l.waiters) > 0 {
				l.waiters[0].poke()
			}
			break
		}
	}
	if len(l.waiters) > 0 || ns.ps == nil || l.idle != nil {
		if len(l.waiters) == 0 && ns.ps == nil {
			delete(ns.channels, channel)
		}
		return
	}
	l.idle = time.AfterFunc(idleUnsubscribe, func() {
		<-l.ready
		h.mu.Lock()
		defer h.mu.Unlock()
		if ns.channels[channel] != l || len(l.waiters) > 0 || h.nodes[node] != ns {
			return
		}
		delete(ns.channels, channel)
		_ = ns.ps.Unsubscribe(context.Background(), channel)
	})
}

// idleUnsubscribe is how long a channel stays subscribed with no waiter.
const idleUnsubscribe = 30 * time.Second

// head reports whether w is the first local waiter on channel.
func (h *hub) head(node *backend.Node, channel string, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.nodes[node]
	if ns == nil || ns.channels[channel] == nil {
		return false
	}
	l := ns.channels[channel].waiters
	return len(l) > 0 && l[0] == w
}

// wakeAll wakes every local waiter on channel.
func (h *hub) wakeAll(node *backend.Node, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ns := h.nodes[node]; ns != nil && ns.channels[channel] != nil {
		for _, w := range ns.channels[channel].waiters {
			w.poke()
		}
	}
}

func (h *hub) listen(ns *nodeSub) {
	for msg := range ns.ps.Channel() {
		h.deliver(ns, msg.Channel, msg.Payload)
	}
}

// deliver wakes the waiters a message names ("*": all of them).
func (h *hub) deliver(ns *nodeSub, channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ns.channels[channel] == nil {
		return
	}
	list := ns.channels[channel].waiters
	if payload == "*" {
		for _, w := range list {
			w.poke()
		}
		return
	}
	for _, t := range strings.Fields(payload) {
		for _, w := range list {
			if w.ticket == t {
				w.poke()
			}
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ns := range h.nodes {
		for _, l := range ns.channels {
			if l.idle != nil {
				l.idle.Stop()
			}
		}
		if ns.ps != nil {
			_ = ns.ps.Close()
		}
	}
	h.nodes = map[*backend.Node]*nodeSub{}
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
