// Package passthrough makes rlproxy a gateway: the commands rlproxy does
// not own are forwarded to a backend Redis and their replies relayed
// unchanged, as raw RESP frames in the protocol the client negotiated.
//
// Most commands share a few pipelined backend connections per protocol
// (RESP2, RESP3): many clients' commands go out in one write and the
// replies come back in order, each to its client (conn.go). A client's
// commands stay on one connection, so they run in the order it sent them.
// Commands that hold connection state run on a connection pinned to the
// client until the state ends: MULTI ... EXEC (and WATCH), blocking
// commands, Pub/Sub, SELECT of another database, CLIENT TRACKING.
//
// The package also keeps rlproxy's own keys out of reach (any key that
// starts with the key prefix) and refuses the commands a proxy cannot
// relay (MONITOR, replication, SHUTDOWN, ...).
package passthrough

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/rlproxy/rlproxy/internal/evloop"
)

// Options configure a Gateway.
type Options struct {
	// URL is the backend's redis:// or rediss:// URL (user, password and
	// database as in it).
	URL string
	// Cluster are seed URLs of a Redis Cluster (instead of URL): commands
	// go to the primary of their keys' slot, following MOVED and ASK.
	Cluster []string
	// TLS is the client TLS config for a rediss:// URL.
	TLS *tls.Config
	// KeyPrefix is rlproxy's key prefix: keys starting with it are refused.
	KeyPrefix string
	// MaxPinned bounds the connections pinned to clients; MaxPinnedPerUser
	// those of one tenant (Tenant.User; 0: no bound of its own).
	MaxPinned        int
	MaxPinnedPerUser int
	// Timeout bounds dialing and a new connection's setup.
	Timeout time.Duration
	// ReplyTimeout bounds the wait for a forwarded command's reply
	// (passthrough_timeout; defaults to 5s). A connection whose oldest
	// command waited longer is dropped (its commands are answered an
	// error) and replaced; blocking commands (BLPOP, ...) are exempt.
	ReplyTimeout time.Duration
	// Poller, when set, lets backend connections poll for replies at
	// light load (package busypoll).
	Poller *busypoll.Poller
}

// Stats are the gateway's counters.
type Stats struct {
	Forwarded int64 // commands sent to the backend
	Pinned    int64 // connections pinned to clients now
	Errors    int64 // commands answered an error because a backend connection broke
}

// Tenant is whom a session's commands run for.
type Tenant struct {
	// User is the rlproxy user, whose pinned connections MaxPinnedPerUser
	// bounds; "" for none (admins: MaxPinned only).
	User string
	// BackendUser and BackendPassword are the Redis ACL user the commands
	// run as on the backend, so Redis checks what its scripts touch; ""
	// for the backend URL's user. Its connections are its own.
	BackendUser, BackendPassword string
}

// pool names the connections a tenant may use to the node at addr: those
// of its backend user.
func (t Tenant) pool(addr string) string {
	if t.BackendUser == "" {
		return addr
	}
	return addr + "\x00" + t.BackendUser
}

// Gateway forwards clients' commands to one backend.
type Gateway struct {
	o    Options
	dial dialOptions

	cluster *slots // Redis Cluster's slot map; nil for one server

	mu       sync.Mutex
	shared   map[string]*[2][]*conn // by pool (Tenant.pool), then protocol (RESP2, RESP3)
	idle     map[string]*[2][]*conn // pinned connections free for reuse
	pinnedBy map[string]int         // pinned connections by Tenant.User
	closed   bool

	pinned    atomic.Int64
	forwarded atomic.Int64
	errs      atomic.Int64
	sessions  atomic.Uint64

	liveMu sync.Mutex
	live   map[*conn]bool // every connection dialed, till the watchdog sees it broken
	stop   chan struct{}  // ends the watchdog (Close)

	stopping atomic.Pointer[error] // Stop's reason: blocking commands are refused

	loop atomic.Pointer[evloop.Loop] // reads the shared connections (ReadInLoop)
}

// maxIdle is how many freed pinned connections are kept for reuse.
const maxIdle = 16

