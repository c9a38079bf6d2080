package passthrough

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Session is one client's way to the backend: which connection its
// commands go to (shared, or pinned to it while it holds connection
// state) and that state.
type Session struct {
	g      *Gateway
	id     uint64
	tenant Tenant
	push   func(frame []byte)     // relays a frame no command asked for
	flush  func()                 // writes the replies filled so far
	kill   func()                 // closes the client once its replies are out
	sent   atomic.Pointer[func()] // NotifySent's, until the next send

	mu      sync.Mutex
	drained sync.Cond // out fell to 0
	route   *conn     // where the latest commands went
	out     int       // replies awaited from route
	pin     *conn     // the connection pinned to this client, or nil
	proto   int       // the pinned connection's protocol
	shared  [2]*conn  // the shared connections it uses, by protocol

	multi, aborted bool // in MULTI; a command was refused while queuing
	// In a cluster, MULTI waits for the first command of the transaction
	// (its keys name the node), which is sent after it.
	multiPending bool
	watching     bool
	tracking     bool
	selected     bool                       // SELECTed another database: pinned for life
	subs         map[string]map[string]bool // subscriptions by kind ("subscribe", ...)
	closed       bool
	// fromLoop: Forward's caller is an event loop serving other
	// clients, which must not wait: it never reads replies itself (the
	// loop reads the shared connections as it reads its clients).
	fromLoop bool
	// loopCalls: the loop's own goroutine is in Forward (LoopCalls).
	loopCalls bool

	scratch struct { // Forward's, reused from one call to the next
		cmds [][]string
		ws   []*waiter
	}
}

// Open starts a client's session. push relays a frame the backend sent
// by itself (a Pub/Sub message, an invalidation) after the replies
// before it and writes what is ready; Forward's replies are written when
// flush is called (after each run of replies read from a backend
// connection); kill closes the client's connection once its replies are
// written (its pinned backend connection broke).
func (g *Gateway) Open(t Tenant, push func(frame []byte), flush, kill func()) *Session {
	s := &Session{g: g, id: g.sessions.Add(1), tenant: t, push: push, flush: flush, kill: kill}
	s.drained.L = &s.mu
	return s
}

// NotifySent calls f once the session's next command is written to its
// backend connection, or queued there behind commands in flight (so
// nothing sent later on that connection overtakes it). The caller's
// event loop holds other clients until then; f also runs when that
// command is refused or the session closes first.
func (s *Session) NotifySent(f func()) {
	s.sent.Store(&f)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.notifySent()
	}
}

// notifySent calls NotifySent's function, once.
func (s *Session) notifySent() {
	if s == nil {
		return
	}
	if f := s.sent.Swap(nil); f != nil {
		(*f)()
	}
}

// Sendable returns how many of calls (commands that change no session
// state: Stateless) Forward would send before one that must first wait
// for the replies the client awaits on another connection (a script
// runs on the shared one, so the call goes on the side one; in a
// cluster, another node): the event loop reads those replies itself, so
// it leaves that call and the rest to the client's goroutine. Those it
// refuses or answers here count as sent.
func (s *Session) Sendable(proto int, calls [][]string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == 0 && len(calls) == 1 {
		return 1
	}
	if s.pin != nil || s.multiPending {
		// Every call goes on the pinned connection (a pending MULTI
		// pins one for the first: only once nothing is awaited).
		if s.multiPending && s.out > 0 {
			return 0
		}
		return len(calls)
	}
	// Where each call goes: an open connection, or one Forward will
	// open (addr and lane).
	type dest struct {
		c    *conn
		addr string
		lane int
	}
	at, out := dest{c: s.route}, s.out
	var keyBuf [4]string
	for i, args := range calls {
		cmd := commandOf(args[0])
		if cmd.refused {
			continue
		}
		d := dest{addr: s.g.dial.addr}
		if s.g.cluster != nil {
			slot, refusal := route(cmd, args, appendKeys(keyBuf[:0], cmd, args))
			if refusal != nil {
				continue
			}
			d.addr = s.g.cluster.node(slot)
			d.c = s.g.laneIfOpen(d.addr, s.tenant, proto, 0)
		} else if d.c = s.shared[proto-2]; d.c != nil {
			switch s.lane(d.c, at.c, out, scripts[cmd.name], d.addr, proto) {
			case followRoute:
				d = at
			case sideLane:
				d.lane, d.c = 1, s.g.laneIfOpen(d.addr, s.tenant, proto, 1)
			}
		}
		if d.c != nil && d.c.broken() {
			d.c = nil
		}
		same := d.c == at.c && (d.c != nil || d.addr == at.addr && d.lane == at.lane)
		if out > 0 && !same {
			return i
		}
		at, out = d, out+1
	}
	return len(calls)
}

