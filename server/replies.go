package server

import (
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// replies is a client's reply queue, the one way its replies go out: one
// slot per command, in the order the commands came. A reply decided at
// once (PING, RL.SETRATE) fills its slot as it is added; one decided
// later, on another goroutine (a batch call of RL.ACQUIRE, a forwarded
// command), reserves its slot and fills it then. Whoever fills the head
// slot (the last of a run of fills) writes it and every ready slot after
// it, so no goroutine sits waiting to write and a reply never overtakes
// an earlier one. While the
// connection's reader takes a pipeline it holds the queue: fills are kept
// until it releases, so a pipeline's replies go out in one write. A lone
// call is a pipeline of one. (The shape of codis proxy's Session.)
type replies struct {
	w     io.Writer
	onBig func() // a big buffer was dropped: memory to give back
	// For forwarded commands' replies (writeAsync): the client's socket,
	// written without blocking (nil under TLS); the most bytes queued
	// behind a write that waits (0: no bound); what closes the client
	// past it.
	raw   syscall.RawConn
	limit int
	over  func()
	stall time.Duration // how long a streamed reply waits on a client that takes none of it

	mu       sync.Mutex
	changed  sync.Cond // a slot was filled, or the queue written
	out      []byte    // ready replies at the head, not yet written
	spare    []byte
	slots    []slot // after out, in order; slots[0] is not filled
	slotMem  []slot // the array slots starts in when it is empty
	first    uint64 // the sequence number of slots[0]
	open     int    // reserved slots not yet filled
	openFwd  int    // of which forwarded commands' (passthrough)
	held     bool   // the reader is taking a pipeline
	writing  bool   // a goroutine is writing out
	stalled  bool   // the socket did not take a write at once: a goroutine writes the rest
	inFlight int    // bytes of the write under way
	// A big reply is being streamed (fillPart): written as it comes, even
	// while the reader holds the queue (it may be the one streaming).
	streaming bool
	// Pieces of writes done, ever: a client that reads makes them (counted
	// without mu, while a write is under way).
	written atomic.Uint64
	dead    bool // over limit: replies are dropped, the client closed
}

type slot struct {
	b      []byte
	proto  int  // the client's protocol when its command came
	fwd    bool // a forwarded command's
	filled bool
	mute   bool // its reply is dropped (CLIENT REPLY OFF|SKIP)
	parted bool // muted, and parts of a streamed reply were dropped
}

func newReplies(w io.Writer, onBig func()) *replies {
	q := &replies{w: w, onBig: onBig}
	q.changed.L = &q.mu
	return q
}

// hold keeps fills from writing until release.
func (q *replies) hold() {
	q.mu.Lock()
	q.held = true
	q.mu.Unlock()
}

// release writes what is ready and lets fills write again.
func (q *replies) release() {
	q.mu.Lock()
	q.held = false
	q.flush()
	q.mu.Unlock()
}

// releaseAsync is release for the event loop, which must never wait on
// one client: what the socket does not take at once is written by a
// goroutine, and a client past its limit is closed.
func (q *replies) releaseAsync() {
	q.mu.Lock()
	q.held = false
	q.mu.Unlock()
	q.writeAsync()
}

// backedUp reports whether a write waits for the client's socket to
// take more (it did not take a write at once).
func (q *replies) backedUp() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stalled
}

// add queues a reply decided at once.
func (q *replies) add(v any, proto int) {
	q.mu.Lock()
	if len(q.slots) == 0 {
		q.out = appendReply(q.out, v, proto)
	} else {
		q.slots = append(q.slots, slot{b: appendReply(nil, v, proto), filled: true})
	}
	q.mu.Unlock()
}

// reserve queues n slots for replies decided later and returns the
// sequence number of the first (the others follow it). fwd marks
// forwarded commands', which the gateway keeps in order by itself.
func (q *replies) reserve(n, proto int, fwd bool) uint64 {
	q.mu.Lock()
	seq := q.first + uint64(len(q.slots))
	if len(q.slots) == 0 {
		// Filled slots leave from the front: start again at the front of
		// the array rather than append past its end into a new one.
		q.slots = q.slotMem[:0]
	}
	for range n {
		q.slots = append(q.slots, slot{proto: proto, fwd: fwd})
	}
	if len(q.slots) == n {
		q.slotMem = q.slots[:0]
	}
	q.open += n
	if fwd {
		q.openFwd += n
	}
	q.mu.Unlock()
	return seq
}