// New returns a gateway to the backend at o.URL; connections are made
// when first needed.
func New(o Options) (*Gateway, error) {
	url := o.URL
	if len(o.Cluster) > 0 {
		url = o.Cluster[0]
	}
	u, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("passthrough_backend: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.ReplyTimeout <= 0 {
		o.ReplyTimeout = 5 * time.Second
	}
	tlsConf := o.TLS
	if tlsConf == nil {
		tlsConf = u.TLSConfig
	}
	g := &Gateway{o: o, dial: dialOptions{addr: u.Addr, username: u.Username, password: u.Password,
		db: u.DB, tls: tlsConf, timeout: o.Timeout, poller: o.Poller}}
	g.shared, g.idle, g.pinnedBy = map[string]*[2][]*conn{}, map[string]*[2][]*conn{}, map[string]int{}
	g.live, g.stop = map[*conn]bool{}, make(chan struct{})
	if len(o.Cluster) > 0 {
		g.cluster = &slots{}
		for _, seed := range o.Cluster {
			su, err := redis.ParseURL(seed)
			if err != nil {
				return nil, fmt.Errorf("cluster: %w", err)
			}
			g.cluster.seeds = append(g.cluster.seeds, su.Addr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		defer cancel()
		if err := g.loadSlots(ctx); err != nil {
			return nil, err
		}
	}
	go g.watch()
	return g, nil
}

// watch is the watchdog: a few times per reply timeout it drops the
// connections whose oldest command is overdue. Its error goes to every
// command waiting on the connection, whose order is then unknown (so
// no later reply can reach the wrong client), and the next command
// dials a new one. Timing here, not per read, keeps the reply path free
// of deadline updates.
func (g *Gateway) watch() {
	timeout := g.o.ReplyTimeout
	t := time.NewTicker(min(max(timeout/8, time.Millisecond), time.Second))
	defer t.Stop()
	errTimeout := fmt.Errorf("no reply in %v (passthrough_timeout)", timeout)
	var due []*conn
	for {
		var now time.Time
		select {
		case <-g.stop:
			return
		case now = <-t.C:
		}
		g.liveMu.Lock()
		for c := range g.live {
			if c.broken() {
				delete(g.live, c)
			} else if c.overdue(now, timeout) {
				due = append(due, c)
			}
		}
		g.liveMu.Unlock()
		for i, c := range due {
			c.fail(errTimeout)
			due[i] = nil
		}
		due = due[:0]
	}
}

// Stop begins a shutdown: a client blocked in a blocking command (BLPOP,
// XREAD BLOCK, ...) is answered "ERR " + reason and its pinned
// connection closed at once, as are blocking commands sent from now on.
// Other commands are still forwarded until Close.
func (g *Gateway) Stop(reason error) {
	if g == nil || !g.stopping.CompareAndSwap(nil, &reason) {
		return
	}
	g.liveMu.Lock()
	var blocked []*conn
	for c := range g.live {
		if c.owner.Load() != nil && c.blocked() {
			blocked = append(blocked, c)
		}
	}
	g.liveMu.Unlock()
	for _, c := range blocked {
		c.end(reason)
	}
}

// stopped returns Stop's reason, or nil.
func (g *Gateway) stopped() error {
	if r := g.stopping.Load(); r != nil {
		return *r
	}
	return nil
}

// Stats returns the counters.
func (g *Gateway) Stats() Stats {
	return Stats{Forwarded: g.forwarded.Load(), Pinned: g.pinned.Load(), Errors: g.errs.Load()}
}

// Close closes every backend connection. A nil Gateway does nothing.
func (g *Gateway) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if !g.closed {
		close(g.stop)
	}
	g.closed = true
	var all []*conn
	for _, m := range []map[string]*[2][]*conn{g.shared, g.idle} {
		for _, byProto := range m {
			for _, conns := range byProto {
				for _, c := range conns {
					if c != nil {
						all = append(all, c)
					}
				}
			}
		}
	}
	g.idle = map[string]*[2][]*conn{}
	g.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

var errClosed = errors.New("passthrough is closed")

// ReadInLoop makes the event loop that serves plain clients (the
// server's, passthrough_loop) the reader of the shared connections
// dialed from now on: under load, the replies of the commands it
// forwards are read and written back on its goroutine, with no other
// goroutine woken per round trip.
func (g *Gateway) ReadInLoop(l *evloop.Loop) { g.loop.Store(l) }

// sharedConnAt returns a tenant's shared connection to the node at addr,
// dialing it anew when it broke. There is one per node, tenant and
// protocol: every client's commands then share one backend write and
// read, and Redis reads many in one (measured against 4: 0.61× direct
// unpipelined instead of 0.56×).
func (g *Gateway) sharedConnAt(addr string, t Tenant, proto int) (*conn, error) {
	return g.laneAt(addr, t, proto, 0)
}

// sideConnAt returns the tenant's second shared connection to the node
// at addr: for commands that come while a script runs on the first.
// Scripts never go on it, so it is never held up by one.
func (g *Gateway) sideConnAt(addr string, t Tenant, proto int) (*conn, error) {
	return g.laneAt(addr, t, proto, 1)
}

// laneIfOpen returns shared connection lane (as laneAt) when it is open,
// else nil: it dials none.
func (g *Gateway) laneIfOpen(addr string, t Tenant, proto, lane int) *conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	if byProto := g.shared[t.pool(addr)]; byProto != nil {
		return byProto[proto-2][lane]
	}
	return nil
}

// laneAt returns shared connection lane (0: the first, 1: the side one).
func (g *Gateway) laneAt(addr string, t Tenant, proto, lane int) (*conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errClosed
	}
	byProto := g.shared[t.pool(addr)]
	if byProto == nil {
		byProto = &[2][]*conn{make([]*conn, 2), make([]*conn, 2)}
		g.shared[t.pool(addr)] = byProto
	}
	slot := &byProto[proto-2][lane]
	if c := *slot; c != nil && !c.broken() {
		return c, nil
	}
	c, err := g.dialAt(addr, t, proto, true)
	if err != nil {
		return nil, err
	}
	*slot = c
	return c, nil
}

