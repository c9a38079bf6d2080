package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Subscription is a Pub/Sub connection to a node, on a client of its own
// (closed with it).
type Subscription struct {
	*redis.PubSub
	client interface{ Close() error }
}

// Close unsubscribes and closes the connection.
func (s *Subscription) Close() error {
	return errors.Join(s.PubSub.Close(), s.client.Close())
}

// Subscribe opens a Pub/Sub connection to the node, subscribed to
// channels (more can be added with its Subscribe). It does not use the
// node's client: that one bounds every read by the backend timeout (and
// may busy-poll), where a subscriber waits for messages without end.
// go-redis resubscribes by itself after a reconnect.
func (n *Node) Subscribe(ctx context.Context, channels ...string) (*Subscription, error) {
	switch c := n.client.(type) {
	case *redis.Client:
		o := *c.Options()
		o.ReadTimeout, o.Dialer, o.PoolSize, o.MinIdleConns, o.MaxRetries = -1, nil, 1, 0, 0
		// Its own, not the node client's (whose handlers are registered:
		// go-redis would log that it cannot register them again).
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		sub := redis.NewClient(&o)
		return &Subscription{PubSub: sub.Subscribe(ctx, channels...), client: sub}, nil
	case *redis.ClusterClient:
		o := *c.Options()
		o.ReadTimeout, o.Dialer, o.MaxRetries = -1, nil, 0
		sub := redis.NewClusterClient(&o)
		return &Subscription{PubSub: sub.Subscribe(ctx, channels...), client: sub}, nil
	}
	return nil, fmt.Errorf("backend %s: its client cannot subscribe", n.name)
}

// Publish sends message on channel through the node.
func (n *Node) Publish(ctx context.Context, channel string, message any) error {
	bounded, cancel := n.bound(ctx)
	defer cancel()
	return n.do(ctx, func() error { return n.client.Publish(bounded, channel, message).Err() })
}
