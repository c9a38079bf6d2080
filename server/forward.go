package server

import (
	"errors"
	"strings"

	"github.com/tidwall/match"
)

// Forwarder is the gateway (package passthrough): it runs the commands
// no table entry owns on a backend Redis, one session per client.
type Forwarder interface {
	// Open starts a client's session for tenant t. push relays a frame
	// the backend sent by itself (a Pub/Sub message) after the replies
	// before it; flush writes the replies filled so far; kill closes the
	// client once its replies are out.
	Open(t Tenant, push func(frame []byte), flush, kill func()) Session
	// Keys returns the keys a command names (for users' key patterns).
	Keys(args []string) []string
	// SortDenied returns, for a call that reads keys by pattern (SORT's
	// BY and GET), Redis's refusal to a user bound to key patterns; ""
	// for others.
	SortDenied(args []string) string
	// Stateless reports whether a call leaves the session as it was and
	// needs no connection of its own (not MULTI, Pub/Sub, blocking,
	// SELECT...): the event loop serves clients that send only these.
	Stateless(args []string) bool
	// Stop begins a shutdown: clients blocked in a forwarded blocking
	// command (BLPOP, ...) are answered "ERR " + reason at once.
	Stop(reason error)
}

// Session is one client's forwarding state.
type Session interface {
	// Forward runs calls in order; reply(i, frame, more) gives call i's
	// reply as a RESP frame exactly once, perhaps later on another
	// goroutine; the gateway calls flush after a run of them. The frame
	// is valid during the call only (it may be a view of a read buffer).
	// A big reply comes in parts (more: parts follow); reply returns once
	// the client holds less than passthrough_client_buffer, false when
	// the client was closed and the rest is not wanted.
	Forward(proto int, calls [][]string, reply func(i int, frame []byte, more bool) bool)
	// InMulti reports whether the client's MULTI is open.
	InMulti() bool
	// Abort makes the open MULTI's EXEC answer EXECABORT.
	Abort()
	// Subscribed reports whether the client has a subscription.
	Subscribed() bool
	// FromLoop says Forward's caller is the event loop, which serves
	// other clients: Forward never waits to read a reply itself.
	FromLoop()
	// LoopCalls says the event loop's goroutine calls Forward (on),
	// until called again (off).
	LoopCalls(on bool)
	// Sendable returns how many of calls (Stateless ones) Forward would
	// send before one that first waits for the client's replies on
	// another backend connection.
	Sendable(proto int, calls [][]string) int
	// NotifySent calls f once the next command forwarded on the session
	// is written to its backend connection or queued there behind
	// others (or at once when the session has ended).
	NotifySent(f func())
	// BlockedOn returns the backend's client id of the connection on
	// which a blocking command of the client waits, else 0.
	BlockedOn() int64
	// Close ends the session (its pinned connection is closed).
	Close()
}

// Tenant is whom a client's forwarded commands run for.
type Tenant struct {
	// User is the rlproxy user, whose pinned connections
	// passthrough_max_pinned_per_user bounds; "" for an admin.
	User string
	// BackendUser and BackendPassword are the Redis ACL user (the user's
	// backend_user) the commands run as; "" for the backend URL's.
	BackendUser, BackendPassword string
}

// tenant returns whom u's forwarded commands run for.
func (u *user) tenant() Tenant {
	var t Tenant
	if !u.admin {
		t.User = u.name
	}
	if u.backend != nil {
		t.BackendUser, t.BackendPassword = u.backend.Name, u.backend.Password
	}
	return t
}

// rawFrame is a reply already encoded (a forwarded command's), written
// as it is.
type rawFrame []byte

