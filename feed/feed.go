// Package feed tells this proxy of changes made through any proxy: one
// Pub/Sub connection per backend node, subscribed to the change feed's
// channel. The scripts that change a limiter or a policy announce it
// there themselves (setconf.lua, reset.lua, del.lua, policy.lua), so a
// change costs no extra round trip and reaches every proxy within one.
// The same connection carries other channels a proxy subscribes to (the
// lease waiters' wake-ups), so each node has one subscriber in all.
//
// On a Redis Cluster the pool has one node for the whole cluster, and so
// one subscriber: a PUBLISH on any master (in a script too) reaches the
// subscribers of every node over the cluster bus. (Sharded Pub/Sub would
// need a channel in each script's slot, and a subscriber per slot.)
//
// Pub/Sub loses messages while a connection is down. Whenever the change
// channel is (re)subscribed, listeners get a Resync event: anything may
// have changed meanwhile. Users of the feed also poll now and then (the
// backstop), for a subscriber that cannot subscribe at all.
package feed

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
)

// Kind says what an Event is.
type Kind int

const (
	// Limiter: a limiter's config or state was replaced, or it was deleted.
	Limiter Kind = iota
	// Policies: a policy was set or deleted.
	Policies
	// Resync: announcements may have been missed (the subscriber was down,
	// or has just started): anything may have changed.
	Resync
	// Message: a message on another channel (Subscribe).
	Message
)

// Event is one thing the feed tells its listeners.
type Event struct {
	Kind   Kind
	Name   string // Limiter: its name
	Shards int    // Limiter: how many shards its waiters may be on
	// Message: where it came from, and what it says.
	Node             *backend.Node
	Channel, Payload string
}

// LimiterMessage is the announcement of a change to limiter name of that
// many shards (as setconf.lua writes it).
func LimiterMessage(name string, shards int) string {
	return "c " + strconv.Itoa(shards) + " " + name
}

// parse reads an announcement on the change channel.
func parse(payload string) (Event, bool) {
	if payload == "p" {
		return Event{Kind: Policies}, true
	}
	rest, ok := strings.CutPrefix(payload, "c ")
	n, name, ok2 := strings.Cut(rest, " ")
	shards, err := strconv.Atoi(n)
	if !ok || !ok2 || err != nil || shards < 0 || name == "" { // no name: not one a script wrote
		return Event{}, false
	}
	return Event{Kind: Limiter, Name: name, Shards: shards}, true
}

// Feed is the change feed of one pool of nodes.
type Feed struct {
	channel string
	ping    time.Duration

	mu        sync.Mutex
	subs      map[*backend.Node]*nodeSub
	listeners []func(Event)
	closed    chan struct{}
}

// nodeSub is one node's subscriber.
type nodeSub struct {
	node  *backend.Node
	ps    *backend.Subscription // replaced when found dead
	extra map[string]bool       // channels other than the change channel
	up    bool                  // the change channel is subscribed
}

// Options configure a Feed.
type Options struct {
	// Channel is the change feed's channel (limiter.Keys.Changes).
	Channel string
	// Ping is how long a quiet connection goes before it is pinged; one
	// quiet that long again after the ping is replaced. Defaults to 10s.
	Ping time.Duration
}

// New returns a feed over nodes; Start subscribes.
func New(nodes []*backend.Node, o Options) *Feed {
	if o.Ping <= 0 {
		o.Ping = 10 * time.Second
	}
	f := &Feed{channel: o.Channel, ping: o.Ping, subs: map[*backend.Node]*nodeSub{}, closed: make(chan struct{})}
	for _, n := range nodes {
		f.subs[n] = &nodeSub{node: n, extra: map[string]bool{}}
	}
	return f
}

// Listen has fn told of every event, on the goroutine of the node it
// came from: fn must not block for long (messages wait behind it).
// Listen before Start to be told of the first Resync.
func (f *Feed) Listen(fn func(Event)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners = append(f.listeners, fn)
}

// Start subscribes to every node. A node whose client cannot subscribe
// has no subscriber: its changes are seen by the backstop only.
func (f *Feed) Start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		ps, err := s.node.Subscribe(context.Background(), f.channel)
		if err != nil {
			continue
		}
		s.ps = ps
		go f.read(s)
	}
}

