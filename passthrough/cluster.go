package passthrough

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/keyslot"
)

// slots is a Redis Cluster's slot map: which primary serves each slot.
// It is loaded from CLUSTER SLOTS at start and again after a MOVED.
type slots struct {
	mu     sync.RWMutex
	owner  [16384]string // "host:port"; "" when unknown
	any    string        // a primary, for keyless commands
	seeds  []string
	reload sync.Mutex // one CLUSTER SLOTS at a time
}

// load reads CLUSTER SLOTS from the first seed (or known node) that answers.
func (g *Gateway) loadSlots(ctx context.Context) error {
	m := g.cluster
	m.reload.Lock()
	defer m.reload.Unlock()
	var errs []error
	for _, addr := range m.candidates() {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: g.dial.username, Password: g.dial.password,
			TLSConfig: g.dial.tls, DialTimeout: g.dial.timeout, ReadTimeout: g.dial.timeout, MaxRetries: -1})
		ranges, err := c.ClusterSlots(ctx).Result()
		c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		m.mu.Lock()
		m.owner = [16384]string{}
		for _, r := range ranges {
			if len(r.Nodes) == 0 {
				continue
			}
			for s := r.Start; s <= r.End && s < 16384; s++ {
				m.owner[s] = r.Nodes[0].Addr
			}
			m.any = r.Nodes[0].Addr
		}
		m.mu.Unlock()
		return nil
	}
	return fmt.Errorf("passthrough: no cluster node answered CLUSTER SLOTS: %w", errors.Join(errs...))
}

// candidates are the nodes to ask for the slot map: the known primaries,
// then the seeds.
func (m *slots) candidates() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, a := range m.owner {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range m.seeds {
		if !seen[a] {
			out = append(out, a)
		}
	}
	return out
}

// node returns the primary of a slot (-1: any primary).
func (m *slots) node(slot int) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if slot < 0 || m.owner[slot] == "" {
		return m.any
	}
	return m.owner[slot]
}

// moved records a MOVED answer: the slot is now served by addr.
func (m *slots) moved(slot int, addr string) {
	m.mu.Lock()
	m.owner[slot] = addr
	m.mu.Unlock()
}

// keyspaceWide are the keyless commands that would need every node.
var keyspaceWide = map[string]bool{"KEYS": true, "SCAN": true, "DBSIZE": true, "RANDOMKEY": true, "FLUSHDB": true, "FLUSHALL": true}

// clusterOnly are the commands of connection state rlproxy does not
// support in cluster mode (a cluster has database 0 only; invalidations
// would come from one node of many).
// CONFIG too: it would set or read one node of many.
var clusterOnly = map[string]bool{"SELECT": true, "CONFIG": true}

var errCrossSlot = errorFrame("CROSSSLOT Keys in request don't hash to the same slot")

// route returns the slot a command (naming keys) goes to in cluster
// mode (-1: any primary), or the error frame that answers it.
func route(cmd *command, args, keys []string) (int, []byte) {
	if cmd.noCluster || (cmd.name == "CLIENT" && len(args) > 1 && strings.EqualFold(args[1], "TRACKING")) {
		what := strings.ToLower(args[0])
		if cmd.name == "CLIENT" {
			what = "client|tracking"
		}
		return 0, errorFrame("ERR '" + what + "' is not supported by rlproxy in cluster mode")
	}
	if cmd.name == "SSUBSCRIBE" || cmd.name == "SUNSUBSCRIBE" {
		keys = args[1:] // shard channels hash like keys
	}
	if len(keys) == 0 {
		return -1, nil
	}
	slot := keyslot.Of(keys[0])
	for _, k := range keys[1:] {
		if keyslot.Of(k) != slot {
			return 0, errCrossSlot
		}
	}
	return slot, nil
}

// redirect reads a MOVED or ASK error: the slot and the node to ask.
func redirect(f []byte) (ask bool, slot int, addr string, ok bool) {
	var rest string
	switch {
	case len(f) > 7 && string(f[:7]) == "-MOVED ":
		rest = string(f[7 : len(f)-2])
	case len(f) > 5 && string(f[:5]) == "-ASK ":
		ask, rest = true, string(f[5:len(f)-2])
	default:
		return false, 0, "", false
	}
	s, a, found := strings.Cut(rest, " ")
	n, err := strconv.Atoi(s)
	if !found || err != nil || n < 0 || n >= 16384 {
		return false, 0, "", false
	}
	return ask, n, a, true
}

// maxRedirects bounds the MOVED/ASK a command follows.
const maxRedirects = 5

// follow resends a command answered MOVED or ASK to the node named (on
// that node's shared connection of the session), and reports whether it
// did; the command's waiter then gets the new node's reply.
func (s *Session) follow(w *waiter, f []byte) bool {
	ask, slot, addr, ok := redirect(f)
	if !ok || w.redirects >= maxRedirects {
		return false
	}
	w.redirects++
	if !ask {
		s.g.cluster.moved(slot, addr)
		go s.g.loadSlots(context.Background()) //nolint:errcheck // the MOVED entry serves meanwhile
	}
	c, err := s.g.sharedConnAt(addr, s.tenant, w.proto)
	if err != nil {
		return false
	}
	if ask {
		c.send([][]string{{"ASKING"}, w.cmd}, []*waiter{{s: s}, w}, false)
	} else {
		c.send([][]string{w.cmd}, []*waiter{w}, false)
	}
	return true
}

// clusterTimeout bounds loading the slot map at start.
const clusterTimeout = 5 * time.Second