// dialAt opens a connection to the node at addr for tenant t; a lazy
// one (shared) is read only while replies are awaited.
func (g *Gateway) dialAt(addr string, t Tenant, proto int, lazy bool) (*conn, error) {
	o := g.dial
	o.addr = addr
	if t.BackendUser != "" {
		o.username, o.password = t.BackendUser, t.BackendPassword
	}
	if g.cluster != nil {
		o.db = 0 // a cluster has database 0 only
	}
	if lazy {
		o.loop = g.loop.Load()
	}
	c, err := dial(context.Background(), o, proto, lazy)
	if err == nil {
		c.pool = t.pool(addr)
		g.liveMu.Lock()
		g.live[c] = true
		g.liveMu.Unlock()
	}
	return c, err
}

var (
	errMaxPinned        = errors.New("ERR max number of pinned connections reached")
	errMaxPinnedPerUser = errors.New("ERR max number of pinned connections per user reached")
)

// takePin counts a pinned connection for user (its own bound first), or
// refuses it.
func (g *Gateway) takePin(user string) error {
	if user != "" && g.o.MaxPinnedPerUser > 0 {
		g.mu.Lock()
		if g.pinnedBy[user] >= g.o.MaxPinnedPerUser {
			g.mu.Unlock()
			return errMaxPinnedPerUser
		}
		g.pinnedBy[user]++
		g.mu.Unlock()
	}
	if g.pinned.Add(1) > int64(g.o.MaxPinned) {
		g.givePin(user)
		return errMaxPinned
	}
	return nil
}

// givePin uncounts a pinned connection of user.
func (g *Gateway) givePin(user string) {
	g.pinned.Add(-1)
	if user != "" && g.o.MaxPinnedPerUser > 0 {
		g.mu.Lock()
		if g.pinnedBy[user]--; g.pinnedBy[user] <= 0 {
			delete(g.pinnedBy, user)
		}
		g.mu.Unlock()
	}
}

// pin returns a connection to the node at addr for one client alone.
func (g *Gateway) pin(s *Session, proto int, addr string) (*conn, error) {
	if err := g.takePin(s.tenant.User); err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.givePin(s.tenant.User)
		return nil, errClosed
	}
	var c *conn
	if idle := g.idle[s.tenant.pool(addr)]; idle != nil {
		for n := len(idle[proto-2]); n > 0 && c == nil; n-- {
			c = idle[proto-2][n-1]
			idle[proto-2] = idle[proto-2][:n-1]
			if c.broken() {
				c = nil
			}
		}
	}
	g.mu.Unlock()
	if c == nil {
		var err error
		if c, err = g.dialAt(addr, s.tenant, proto, false); err != nil {
			g.givePin(s.tenant.User)
			return nil, err
		}
	}
	c.owner.Store(s)
	return c, nil
}

