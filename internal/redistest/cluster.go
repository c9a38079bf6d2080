package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds `redis-cli --cluster create` and, separately, the wait
// for every node to report a healthy, agreed cluster.
const clusterTimeout = 20 * time.Second

// Cluster is a real Redis Cluster built with `redis-cli --cluster create`.
// Its nodes' timeout (cluster-node-timeout) is 2s: a replica takes over
// from a failed master about 3s after it stops answering.
type Cluster struct {
	Nodes   []*Server
	masters int // nodes serving slots when the cluster was made
}

// StartCluster starts masters cluster-enabled redis-servers (at least 3, the
// minimum redis-cli accepts), joins them into a cluster with the 16384 slots
// split between them, and waits until every node reports cluster_state:ok and
// all nodes agree on the slot map. Nodes are killed when the test finishes.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, masters, 0)
}

// StartClusterWithReplicas is StartCluster with replicas replicas per
// master (redis-cli picks which), and waits as well until every replica
// has synced with its master (one that never did would not take over).
func StartClusterWithReplicas(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 masters (redis-cli --cluster create refuses fewer), got %d", masters)
	}
	cli := LookPath(t, "redis-cli")
	c := &Cluster{masters: masters}
	for range masters * (1 + replicas) {
		c.Nodes = append(c.Nodes, startServer(t, options{cluster: true}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
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
	wantInfo := []string{
		"cluster_state:ok",
		"cluster_slots_assigned:16384",
		"cluster_slots_ok:16384",
		fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes)),
		fmt.Sprintf("cluster_size:%d", c.masters), // masters serving slots
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
		if repl, err := cl.Info(ctx, "replication").Result(); err != nil {
			return fmt.Errorf("%s: INFO replication: %w", addr, err)
		} else if hasLine(repl, "role:slave") && !hasLine(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica not synced with its master:\n%s", addr, repl)
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

// SlotMaster returns the address of the master serving slot, as the
// node at index asked sees it (CLUSTER SLOTS), or "" if no master does.
func (c *Cluster) SlotMaster(ctx context.Context, asked, slot int) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[asked].Addr(), MaxRetries: -1, PoolSize: 1})
	defer cl.Close()
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", nil
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		b.WriteString(n.logTail())
	}
	return b.String()
}