// mute makes a reserved slot's reply be dropped when it is filled.
func (q *replies) mute(seq uint64) {
	q.mu.Lock()
	if i := int(seq - q.first); i >= 0 && i < len(q.slots) {
		q.slots[i].mute = true
	}
	q.mu.Unlock()
}

// push queues a frame the backend sent by itself (a Pub/Sub message)
// after the replies before it, and writes what is ready.
func (q *replies) push(frame []byte) {
	q.add(rawFrame(frame), 0)
	q.writeAsync()
}

// fillQuiet answers a reserved slot, at most once, without writing:
// write follows once a run of replies is in (a batch's, or those read
// from a backend connection at once), so they go out in one write.
func (q *replies) fillQuiet(seq uint64, v any) {
	q.mu.Lock()
	q.put(seq, v, nil)
	q.mu.Unlock()
}

// fillFrame is fillQuiet for a reply already encoded (a forwarded
// command's frame, copied: the caller may reuse it).
func (q *replies) fillFrame(seq uint64, frame []byte) {
	q.mu.Lock()
	q.put(seq, nil, frame)
	q.mu.Unlock()
}

// write writes the ready head, unless another goroutine is writing or
// the reader holds the queue (then that one writes it).
func (q *replies) write() {
	q.mu.Lock()
	q.flush()
	q.mu.Unlock()
}

// put fills a slot with v, or with frame when it is not nil (mu held).
func (q *replies) put(seq uint64, v any, frame []byte) {
	i := int(seq - q.first)
	if i < 0 || i >= len(q.slots) || q.slots[i].filled {
		return
	}
	q.open--
	s := &q.slots[i]
	if s.fwd {
		q.openFwd--
	}
	if s.mute { // CLIENT REPLY OFF|SKIP: only the pushes Redis sent before it go
		frame, v = pushesBefore(frame), rawFrame(nil)
		if s.parted { // the last part of a big reply: no frame of its own
			frame = nil
		}
	}
	switch {
	case i == 0 && frame != nil:
		q.out = append(q.out, frame...)
	case i == 0:
		q.out = appendReply(q.out, v, s.proto)
	case frame != nil: // after the parts that came before, if any
		s.b, s.filled = append(s.b, frame...), true
	default:
		s.b, s.filled = appendReply(nil, v, s.proto), true
	}
	if i == 0 {
		q.slots[0] = slot{}
		q.slots, q.first = q.slots[1:], q.first+1
		for len(q.slots) > 0 && q.slots[0].filled {
			q.out = append(q.out, q.slots[0].b...)
			q.slots[0] = slot{}
			q.slots, q.first = q.slots[1:], q.first+1
		}
	}
	q.changed.Broadcast()
}

// writeAsync writes the ready head like write, but never blocks the
// caller (a backend connection's reader, shared by many clients): what
// the client's socket does not take at once is written by a goroutine of
// its own. A client whose replies queued behind that write, with it,
// grow past limit (it sends and does not read) is closed and its replies dropped,
// like Redis's client-output-buffer-limit.
func (q *replies) writeAsync() {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.dead:
		q.out = q.out[:0]
		return
	case q.pastLimit():
		q.kill()
		return
	}
	q.startWrite()
	if q.pastLimit() { // what the socket did not take at once is past the limit too
		q.kill()
	}
}

// pastLimit reports whether the client holds more than its limit behind a
// write that waits (mu held).
func (q *replies) pastLimit() bool {
	return q.writing && q.limit > 0 && len(q.out)+q.inFlight > q.limit
}

// kill drops the replies of a client past its limit and closes it (mu
// held).
func (q *replies) kill() {
	q.dead, q.out = true, nil
	q.changed.Broadcast()
	go q.over()
}

// startWrite writes what the socket takes at once and leaves the rest
// to a goroutine of its own (mu held).
func (q *replies) startWrite() {
	if len(q.out) == 0 || (q.held && !q.streaming) || q.writing {
		return // the reader or the writer writes it
	}
	if q.raw != nil {
		n := tryWrite(q.raw, q.out)
		if n > 0 {
			q.written.Add(1)
		}
		q.out = q.out[:copy(q.out, q.out[n:])]
		if len(q.out) == 0 {
			q.changed.Broadcast()
			return
		}
	}
	q.writing, q.stalled = true, true
	go func() {
		q.mu.Lock()
		q.writing = false
		q.flush()
		q.stalled = false
		q.mu.Unlock()
	}()
}