// FromLoop says Forward's caller is an event loop serving other
// clients: Forward never reads a reply itself.
func (s *Session) FromLoop() {
	s.mu.Lock()
	s.fromLoop = true
	s.mu.Unlock()
}

// LoopCalls says the event loop's goroutine calls Forward (on) until
// called again (off). Should Forward then wait for the client's replies
// on another connection (the loop hands it such calls only in a race:
// Sendable), the loop cannot read them: the connection is read aside.
func (s *Session) LoopCalls(on bool) {
	s.mu.Lock()
	s.loopCalls = on
	s.mu.Unlock()
}

// InMulti reports whether a MULTI is open.
func (s *Session) InMulti() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.multi
}

// Abort marks the open MULTI as failed: EXEC will answer EXECABORT, as
// Redis does after a command refused while queuing.
func (s *Session) Abort() {
	s.mu.Lock()
	s.aborted = s.multi
	s.mu.Unlock()
}

// Subscribed reports whether the client has a subscription, or has sent
// an (un)subscribe not yet confirmed (its PING must go after it).
func (s *Session) Subscribed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs) > 0 || s.pin != nil && s.pin.subscribed.Load()
}

// BlockedOn returns the backend's client id (CLIENT ID) of the pinned
// connection on which a blocking command of the client waits, else 0:
// CLIENT UNBLOCK of the client is CLIENT UNBLOCK of that id.
func (s *Session) BlockedOn() int64 {
	s.mu.Lock()
	pin := s.pin
	s.mu.Unlock()
	if pin == nil || !pin.blocked() {
		return 0
	}
	return pin.id
}

// Close ends the session (the client left, or sent RESET): its pinned
// connection is closed, which ends a blocked command or subscription.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	pin := s.pin
	s.pin = nil
	s.mu.Unlock()
	s.notifySent()
	if pin != nil {
		s.g.unpin(pin, s.tenant.User, s.proto, false)
	}
}

// batch is a run of commands for one connection, written at once.
type batch struct {
	c      *conn
	cmds   [][]string
	ws     []*waiter
	inline bool // the caller may read the replies (conn.send)
}

func (b *batch) flush() {
	if len(b.cmds) > 0 {
		b.c.send(b.cmds, b.ws, b.inline)
	}
	// send copied them: the slices serve the next connection's run.
	clear(b.cmds) // nor the arguments (they may be big) nor the waiters
	clear(b.ws)   // are kept alive by the scratch slices
	b.c, b.cmds, b.ws = nil, b.cmds[:0], b.ws[:0]
}

// Reply takes call i's reply frame, valid during the call only. A big
// bulk reply comes in parts (more: parts follow), so that no more of it
// is held than the client takes; Reply then reports false when the
// client is gone and the rest is not wanted.
type Reply = func(i int, frame []byte, more bool) bool

