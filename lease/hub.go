package lease

import (
	"strings"
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/feed"
)

// hub delivers wake-ups over the change feed's subscriber on each node
// (package feed), subscribed to the channels of the sub-limiters this
// proxy has waiters on. concurrency.lua PUBLISHes the tickets of the
// waiters whose permits fit (after a return, an expiry, a waiter
// leaving); "*" wakes them all. Each channel keeps its local waiters in
// arrival order: the first one also sleeps only until the earliest lease
// expires, so an expiry is noticed without anyone returning anything.
type hub struct {
	feed  *feed.Feed
	mu    sync.Mutex
	nodes map[*backend.Node]map[string]*local // by node, by channel
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

func newHub(f *feed.Feed) *hub {
	h := &hub{feed: f, nodes: map[*backend.Node]map[string]*local{}}
	f.Listen(h.onFeed)
	return h
}

// join adds w behind the local waiters on channel, subscribing to it
// when this proxy is not yet. It returns nil when subscribed, or else a
// channel closed once subscribed (another waiter is subscribing): a waiter
// that asked before then asks once more, for a message sent meanwhile was
// not received.
func (h *hub) join(node *backend.Node, channel string, w *waiter) <-chan struct{} {
	h.mu.Lock()
	chans := h.nodes[node]
	if chans == nil {
		chans = map[string]*local{}
		h.nodes[node] = chans
	}
	l := chans[channel]
	subscribe := l == nil
	if subscribe {
		l = &local{ready: make(chan struct{})}
		chans[channel] = l
	}
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	l.waiters = append(l.waiters, w)
	h.mu.Unlock()
	if subscribe {
		// Outside the lock: messages keep flowing to the others meanwhile.
		// A failed subscribe (or a node without a subscriber) only costs
		// promptness: the waiters' timers still run.
		_ = h.feed.Subscribe(node, channel)
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
	chans := h.nodes[node]
	l := chans[channel]
	if l == nil {
		return
	}
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i:i], l.waiters[i+1:]...)
			if i == 0 && len(l.waiters) > 0 {
				l.waiters[0].poke()
			}
			break
		}
	}
	if len(l.waiters) > 0 || l.idle != nil {
		return
	}
	l.idle = time.AfterFunc(idleUnsubscribe, func() {
		<-l.ready
		h.mu.Lock()
		if chans[channel] != l || len(l.waiters) > 0 || h.nodes[node] == nil {
			h.mu.Unlock()
			return
		}
		delete(chans, channel)
		h.mu.Unlock()
		h.feed.Unsubscribe(node, channel)
	})
}

// idleUnsubscribe is how long a channel stays subscribed with no waiter.
const idleUnsubscribe = 30 * time.Second

// head reports whether w is the first local waiter on channel.
func (h *hub) head(node *backend.Node, channel string, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.nodes[node][channel]
	return l != nil && len(l.waiters) > 0 && l.waiters[0] == w
}

// wakeAll wakes every local waiter on channel.
func (h *hub) wakeAll(node *backend.Node, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.nodes[node][channel]; l != nil {
		for _, w := range l.waiters {
			w.poke()
		}
	}
}

// wakeEveryone wakes every local waiter (the change feed resynced).
func (h *hub) wakeEveryone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chans := range h.nodes {
		for _, l := range chans {
			for _, w := range l.waiters {
				w.poke()
			}
		}
	}
}

// onFeed delivers the messages of the hub's channels.
func (h *hub) onFeed(e feed.Event) {
	if e.Kind == feed.Message {
		h.deliver(e.Node, e.Channel, e.Payload)
	}
}

// deliver wakes the waiters a message names ("*": all of them).
func (h *hub) deliver(node *backend.Node, channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.nodes[node][channel]
	if l == nil {
		return
	}
	if payload == "*" {
		for _, w := range l.waiters {
			w.poke()
		}
		return
	}
	for _, t := range strings.Fields(payload) {
		for _, w := range l.waiters {
			if w.ticket == t {
				w.poke()
			}
		}
	}
}

// close stops the idle timers (the feed's subscribers are the limiters').
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chans := range h.nodes {
		for _, l := range chans {
			if l.idle != nil {
				l.idle.Stop()
			}
		}
	}
	h.nodes = map[*backend.Node]map[string]*local{}
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