// unpin takes a pinned connection of user back: kept for reuse when its
// state is clean (clean), else closed.
func (g *Gateway) unpin(c *conn, user string, proto int, clean bool) {
	g.givePin(user)
	c.owner.Store(nil)
	c.subscribed.Store(false)
	if clean && c.idle() {
		g.mu.Lock()
		idle := g.idle[c.pool]
		if idle == nil {
			idle = &[2][]*conn{}
			g.idle[c.pool] = idle
		}
		if !g.closed && len(idle[proto-2]) < maxIdle {
			idle[proto-2] = append(idle[proto-2], c)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
	}
	c.close()
}

// refused are the commands a proxy cannot relay: they take over the
// connection (MONITOR, SYNC), change the server's role or stop it.
// DEBUG is relayed (to admins): the backend's enable-debug-command
// decides, as it would for a client of its own.
var refused = map[string]bool{
	"MONITOR": true, "SYNC": true, "PSYNC": true, "REPLICAOF": true, "SLAVEOF": true,
	"SHUTDOWN": true, "FAILOVER": true, "CLUSTER": true,
}

// command is what the gateway knows of one Redis command, from the
// tables here and in keys.go, keyspecs.go, cluster.go and session.go. A
// forwarded call finds it with one map lookup (commandOf): reading the
// tables one by one took six, 5% of the gateway's CPU per command.
type command struct {
	name      string // upper case
	refused   bool
	blocking  bool
	movable   func([]string) []string // keys that move with the arguments
	spec      *keySpec                // or fixed key positions
	container bool                    // the subcommand decides the keys
	unsub     string                  // an unsubscribe: the kind of subscription it ends
	noCluster bool                    // refused in cluster mode
	planned   bool                    // Session.plan looks at it by name
}

// commandsByName holds every command of the tables, by upper-case name
// and by lower-case name (as most clients send them).
var commandsByName = func() map[string]*command {
	m := map[string]*command{}
	get := func(name string) *command {
		if m[name] == nil {
			m[name] = &command{name: name}
			m[strings.ToLower(name)] = m[name]
		}
		return m[name]
	}
	for name, spec := range keySpecs {
		if !strings.Contains(name, "|") {
			get(name).spec = &spec
		}
	}
	for name, f := range movableKeys {
		get(name).movable = f
	}
	for name, kind := range unsubscribes {
		get(name).unsub = kind
	}
	for _, t := range []struct {
		names map[string]bool
		mark  func(*command)
	}{
		{containers, func(c *command) { c.container = true }},
		{refused, func(c *command) { c.refused = true }},
		{blocking, func(c *command) { c.blocking = true }},
		{keyspaceWide, func(c *command) { c.noCluster = true }},
		{clusterOnly, func(c *command) { c.noCluster = true }},
	} {
		for name := range t.names {
			t.mark(get(name))
		}
	}
	for _, name := range planned {
		get(name).planned = true
	}
	return m
}()

// commandOf returns what the gateway knows of a call's command (args[0]):
// of a command it has no table entry for, only its name.
func commandOf(name string) *command {
	if c := commandsByName[name]; c != nil {
		return c
	}
	upper := strings.ToUpper(name)
	if c := commandsByName[upper]; c != nil {
		return c
	}
	return &command{name: upper}
}

// Stateless reports whether a call leaves a client's session as it was
// and needs no connection of its own: not a transaction, Pub/Sub, a
// blocking command or one that sets connection state (SELECT, CLIENT
// TRACKING). A client that sends only such calls, on a session that
// holds no state, may be read by an event loop (server's loop).
func Stateless(args []string) bool {
	cmd := commandOf(args[0])
	return !cmd.planned && cmd.unsub == "" && !blocks(cmd, args)
}

// blocking are the commands that may block the connection.
var blocking = map[string]bool{
	"BLPOP": true, "BRPOP": true, "BLMOVE": true, "BRPOPLPUSH": true, "BLMPOP": true,
	"BZPOPMIN": true, "BZPOPMAX": true, "BZMPOP": true, "WAIT": true, "WAITAOF": true,
}

// blocks reports whether a call of cmd may block: the blocking commands,
// and XREAD/XREADGROUP with BLOCK.
func blocks(cmd *command, args []string) bool {
	if cmd.blocking {
		return true
	}
	if cmd.name == "XREAD" || cmd.name == "XREADGROUP" {
		for _, a := range args[1:] {
			if strings.EqualFold(a, "BLOCK") {
				return true
			}
			if strings.EqualFold(a, "STREAMS") {
				break
			}
		}
	}
	return false
}

// errorFrame is an error reply on the wire.
func errorFrame(msg string) []byte {
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	return []byte("-" + msg + "\r\n")
}

var (
	okFrame      = []byte("+OK\r\n")
	noPermFrame  = errorFrame("NOPERM No permissions to access a key")
	execAbort    = errorFrame("EXECABORT Transaction discarded because of previous errors.")
	errMaxPinRep = errorFrame(errMaxPinned.Error())
	errMaxUser   = errorFrame(errMaxPinnedPerUser.Error())
)

func brokenFrame(err error) []byte {
	msg := err.Error()
	if !strings.HasPrefix(msg, "ERR ") {
		msg = "ERR " + msg
	}
	return errorFrame(msg)
}