// session returns the client's forwarding session, opening it at first
// use and anew when the client became another tenant (AUTH as another
// user: its commands run as another backend user); nil without
// passthrough.
func (s *Server) session(c *client) Session {
	if s.opts.Forward == nil {
		return nil
	}
	t := everyone.tenant()
	if u := c.user.Load(); u != nil {
		t = u.tenant()
	}
	c.mu.Lock()
	if c.fwd != nil && c.fwdFor != t {
		old := c.fwd
		c.fwd = nil
		c.mu.Unlock()
		old.Close()
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	if c.fwd == nil {
		q := c.replies
		c.fwdFor = t
		c.fwd = s.opts.Forward.Open(t, q.push, q.writeAsync, func() {
			go func() { // not on the backend connection's reader
				q.waitWritten()
				c.conn.Close()
			}()
		})
		if c.looped {
			c.fwd.FromLoop()
		}
	}
	return c.fwd
}

// endSession closes the client's session, if it has one (RESET, or the
// client left).
func (c *client) endSession() {
	c.mu.Lock()
	fwd := c.fwd
	c.fwd = nil
	c.mu.Unlock()
	if fwd != nil {
		fwd.Close()
	}
}

// inSession reports whether the client has an open session in which
// cond holds, without opening one.
func (c *client) inSession(cond func(Session) bool) bool {
	c.mu.Lock()
	fwd := c.fwd
	c.mu.Unlock()
	return fwd != nil && cond(fwd)
}

// forwards reports whether a call goes to the gateway: a command rlproxy
// does not own; SELECT and CLIENT TRACKING, which set the state of the
// client's backend connection; CONFIG (the settings are the backend's:
// rlproxy's own stay in its file); within MULTI every command but the
// client's own handshake (Redis queues them), except rlproxy's limiter
// commands, which call refuses; PING while subscribed (Redis answers it
// in the Pub/Sub shape); PING from a user who may reach Redis.
func (s *Server) forwards(c *client, args []string) bool {
	if s.opts.Forward == nil {
		return false
	}
	cmd := s.table.Lookup(args[0])
	switch {
	case cmd == nil:
		return true
	case cmd.Name == "SELECT" || cmd.Name == "CONFIG":
		return true
	case cmd.Name == "CLIENT" && len(args) > 2 && strings.EqualFold(args[1], "TRACKING"):
		return true
	case cmd.Name == "AUTH" || cmd.Name == "HELLO" || cmd.Name == "QUIT" || cmd.Name == "RESET":
		return false
	case cmd.Name == "CLIENT" && len(args) > 1 && strings.EqualFold(args[1], "REPLY"):
		return false // the replies are rlproxy's to drop (clientreply.go)
	case c.inSession(Session.InMulti):
		return s.own[cmd.Name]
	case cmd.Name == "PING":
		// The backend's answer: Redis's is BUSY while a script runs,
		// LOADING while it loads (but to users who may not reach it).
		u := c.user.Load()
		return c.inSession(Session.Subscribed) || u != nil && (u.admin || u.redis)
	}
	return false
}

// forwardable checks a forwarded call before it goes (nil: it may):
// authentication, the user's categories and key patterns.
func (s *Server) forwardable(c *client, args []string) error {
	if !c.authed {
		return errNoAuth
	}
	if s.opts.Embedded {
		if err := embeddedLacks(args); err != nil {
			return err
		}
	}
	u := c.user.Load()
	if u == nil || u.admin {
		return nil
	}
	if !u.redis {
		return noPerm(u, strings.ToLower(args[0]))
	}
	if cmd, ok := adminOnlyCall(args); ok {
		return noPerm(u, cmd)
	}
	if u.keys != nil {
		if isScript(args) && u.backend == nil {
			return errScriptKeys
		}
		for _, k := range s.opts.Forward.Keys(args) {
			if !matchAny(k, u.keys) {
				return errNoPermKey
			}
		}
		if msg := s.opts.Forward.SortDenied(args); msg != "" {
			return errors.New(msg)
		}
	}
	return nil
}

// adminOnly are the forwarded commands (or container|subcommand) only
// admins may run. FLUSHALL, FLUSHDB and SWAPDB would erase every limit;
// the rest are Redis's @admin commands (but CONFIG GET, which the redis
// category may run: applications read settings such as maxmemory-policy) — its users (ACL SETUSER could
// lock rlproxy out of Redis), persistence, modules and diagnostics — as
// Redis 7.0's COMMAND lists them (TestPassthroughAdminCommands). Those rlproxy
// answers itself or refuses (CONFIG, CLIENT, MONITOR, ...) are listed too,
// so the table is Redis's whole set.
var adminOnly = map[string]bool{
	"FLUSHALL": true, "FLUSHDB": true, "SWAPDB": true,
	"ACL|DELUSER": true, "ACL|DRYRUN": true, "ACL|GETUSER": true, "ACL|LIST": true, "ACL|LOAD": true,
	"ACL|LOG": true, "ACL|SAVE": true, "ACL|SETUSER": true, "ACL|USERS": true,
	"BGREWRITEAOF": true, "BGSAVE": true, "LASTSAVE": true, "SAVE": true,
	"CLIENT|KILL": true, "CLIENT|LIST": true, "CLIENT|NO-EVICT": true, "CLIENT|PAUSE": true,
	"CLIENT|UNBLOCK": true, "CLIENT|UNPAUSE": true,
	"CLUSTER|ADDSLOTS": true, "CLUSTER|ADDSLOTSRANGE": true, "CLUSTER|BUMPEPOCH": true,
	"CLUSTER|COUNT-FAILURE-REPORTS": true, "CLUSTER|DELSLOTS": true, "CLUSTER|DELSLOTSRANGE": true,
	"CLUSTER|FAILOVER": true, "CLUSTER|FLUSHSLOTS": true, "CLUSTER|FORGET": true, "CLUSTER|MEET": true,
	"CLUSTER|REPLICAS": true, "CLUSTER|REPLICATE": true, "CLUSTER|RESET": true, "CLUSTER|SAVECONFIG": true,
	"CLUSTER|SET-CONFIG-EPOCH": true, "CLUSTER|SETSLOT": true, "CLUSTER|SLAVES": true,
	"CONFIG|RESETSTAT": true, "CONFIG|REWRITE": true, "CONFIG|SET": true,
	"DEBUG": true, "FAILOVER": true, "MONITOR": true, "PSYNC": true, "REPLCONF": true, "REPLICAOF": true,
	"ROLE": true, "SHUTDOWN": true, "SLAVEOF": true, "SYNC": true, "PFDEBUG": true, "PFSELFTEST": true,
	"LATENCY|DOCTOR": true, "LATENCY|GRAPH": true, "LATENCY|HISTOGRAM": true, "LATENCY|HISTORY": true,
	"LATENCY|LATEST": true, "LATENCY|RESET": true,
	"MODULE|LIST": true, "MODULE|LOAD": true, "MODULE|LOADEX": true, "MODULE|UNLOAD": true,
	"SLOWLOG|GET": true, "SLOWLOG|LEN": true, "SLOWLOG|RESET": true,
}

// adminOnlyCall reports whether a forwarded call is admin-only, and its
// name as NOPERM gives it ("acl|setuser").
func adminOnlyCall(args []string) (string, bool) {
	name := strings.ToUpper(args[0])
	if adminOnly[name] {
		return strings.ToLower(name), true
	}
	if len(args) > 1 {
		if sub := name + "|" + strings.ToUpper(args[1]); adminOnly[sub] {
			return strings.ToLower(sub), true
		}
	}
	return "", false
}

// errScriptKeys refuses scripts to a user with key patterns and no
// backend_user: what a script touches cannot be checked here.
var errScriptKeys = errors.New("NOPERM this user may not run scripts (its keys: patterns cannot be checked inside a script)")

// isScript reports whether a call runs or loads a script: EVAL*, FCALL*,
// FUNCTION (LOAD, RESTORE, ...) and SCRIPT LOAD.
func isScript(args []string) bool {
	name := strings.ToUpper(args[0])
	switch {
	case strings.HasPrefix(name, "EVAL"), strings.HasPrefix(name, "FCALL"), name == "FUNCTION":
		return true
	case name == "SCRIPT":
		return len(args) > 1 && strings.EqualFold(args[1], "LOAD")
	}
	return false
}

func matchAny(s string, patterns []string) bool {
	for _, p := range patterns {
		if match.Match(s, p) {
			return true
		}
	}
	return false
}

// forward sends a run of forwarded calls; their slots are filled as the
// replies come. A call refused here is answered at once, in its place.
func (s *Server) forward(c *client, calls [][]string) {
	q := c.replies
	fwd := s.session(c)
	for len(calls) > 0 {
		if err := s.forwardable(c, calls[0]); err != nil {
			if !c.muted(calls[0]) {
				q.add(err, c.proto)
			}
			calls = calls[1:]
			continue
		}
		n := 1
		for n < len(calls) && s.forwardable(c, calls[n]) == nil {
			n++
		}
		s.stats.commands.Add(int64(n))
		s.drain.busy.Add(int64(n))
		first := q.reserve(n, c.proto, true)
		c.mute(first, calls[:n])
		for range n {
			s.opts.Poller.Begin()
		}
		fwd.Forward(c.proto, calls[:n], func(i int, frame []byte, more bool) bool {
			if more {
				return q.fillPart(first+uint64(i), frame)
			}
			q.fillFrame(first+uint64(i), frame)
			s.opts.Poller.End()
			s.drain.busy.Add(-1)
			return true
		})
		calls = calls[n:]
	}
}

// ask forwards one call of rlproxy's own (INFO, COMMAND) on the client's
// session and returns the backend's reply frame (a copy); the client's
// earlier commands have been answered (handle runs them in order).
func (s *Server) ask(c *client, args []string) []byte {
	got := make(chan []byte, 1)
	var parts []byte // a reply streamed in parts (a big one) is gathered
	s.session(c).Forward(c.proto, [][]string{args}, func(_ int, frame []byte, more bool) bool {
		parts = append(parts, frame...)
		if !more {
			got <- parts
		}
		return true
	})
	return <-got
}

// handedBack tells the event loop that a client it handed back has
// reached its first command here: once that command is on its way to
// Redis (forwarded: written to its backend connection) or is one of
// rlproxy's own, the loop may run other clients' commands without
// overtaking it.
func (s *Server) handedBack(c *client, first []string, done func()) {
	// A forwarded command that waits for an earlier reply first (an
	// RL.ACQUIRE's, or one on another backend connection) is not sent
	// in arrival order (nor is a Redis client's command behind its
	// blocking one): the loop need not wait.
	if s.forwards(c, first) && !s.forwardWaits(c, [][]string{first}) {
		if fwd := s.session(c); fwd != nil {
			fwd.NotifySent(done)
			return
		}
	}
	done()
}

// forwardWaits reports whether forwarding calls waits for an earlier
// reply of the client first: an own command's (an RL.ACQUIRE's), or one
// awaited on another backend connection than where a call goes.
func (s *Server) forwardWaits(c *client, calls [][]string) bool {
	if c.replies.deciding() {
		return true
	}
	// The stateless calls first: a call that pins a connection waits for
	// the replies on the shared one too, but only a round trip, and the
	// loop's hold keeps it in arrival order.
	n := 0
	for n < len(calls) && s.opts.Forward.Stateless(calls[n]) {
		n++
	}
	if n == 0 {
		return false
	}
	fwd := s.session(c)
	return fwd != nil && fwd.Sendable(c.proto, calls[:n]) < n
}