// Forward runs calls in order on the backend; reply gives call i's reply
// frame exactly once (or in parts), perhaps later and on another
// goroutine, followed (soon) by a call of the session's flush.
func (s *Session) Forward(proto int, calls [][]string, reply Reply) {
	// At light load the client's goroutine reads a lone command's reply
	// itself, so that it polls for it (package busypoll) and then for the
	// client's next request: no other goroutine's wake-up in between.
	// Under load, and for pipelines (whose replies are written as they
	// come), a reader goroutine per connection reads the replies of many
	// clients.
	b := batch{inline: len(calls) == 1 && !s.fromLoop && s.g.o.Poller.Quiet()}
	// What is sent is gathered in the session's scratch slices (send
	// copies it), taken for the call: one allocation per run, its waiters.
	s.mu.Lock()
	b.cmds, b.ws = s.scratch.cmds, s.scratch.ws
	s.scratch.cmds, s.scratch.ws = nil, nil
	s.mu.Unlock()
	defer func() {
		b.flush()
		s.mu.Lock()
		s.scratch.cmds, s.scratch.ws = b.cmds, b.ws
		s.mu.Unlock()
	}()
	ws := make([]waiter, len(calls))
	var keyBuf [4]string // a call's keys, most often one
	for i, args := range calls {
		cmd := commandOf(args[0])
		name := cmd.name
		if cmd.refused {
			reply(i, errorFrame("ERR '"+strings.ToLower(args[0])+"' is not supported by rlproxy"), false)
			continue
		}
		keys := appendKeys(keyBuf[:0], cmd, args)
		if s.g.o.KeyPrefix != "" && s.ownKey(keys) {
			reply(i, noPermFrame, false)
			continue
		}
		if p, ok := s.sortReachesOwn(name, args); ok {
			reply(i, errorFrame("ERR "+p.Denied()), false)
			continue
		}
		s.mu.Lock()
		step := s.plan(cmd, args)
		if step.block && s.g.stopped() != nil {
			step.local = brokenFrame(s.g.stopped())
		}
		if step.local != nil {
			s.mu.Unlock()
			reply(i, step.local, false)
			continue
		}
		addr := s.g.dial.addr
		if s.g.cluster != nil {
			slot, refusal := route(cmd, args, keys)
			if refusal != nil {
				s.mu.Unlock()
				reply(i, refusal, false)
				continue
			}
			addr = s.g.cluster.node(slot)
		}
		begin := s.multiPending // the transaction's first command: MULTI goes first
		target, err := s.target(step.pin || begin, step.script, proto, &b, addr)
		if err != nil {
			s.undo()
			s.mu.Unlock()
			switch err {
			case errMaxPinned:
				reply(i, errMaxPinRep, false)
			case errMaxPinnedPerUser:
				reply(i, errMaxUser, false)
			default:
				s.g.errs.Add(1)
				reply(i, brokenFrame(err), false)
			}
			continue
		}
		s.apply(step, target)
		if begin {
			s.multiPending = false
		}
		// The client switched protocol (HELLO): so does its pinned
		// connection, before this command.
		rehello := target == s.pin && s.proto != proto
		if rehello {
			s.proto = proto
		}
		s.out++
		s.mu.Unlock()
		if b.c != target {
			b.flush()
			b.c = target
		}
		if rehello {
			b.cmds = append(b.cmds, []string{"HELLO", strconv.Itoa(proto)})
			b.ws = append(b.ws, &waiter{s: s})
		}
		if begin { // MULTI's +OK was answered when it came
			b.cmds = append(b.cmds, []string{"MULTI"})
			b.ws = append(b.ws, &waiter{s: s})
			step.pin = true
		}
		sent := args
		if step.send != nil {
			sent = step.send
		}
		b.cmds = append(b.cmds, sent)
		b.ws = append(b.ws, s.newWaiter(&ws[i], i, target, step, reply, sent, proto))
		s.g.forwarded.Add(1)
		if step.block {
			b.flush()
			if err := s.g.stopped(); err != nil { // Stop ran while it went
				target.end(err)
			}
		}
	}
}

// step is what one command does to the session.
type step struct {
	local    []byte   // answered here, not forwarded
	pin      bool     // needs a pinned connection
	send     []string // sent in its place (DISCARD for an aborted EXEC)
	answer   []byte   // its reply in place of the backend's
	confirms int      // (un)subscribe: confirmation frames it gets
	all      bool     // an unsubscribe from all: one confirmation per subscription then
	set      func()   // the state change, once it is sent
	block    bool     // a blocking command
	script   bool     // runs a script (EVAL, FCALL, ...)
}

// planned are the commands plan looks at by name (in commandsByName, so
// that one sent in lower case is found without upper-casing it).
var planned = []string{"SELECT", "CLIENT", "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH",
	"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"}

// plan decides what a call of cmd does (s.mu held).
func (s *Session) plan(cmd *command, args []string) step {
	pinned := s.pin != nil
	name := cmd.name
	switch name {
	case "SELECT":
		n, err := strconv.Atoi(args[min(1, len(args)-1)])
		if err == nil && n == 0 && !pinned {
			return step{local: okFrame}
		}
		return step{pin: true, set: func() { s.selected = s.selected || n != 0 }}
	case "CLIENT":
		if len(args) > 2 && strings.EqualFold(args[1], "TRACKING") {
			if strings.EqualFold(args[2], "ON") {
				return step{pin: true, set: func() { s.tracking = true }}
			}
			if !pinned {
				return step{local: okFrame}
			}
			return step{pin: true, set: func() { s.tracking = false }}
		}
	case "MULTI":
		if s.g.cluster != nil && !pinned && !s.multi {
			s.multi, s.aborted, s.multiPending = true, false, true
			return step{local: okFrame}
		}
		return step{pin: true, set: func() { s.multi, s.aborted = true, false }}
	case "EXEC", "DISCARD":
		if s.multiPending { // nothing queued
			aborted := s.aborted
			s.multi, s.aborted, s.multiPending = false, false, false
			switch {
			case name == "DISCARD":
				return step{local: okFrame}
			case aborted:
				return step{local: execAbort}
			}
			return step{local: []byte("*0\r\n")}
		}
		if !pinned {
			break
		}
		st := step{pin: true, set: func() { s.multi, s.aborted, s.watching = false, false, false }}
		if name == "EXEC" && s.multi && s.aborted {
			st.send, st.answer = []string{"DISCARD"}, execAbort
		}
		return st
	case "WATCH":
		return step{pin: true, set: func() { s.watching = true }}
	case "UNWATCH":
		if pinned {
			return step{pin: true, set: func() { s.watching = s.multi && s.watching }}
		}
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
		return step{pin: true, confirms: max(len(args)-1, 1)}
	}
	if kind := cmd.unsub; kind != "" {
		if len(args) == 1 { // counted when its first confirmation comes (conn.deliver)
			return step{pin: true, confirms: 1, all: true}
		}
		return step{pin: true, confirms: len(args) - 1}
	}
	if blocks(cmd, args) {
		return step{pin: true, block: true}
	}
	return step{pin: pinned, script: scripts[name]}
}