// Subscribe adds channel to node's subscriber; its messages come as
// Message events. It returns once SUBSCRIBE is sent, or an error when the
// node has no subscriber or could not be written to (the subscription is
// kept: it is sent again with the next reconnect).
func (f *Feed) Subscribe(node *backend.Node, channel string) error {
	f.mu.Lock()
	s := f.subs[node]
	if s == nil || s.ps == nil {
		f.mu.Unlock()
		return errNoSubscriber
	}
	s.extra[channel] = true
	ps := s.ps
	f.mu.Unlock()
	return ps.Subscribe(context.Background(), channel)
}

// Unsubscribe drops channel from node's subscriber.
func (f *Feed) Unsubscribe(node *backend.Node, channel string) {
	f.mu.Lock()
	s := f.subs[node]
	if s == nil || s.ps == nil {
		f.mu.Unlock()
		return
	}
	delete(s.extra, channel)
	ps := s.ps
	f.mu.Unlock()
	_ = ps.Unsubscribe(context.Background(), channel)
}

// Up reports how many nodes have the change channel subscribed now, of
// how many.
func (f *Feed) Up() (up, nodes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		if s.up {
			up++
		}
	}
	return up, len(f.subs)
}

// Close drops the subscribers.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.closed:
		return
	default:
	}
	close(f.closed)
	for _, s := range f.subs {
		if s.ps != nil {
			_ = s.ps.Close()
		}
	}
}

var errNoSubscriber = errors.New("feed: the node has no subscriber")

// Backoff bounds the pause between tries of a subscriber that failed.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// read receives node s's messages until Close. go-redis reconnects and
// resubscribes by itself after a connection error; a refused SUBSCRIBE
// (an ACL, say) is sent again after a pause; a connection silent past a
// ping is replaced.
func (f *Feed) read(s *nodeSub) {
	backoff, pinged := minBackoff, false
	for {
		f.mu.Lock()
		ps := s.ps
		f.mu.Unlock()
		msg, err := ps.ReceiveTimeout(context.Background(), f.ping)
		select {
		case <-f.closed:
			return
		default:
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if pinged {
				f.replace(s)
				pinged = false
				continue
			}
			_ = ps.Ping(context.Background())
			pinged = true
			continue
		case err != nil:
			f.setUp(s, false)
			select {
			case <-f.closed:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			var refused redis.Error
			if errors.As(err, &refused) {
				f.resubscribe(s)
			}
			continue
		}
		backoff, pinged = minBackoff, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == f.channel {
				f.setUp(s, true)
				f.emit(Event{Kind: Resync})
			}
		case *redis.Message:
			if m.Channel != f.channel {
				f.emit(Event{Kind: Message, Node: s.node, Channel: m.Channel, Payload: m.Payload})
			} else if e, ok := parse(m.Payload); ok {
				f.emit(e)
			}
		}
	}
}

func (f *Feed) setUp(s *nodeSub, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.up = up
}

// channels lists every channel s is to be subscribed to.
func (f *Feed) channels(s *nodeSub) []string {
	out := []string{f.channel}
	for c := range s.extra {
		out = append(out, c)
	}
	return out
}

// resubscribe sends SUBSCRIBE for every channel of s again.
func (f *Feed) resubscribe(s *nodeSub) {
	f.mu.Lock()
	ps, chans := s.ps, f.channels(s)
	f.mu.Unlock()
	_ = ps.Subscribe(context.Background(), chans...)
}

// replace closes s's connection, silent past a ping, and opens another.
func (f *Feed) replace(s *nodeSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.closed:
		return
	default:
	}
	ps, err := s.node.Subscribe(context.Background(), f.channels(s)...)
	if err != nil {
		return // cannot happen: it subscribed before
	}
	_ = s.ps.Close()
	s.ps, s.up = ps, false
}

func (f *Feed) emit(e Event) {
	f.mu.Lock()
	ls := f.listeners
	f.mu.Unlock()
	for _, fn := range ls {
		fn(e)
	}
}
