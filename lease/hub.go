package lease

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
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
	sub      subscriber
	ps       *redis.PubSub // nil: the node's client cannot subscribe (timers only)
	channels map[string][]*waiter
}

// waiter is one client waiting in RL.LEASE.
type waiter struct {
	ticket string
	wake   chan struct{} // buffered: a wake-up is never lost while the waiter is busy
}

type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Close() error
}

// subscriberOf returns a client of its own for a node's Pub/Sub
// connection: the node's client bounds every read by the backend timeout
// (and may busy-poll), where a subscriber waits for messages without end.
func subscriberOf(node *backend.Node) subscriber {
	switch c := node.Client().(type) {
	case *redis.Client:
		o := *c.Options()
		o.ReadTimeout, o.Dialer, o.PoolSize, o.MinIdleConns, o.MaxRetries = -1, nil, 1, 0, 0
		return redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *c.Options()
		o.ReadTimeout, o.Dialer, o.MaxRetries = -1, nil, 0
		return redis.NewClusterClient(&o)
	}
	return nil
}

func newHub() *hub { return &hub{nodes: map[*backend.Node]*nodeSub{}} }

// join adds w behind the local waiters on channel (subscribing to it when
// w is the first).
func (h *hub) join(ctx context.Context, node *backend.Node, channel string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.nodes[node]
	if ns == nil {
		ns = &nodeSub{channels: map[string][]*waiter{}}
		if c := subscriberOf(node); c != nil {
			ns.sub = c
			ns.ps = c.Subscribe(ctx)
			go h.listen(ns)
		}
		h.nodes[node] = ns
	}
	if len(ns.channels[channel]) == 0 && ns.ps != nil {
		// A failed subscribe only costs promptness: the waiter's timers
		// still run (go-redis resubscribes after reconnecting).
		_ = ns.ps.Subscribe(ctx, channel)
	}
	ns.channels[channel] = append(ns.channels[channel], w)
}

// leave removes w; the channel is unsubscribed once no one waits on it.
// The next local waiter becomes the head: it is woken to take over the
// head's timer.
func (h *hub) leave(node *backend.Node, channel string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.nodes[node]
	if ns == nil {
		return
	}
	list := ns.channels[channel]
	for i, x := range list {
		if x == w {
			list = append(list[:i:i], list[i+1:]...)
			if i == 0 && len(list) > 0 {
				list[0].poke()
			}
			break
		}
	}
	if len(list) > 0 {
		ns.channels[channel] = list
		return
	}
	delete(ns.channels, channel)
	if ns.ps != nil {
		_ = ns.ps.Unsubscribe(context.Background(), channel)
	}
}

// head reports whether w is the first local waiter on channel.
func (h *hub) head(node *backend.Node, channel string, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.nodes[node]
	return ns != nil && len(ns.channels[channel]) > 0 && ns.channels[channel][0] == w
}

// wakeAll wakes every local waiter on channel.
func (h *hub) wakeAll(node *backend.Node, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ns := h.nodes[node]; ns != nil {
		for _, w := range ns.channels[channel] {
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
	list := ns.channels[channel]
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
		if ns.ps != nil {
			_ = ns.ps.Close()
			_ = ns.sub.Close()
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