// fillPart adds a part of a big forwarded reply to its slot (the parts
// come in order; fillFrame adds the last) and writes what is ready. It
// returns once the client holds less than limit bytes — its queue and
// the write under way, the part counted — or false when the client is
// closed: it had held that much for stall with no write done, so it
// stopped reading (or it was closed before). One big reply then costs
// the client's limit, not its size.
func (q *replies) fillPart(seq uint64, part []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := int(seq - q.first)
	if q.dead || i < 0 || i >= len(q.slots) {
		return false
	}
	q.streaming = true
	defer func() { q.streaming = false }()
	if q.slots[i].mute {
		q.slots[i].parted = true
		return true // dropped (CLIENT REPLY OFF|SKIP)
	}
	if i == 0 {
		q.out = append(q.out, part...)
	} else {
		q.slots[i].b = append(q.slots[i].b, part...)
	}
	q.startWrite()
	if q.limit <= 0 {
		return true
	}
	held := func() int {
		n := len(q.out) + q.inFlight
		if i := int(seq - q.first); i > 0 && i < len(q.slots) {
			n += len(q.slots[i].b)
		}
		return n
	}
	// Room for one more part like this one: so the queue never grows past
	// limit while the reply lasts.
	seen, since := q.written.Load(), time.Now()
	for !q.dead && held() > 0 && held()+len(part) > q.limit {
		if w := q.written.Load(); w != seen {
			seen, since = w, time.Now()
		} else if time.Since(since) >= q.stall {
			q.kill()
			break
		}
		q.startWrite()
		wake := time.AfterFunc(max(q.stall/8, time.Millisecond), func() {
			q.mu.Lock()
			q.changed.Broadcast()
			q.mu.Unlock()
		})
		q.changed.Wait()
		wake.Stop()
	}
	return !q.dead
}

// writePiece is the most flush writes at once (see flush).
const writePiece = 256 << 10

// flush writes out (called with mu held, which it lets go while writing).
func (q *replies) flush() {
	if q.dead {
		q.out = q.out[:0]
	}
	for len(q.out) > 0 && (!q.held || q.streaming) && !q.writing {
		q.writing = true
		b := q.out
		q.out = q.spare[:0]
		q.inFlight = len(b)
		q.mu.Unlock()
		// A write error means the client is gone: its reader sees it too.
		// In pieces, each counted: a client that reads a big write slowly
		// is not one that stopped reading (fillPart).
		for rest := b; len(rest) > 0; {
			n, err := q.w.Write(rest[:min(len(rest), writePiece)])
			q.written.Add(1)
			if err != nil {
				break
			}
			rest = rest[n:]
		}
		q.mu.Lock()
		q.writing, q.inFlight = false, 0
		if cap(b) > bigReply {
			b = nil // not kept for the rest of the connection's life
			q.onBig()
		}
		q.spare = b[:0]
	}
	q.changed.Broadcast()
}

// idle reports whether every reserved slot is filled.
func (q *replies) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.open == 0
}

// waitFilled returns once every reserved slot is filled: a client's
// commands run in order, so the next runs after the earlier are decided.
func (q *replies) waitFilled() {
	q.mu.Lock()
	for q.open > 0 {
		q.changed.Wait()
	}
	q.mu.Unlock()
}

// waitUnforwarded returns once every reserved slot but forwarded
// commands' is filled.
func (q *replies) waitUnforwarded() {
	q.mu.Lock()
	for q.open > q.openFwd {
		q.changed.Wait()
	}
	q.mu.Unlock()
}

// deciding reports whether a reply of one of rlproxy's own commands is
// still to be decided: a forwarded command waits for it (waitUnforwarded).
func (q *replies) deciding() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.open > q.openFwd
}

// waitWritten returns once every reply is written (before a QUIT closes
// the connection, or a protocol error is written after them).
func (q *replies) waitWritten() {
	q.mu.Lock()
	for len(q.slots) > 0 || len(q.out) > 0 || q.writing {
		if len(q.slots) == 0 && !q.writing && !q.held {
			q.flush()
			continue
		}
		q.changed.Wait()
	}
	q.mu.Unlock()
}

// waiting reports whether a reply is still to be decided (a client
// waiting in RL.ACQUIRE is not idle).
func (q *replies) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.open > 0
}