// scripts are the commands that run a script or function.
var scripts = map[string]bool{"EVAL": true, "EVALSHA": true, "EVAL_RO": true, "EVALSHA_RO": true, "FCALL": true, "FCALL_RO": true}

// unsubscribes maps each unsubscribe command to the kind of
// subscription it ends.
var unsubscribes = map[string]string{"UNSUBSCRIBE": "subscribe", "PUNSUBSCRIBE": "psubscribe", "SUNSUBSCRIBE": "ssubscribe"}

// target returns the connection to the node at addr a command goes to,
// pinning one if need be. When the client's commands change connection,
// the earlier ones' replies are awaited first, so the backend runs them
// in the order sent.
func (s *Session) target(pin, script bool, proto int, b *batch, addr string) (*conn, error) {
	if s.closed {
		return nil, errClosed
	}
	var c *conn
	switch {
	case pin && s.pin != nil:
		c = s.pin
	case pin:
		s.settle(b, nil)
		p, err := s.g.pin(s, proto, addr)
		if err != nil {
			return nil, err
		}
		s.pin, s.proto = p, proto
		c = p
	case s.g.cluster != nil:
		var err error
		if c, err = s.g.sharedConnAt(addr, s.tenant, proto); err != nil {
			return nil, err
		}
	default:
		if c = s.shared[proto-2]; c == nil || c.broken() {
			var err error
			if c, err = s.g.sharedConnAt(addr, s.tenant, proto); err != nil {
				return nil, err
			}
			s.shared[proto-2] = c
		}
		switch s.lane(c, s.route, s.out, script, addr, proto) {
		case followRoute:
			c = s.route
		case sideLane:
			var err error
			if c, err = s.g.sideConnAt(addr, s.tenant, proto); err != nil {
				return nil, err
			}
		}
	}
	s.settle(b, c)
	return c, nil
}

// Where a call goes among a tenant's shared connections (lane).
const (
	sharedLane  = iota // the shared connection
	followRoute        // the connection the client's replies are awaited on
	sideLane           // the side connection
)

// lane chooses, on a standalone backend, where a call goes given the
// tenant's shared connection c and the client's route (out replies
// awaited there); s.mu held. Where replies are awaited the call follows
// them rather than wait for them to switch connection (a script never
// goes on the side connection, though). Else, while a script runs on c,
// it goes on the side connection, so that it gets Redis's answer
// meanwhile (BUSY once the script runs too long; SCRIPT KILL reaches
// Redis), not a wait behind it.
func (s *Session) lane(c, route *conn, out int, script bool, addr string, proto int) int {
	switch {
	case out > 0 && route == c:
		return followRoute
	case out > 0 && !script && route != nil && route == s.g.laneIfOpen(addr, s.tenant, proto, 1):
		return followRoute
	case !script && c.scriptAhead():
		return sideLane
	}
	return sharedLane
}

// settle waits for the replies awaited from another connection than c
// (s.mu held; the batch is written first).
func (s *Session) settle(b *batch, c *conn) {
	if s.route == c || s.out == 0 {
		s.route = c
		return
	}
	s.mu.Unlock()
	b.flush()
	s.mu.Lock()
	if s.loopCalls && s.route != nil && s.out > 0 {
		over := make(chan struct{})
		defer close(over)
		s.route.Aside(over)
	}
	for s.out > 0 {
		s.drained.Wait()
	}
	s.route = c
}

