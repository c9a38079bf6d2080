package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds `redis-cli --cluster create` and, separately, the wait
// for every node to report a healthy, agreed cluster.
const clusterTimeout = 20 * time.Second

// Cluster is a real Redis Cluster of N masters (no replicas) built with
// `redis-cli --cluster create`.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts masters cluster-enabled redis-servers (at least 3, the
// minimum redis-cli accepts), joins them into a cluster with the 16384 slots
// split between them, and waits until every node reports cluster_state:ok and
// all nodes agree on the slot map. Nodes are killed when the test finishes.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 masters (redis-cli --cluster create refuses fewer), got %d", masters)
	}
	cli := LookPath(t, "redis-cli")
	c := &Cluster{}
	for range masters {
		c.Nodes = append(c.Nodes, startServer(t, options{cluster: true}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: %s %s: %v\n%s%s", cli, strings.Join(args, " "), err, out, c.logTails())
	}

	if err := c.waitHealthy(clusterTimeout); err != nil {
		t.Fatalf("redistest: cluster %v not ready within %v: %v%s", c.Addrs(), clusterTimeout, err, c.logTails())
	}
	return c
}

// Addrs returns the nodes' addresses ("127.0.0.1:port"), in Nodes order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// URLs returns the nodes' URLs ("redis://127.0.0.1:port"), in Nodes order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// Client returns a new go-redis cluster client seeded with all nodes. It is
// closed when the test finishes.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// waitHealthy polls every node until all report a healthy cluster of
// len(Nodes) masters covering all slots, and all report the same slot map.
// It returns the last reason the cluster was not healthy on timeout.
func (c *Cluster) waitHealthy(timeout time.Duration) error {
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{
			Addr:        n.Addr(),
			DialTimeout: time.Second,
			ReadTimeout: time.Second,
			MaxRetries:  -1,
			PoolSize:    1,
		})
		defer clients[i].Close()
	}
	deadline := time.Now().Add(timeout)
	for {
		err := c.checkHealthy(clients)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) checkHealthy(clients []*redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := len(c.Nodes)
	wantInfo := []string{
		"cluster_state:ok",
		"cluster_slots_assigned:16384",
		"cluster_slots_ok:16384",
		fmt.Sprintf("cluster_known_nodes:%d", n),
		fmt.Sprintf("cluster_size:%d", n), // masters serving slots
	}
	var firstMap string
	for i, cl := range clients {
		addr := c.Nodes[i].Addr()
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
		}
		for _, line := range wantInfo {
			if !hasLine(info, line) {
				return fmt.Errorf("%s: CLUSTER INFO has no %q:\n%s", addr, line, info)
			}
		}
		slots, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SLOTS: %w", addr, err)
		}
		m := slotMap(slots)
		if i == 0 {
			firstMap = m
		} else if m != firstMap {
			return fmt.Errorf("slot maps differ: %s says %s, %s says %s", c.Nodes[0].Addr(), firstMap, addr, m)
		}
	}
	return nil
}

// slotMap renders CLUSTER SLOTS as a canonical "start-end=masterID ..."
// string. Node IDs are used rather than addresses, since a node may not yet
// know its own IP.
func slotMap(slots []redis.ClusterSlot) string {
	parts := make([]string, 0, len(slots))
	for _, s := range slots {
		master := ""
		if len(s.Nodes) > 0 {
			master = s.Nodes[0].ID
		}
		parts = append(parts, fmt.Sprintf("%05d-%05d=%s", s.Start, s.End, master))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		b.WriteString(n.logTail())
	}
	return b.String()
}