// apply records a sent command's state change (s.mu held).
func (s *Session) apply(st step, c *conn) {
	if st.set != nil {
		st.set()
	}
	if st.confirms > 0 {
		c.subscribed.Store(true)
	}
}

// undo gives back a pin taken for a command that was not sent.
func (s *Session) undo() {
	if s.pin != nil && s.out == 0 && !s.needsPin() {
		pin := s.pin
		s.pin = nil
		s.g.unpin(pin, s.tenant.User, s.proto, true)
	}
}

// needsPin reports whether the client holds connection state (s.mu held).
func (s *Session) needsPin() bool {
	return s.multi || s.watching || s.tracking || s.selected || len(s.subs) > 0
}

// newWaiter makes w the waiter of call i, sent on c: done answers it
// (reply) and, once nothing is awaited and no state is held, gives the
// pinned connection back. In a cluster, a MOVED or ASK is followed: cmd
// goes again to the node named.
func (s *Session) newWaiter(w *waiter, i int, c *conn, st step, reply Reply, cmd []string, proto int) *waiter {
	*w = waiter{s: s, i: i, reply: reply, c: c, cmd: cmd, proto: proto,
		pinned: st.pin, answer: st.answer, confirms: st.confirms, unsubAll: st.all, block: st.block, script: st.script}
	return w
}

// done takes the waiter's reply frame, or the error that broke its
// connection.
func (w *waiter) done(f []byte, err error) {
	s := w.s
	if w.reply == nil {
		return // nobody waits for it (MULTI sent ahead, ASKING)
	}
	if err == nil && s.g.cluster != nil && len(f) > 0 && f[0] == '-' && !w.pinned && !w.streamed && s.follow(w, f) {
		return
	}
	if err != nil {
		s.g.errs.Add(1)
		f = brokenFrame(err)
	} else if w.answer != nil {
		f = w.answer
	}
	if w.early != nil {
		f = append(w.early, f...)
	}
	s.mu.Lock()
	s.out--
	if s.out == 0 {
		s.drained.Broadcast()
	}
	pin := s.pin
	release := pin == w.c && s.out == 0 && !s.needsPin()
	if release {
		s.pin = nil
	}
	s.mu.Unlock()
	if release {
		s.g.unpin(pin, s.tenant.User, s.proto, err == nil)
	}
	w.reply(w.i, f, false)
	if err != nil && pin == w.c && w.c != nil {
		s.kill() // its MULTI or subscription cannot go on silently
	}
}

// subscriptions returns how many subscriptions of a kind ("subscribe",
// ...) the client has (as confirmed so far).
func (s *Session) subscriptions(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs[kind])
}

// confirmed follows the client's subscriptions from the backend's
// confirmations.
func (s *Session) confirmed(c *conn, kind, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.Contains(kind, "unsubscribe") {
		kind = strings.Replace(kind, "unsubscribe", "subscribe", 1)
		delete(s.subs[kind], channel)
		if len(s.subs[kind]) == 0 {
			delete(s.subs, kind)
		}
	} else {
		if s.subs == nil {
			s.subs = map[string]map[string]bool{}
		}
		if s.subs[kind] == nil {
			s.subs[kind] = map[string]bool{}
		}
		s.subs[kind][channel] = true
	}
	if len(s.subs) == 0 {
		c.subscribed.Store(false)
	}
}

// pinBroken ends a session whose pinned connection broke: the client is
// told (unless a reply already carried the error) and disconnected.
func (s *Session) pinBroken(c *conn, answered bool) {
	s.mu.Lock()
	if s.pin != c {
		s.mu.Unlock()
		return
	}
	s.pin = nil
	s.multi, s.watching, s.tracking, s.selected, s.subs = false, false, false, false, nil
	s.mu.Unlock()
	s.g.givePin(s.tenant.User)
	c.owner.Store(nil)
	if !answered {
		s.push(brokenFrame(c.err))
	}
	s.kill()
}

// sortReachesOwn returns an option of a SORT call (name: its upper-case
// name) whose pattern may form one of rlproxy's keys (from an element
// such as "rl:{api:0}:c").
func (s *Session) sortReachesOwn(name string, args []string) (SortPattern, bool) {
	if s.g.o.KeyPrefix == "" {
		return SortPattern{}, false
	}
	for _, p := range sortPatterns(name, args) {
		if p.mayReach(s.g.o.KeyPrefix) {
			return p, true
		}
	}
	return SortPattern{}, false
}

// ownKey reports whether one of a command's keys is one of rlproxy's.
func (s *Session) ownKey(keys []string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, s.g.o.KeyPrefix) {
			return true
		}
	}
	return false
}
