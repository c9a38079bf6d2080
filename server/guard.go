package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits on what a client may send, as Redis's own: a command of at most
// maxArgs arguments, each at most maxBulk bytes; an inline command (no
// RESP framing, like a telnet user's "PING") of at most maxInline bytes.
const (
	maxArgs   = 1024 * 1024
	maxBulk   = 512 * 1024 * 1024
	maxInline = 64 * 1024
)

// errBadFrame ends a connection that broke the RESP framing.
var errBadFrame = errors.New("protocol error")

// guardedConn checks a client's byte stream before redcon parses it.
// redcon trusts the lengths in RESP headers: "$9223372036854775807"
// overflows its index arithmetic and panics (in its own goroutine, so the
// whole process dies), "*99999999999" spins one core for minutes, and
// endless bytes without a newline grow its buffer without bound.
//
// So the guard passes a client's bytes through while following the RESP
// framing and the request limits: before AUTH (when a password is
// required) Redis's 10 arguments of 16 KiB, after it max_request_bytes.
// A header over a limit is refused as soon as it is read, so the body it
// announces is never read. At the first byte that breaks the framing or
// a limit, Read returns what came before; the next Read writes a
// Redis-worded protocol error to the client and fails, so redcon closes
// the connection. redcon never sees a complete bad header.
//
// Before AUTH, Read hands redcon one command at a time (holding back the
// rest), so that a pipelined "AUTH pw" followed by a big command is
// judged as Redis judges it: the big command after the AUTH is done.
type guardedConn struct {
	net.Conn
	srv    *Server
	client *client // set by Server.accept before the first Read

	st   frameState
	n    int64 // the header number being read; inline: the line's length
	args int64 // arguments left in the current command
	body int64 // bytes left of the current argument, with its CRLF
	size int64 // bytes of the current command so far (RESP commands)
	// The current command's first word (its length, and its first bytes:
	// a RESET ends the authentication the next command is judged by; a
	// command rlproxy owns is bounded by max_request_bytes).
	count, word1 int64
	word         [24]byte
	bounded      bool // max_request_bytes holds for the current command
	cr           bool // the current argument's CRLF began with CR
	neg          bool // the command's count is negative ("*-10": a no-op, as in Redis)
	hs           int  // where the current command's header began in the buffer scanned
	bs           int  // where the current argument's header began in the buffer scanned
	bulkCut      bool // the buffer scanned ended in an argument's header: held back till it is whole
	taking       bool // the current argument is being taken out (bigarg.go)
	bigs         []bigArg
	big          bool  // this connection sent a big request (memory to give back)
	err          error // a protocol error to report at the next Read

	held    []byte // bytes read but not yet handed to redcon (before AUTH)
	heldErr error  // the read error that came with them
	partial bool   // held is the start of a command's header, cut short: read on

	deadline   bool // a read deadline (timeout) is set
	handshaken bool // TLS only
	closed     atomic.Bool
}

// frameLimits are the limits a Read applies, fixed for its bytes.
type frameLimits struct {
	preAuth    bool  // not authenticated and authentication is required
	maxRequest int64 // bytes of one RESP command rlproxy owns
	// forwarding: commands rlproxy does not own go to the gateway, as
	// large as Redis takes them (512 MB an argument); max_request_bytes
	// bounds the others, once the command's name is read.
	forwarding bool
}

type frameState int

const (
	stStart   frameState = iota // at the start of a command
	stInline                    // in an inline command's line
	stCount                     // in "*<count>"
	stCountLF                   // after "*<count>\r"
	stBulk                      // at the start of an argument: "$"
	stSize                      // in "$<size>"
	stSizeLF                    // after "$<size>\r"
	stBody                      // in an argument's bytes
)

func (c *guardedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		c.repliesFirst()
		// Best effort: the connection is closed right after.
		// As Redis words it: CR and LF (the byte "expected '$'" got) as spaces.
		msg := strings.NewReplacer("\r", " ", "\n", " ").Replace(c.err.Error())
		_, _ = c.Conn.Write([]byte("-ERR Protocol error: " + msg + "\r\n"))
		c.linger()
		return 0, fmt.Errorf("%w: %w", errBadFrame, c.err)
	}
	for c.taking && c.body > 2 && len(c.held) == 0 {
		// The rest of a big argument is read straight into its buffer.
		a := &c.bigs[len(c.bigs)-1]
		m, err := c.read(a.body[a.got:])
		a.got += m
		c.body -= int64(m)
		c.size += int64(m)
		if err != nil {
			return 0, err
		}
	}
	fromHeld := len(c.held) > 0 && !c.partial
	if !fromHeld && c.heldErr != nil {
		err := c.heldErr
		c.heldErr = nil
		return 0, err
	}
	var n int
	var err error
	if fromHeld {
		n = copy(p, c.held)
	} else {
		k := copy(p, c.held) // a header's start, held back
		c.held, c.partial = nil, false
		var m int
		if m, err = c.read(p[k:]); m == 0 {
			return 0, err
		}
		n = k + m
	}
	// scan may drop no-op commands ("*0\r\n"): p[:total] is what is left.
	ok, total := c.scan(p[:n], c.limits())
	// A header cut short: held back till it is whole.
	cut := c.st == stCount || c.st == stCountLF || c.bulkCut
	if cut && !c.bulkCut {
		c.st, c.neg = stStart, false
	}
	c.bulkCut = false
	switch {
	case c.err != nil:
		c.held = nil
		if ok == 0 {
			return c.Read(p) // reports c.err
		}
		return ok, nil
	case fromHeld:
		if c.held = c.held[ok+n-total:]; len(c.held) == 0 {
			c.held = nil
		}
		c.partial = cut && len(c.held) == total-ok
	case cut:
		c.held, c.partial = append([]byte(nil), p[ok:total]...), true
	case ok < total: // stopped after a whole command, before AUTH
		c.held, c.heldErr, err = append([]byte(nil), p[ok:total]...), err, nil
	}
	if ok == 0 && err == nil {
		return c.Read(p) // nothing whole yet
	}
	return ok, err
}

// Lingering close: after a protocol error the connection is closed for
// writing and what the client still sends is read and dropped for a
// moment (never kept), so that the kernel does not answer it with a
// reset that can destroy the error line before the client reads it.
const (
	lingerFor   = 250 * time.Millisecond
	lingerBytes = 256 * 1024
)

func (c *guardedConn) linger() {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(lingerFor))
	var buf [4096]byte
	for dropped := 0; dropped < lingerBytes; {
		n, err := c.Conn.Read(buf[:])
		if err != nil {
			return
		}
		dropped += n
	}
}

// limits returns the limits of the client's next bytes.
func (c *guardedConn) limits() frameLimits {
	l := frameLimits{maxRequest: c.srv.limits().MaxRequestBytes}
	l.preAuth = c.client != nil && !c.client.authed && c.srv.access.Load().required
	l.forwarding = c.srv.opts.Forward != nil && !l.preAuth
	return l
}

// read reads from the connection, closing it after the idle timeout
// unless the client has a request in progress (one waiting in RL.ACQUIRE
// is not idle), and bounding a TLS handshake.
func (c *guardedConn) read(p []byte) (int, error) {
	if tc, ok := c.Conn.(*tls.Conn); ok && !c.handshaken {
		_ = tc.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
		if err := tc.Handshake(); err != nil {
			c.srv.tlsHandshakeFailed(c.Conn.RemoteAddr(), err)
			return 0, err
		}
		_ = tc.SetDeadline(time.Time{})
		c.handshaken = true
	}
	idleSince := time.Now()
	for {
		timeout := c.srv.limits().Timeout
		if timeout > 0 {
			_ = c.Conn.SetReadDeadline(idleSince.Add(timeout))
			c.deadline = true
		} else if c.deadline {
			_ = c.Conn.SetReadDeadline(time.Time{})
			c.deadline = false
		}
		n, err := c.Conn.Read(p)
		if n > 0 || !c.deadline || !isTimeout(err) {
			return n, err
		}
		switch timeout = c.srv.limits().Timeout; {
		case c.client != nil && c.client.replies.waiting():
			idleSince = time.Now() // waiting for a reply is not idling
		case timeout == 0 || time.Since(idleSince) < timeout:
			// The timeout was turned off or raised (Reload) meanwhile.
		default:
			return n, err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close closes the connection once, giving back its max_clients slot and,
// when it sent a big request, the memory that held it.
func (c *guardedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.srv.clientCount.Add(-1)
		if c.big {
			c.srv.memory.soon()
		}
	}
	return c.Conn.Close()
}

// scan follows the framing through b and returns how many bytes of it
// are good: all of b; or up to the first bad byte, with c.err set; or,
// before AUTH, up to the end of the first whole command in b; or up to
// an inline command, which is handed over by itself; or up to a
// command's header cut short (c.st tells). Commands of no arguments
// ("*0\r\n", "*-10\r\n": Redis skips them, redcon would refuse them)
// are cut out of b: total is b's length after that.
func (c *guardedConn) scan(b []byte, lim frameLimits) (good, total int) {
	for i := 0; i < len(b); i++ {
		ch := b[i]
		c.size++
		switch c.st {
		case stStart:
			if ch == '*' {
				c.st, c.n, c.size, c.neg, c.hs = stCount, -1, 1, false, i
			} else if ch != '\n' && i > 0 {
				// An inline command goes to redcon on its own: a bad one
				// (unbalanced quotes) ends the connection inside redcon,
				// and the commands before it must be answered first.
				c.size--
				return i, len(b)
			} else if ch != '\n' {
				c.st, c.n = stInline, 1
			}
		case stInline:
			if ch == '\n' {
				c.st = stStart
				// Inline commands (typed by hand) are handed over one by
				// one: one may be a RESET.
				if i+1 < len(b) {
					return i + 1, len(b)
				}
			} else if c.n++; c.n > maxInline {
				return c.fail(i, "too big inline request"), len(b)
			}
		case stCount, stSize:
			what := "invalid multibulk length"
			if c.st == stSize {
				what = "invalid bulk length"
			}
			switch {
			case ch == '-' && c.st == stCount && c.n == -1 && !c.neg:
				c.neg = true
			case ch >= '0' && ch <= '9':
				c.n = max(c.n, 0)*10 + int64(ch-'0')
				switch {
				case c.neg:
					if c.n > maxBulk {
						return c.fail(i, what), len(b)
					}
				case lim.preAuth && c.st == stCount && c.n > preAuthArgs:
					return c.fail(i, "unauthenticated multibulk length"), len(b)
				case lim.preAuth && c.st == stSize && c.n > preAuthBulk:
					return c.fail(i, "unauthenticated bulk length"), len(b)
				case (c.st == stCount && c.n > maxArgs) || c.n > maxBulk:
					return c.fail(i, what), len(b)
				}
			case ch == '\r' && c.st == stCount && c.n >= 0:
				c.st = stCountLF
			case ch == '\r' && c.st == stSize && c.n >= 0: // "$0": an empty argument
				c.st = stSizeLF
			default:
				return c.fail(i, what), len(b)
			}
		case stCountLF:
			if ch != '\n' {
				return c.fail(i, "invalid multibulk length"), len(b)
			}
			if c.neg || c.n == 0 { // a no-op: cut out
				b = append(b[:c.hs], b[i+1:]...)
				i, c.st = c.hs-1, stStart
				continue
			}
			// Each argument takes at least "$0\r\n\r\n". (Forwarding,
			// judged once the name says whether the command is bounded.)
			c.bounded = !lim.forwarding
			if c.bounded && c.size+6*c.n > lim.maxRequest {
				return c.fail(i, c.tooBig(lim)), len(b)
			}
			c.st, c.args, c.count = stBulk, c.n, c.n
		case stBulk:
			if ch != '$' {
				return c.fail(i, fmt.Sprintf("expected '$', got '%c'", ch)), len(b)
			}
			c.st, c.n, c.bs = stSize, -1, i
		case stSizeLF:
			if ch != '\n' {
				return c.fail(i, "invalid bulk length"), len(b)
			}
			// A name is bounded whatever the command.
			need := c.size + c.n + 2
			if c.bounded {
				need += 6 * (c.args - 1)
			}
			if (c.bounded || c.args == c.count) && need > lim.maxRequest {
				return c.fail(i, c.tooBig(lim)), len(b)
			}
			c.st, c.body = stBody, c.n+2
			if c.args == c.count {
				c.word1 = c.n
			} else if lim.forwarding && !c.bounded && c.n >= bigArgMin {
				b = c.take(b, c.bs, i+1, c.n)
				i = c.bs + len(markerHeader) + 3
			}
		case stBody:
			if c.body <= 2 {
				// The argument's CRLF: redcon refuses anything else, and
				// the commands before must be answered before it does.
				// Judged once both bytes are in, as redcon does.
				if c.body == 2 {
					c.cr = ch == '\r'
				} else if !c.cr || ch != '\n' {
					return c.fail(max(i-1, 0), "invalid bulk length"), len(b)
				}
				c.body--
			} else if c.taking {
				skip := min(c.body-2, int64(len(b)-i))
				b = c.fill(b, i, int(skip))
				c.body -= skip
				c.size += skip - 1
				i-- // b[i] is the next byte now
				continue
			} else {
				skip := min(c.body-2, int64(len(b)-i))
				if c.args == c.count && c.word1 <= int64(len(c.word)) {
					at := int(c.word1) + 2 - int(c.body) // where b[i] is in the word
					for k := 0; k < int(skip) && at+k < int(c.word1); k++ {
						c.word[at+k] = b[i+k]
					}
				}
				c.body -= skip
				c.size += skip - 1
				i += int(skip) - 1
			}
			if c.body == 0 {
				c.taking = false
				if c.args == c.count && lim.forwarding {
					c.bounded = c.owned()
					if c.bounded && c.size+6*(c.args-1) > lim.maxRequest {
						return c.fail(i, c.tooBig(lim)), len(b)
					}
				}
				if c.args--; c.args == 0 {
					c.st = stStart
					if c.size >= bigRequest {
						c.big = true
						c.srv.memory.soon()
					}
					// Before AUTH, and after a RESET, the next command is
					// judged once this one has run.
					if (lim.preAuth || c.isReset()) && i+1 < len(b) {
						return i + 1, len(b)
					}
				} else {
					c.st = stBulk
				}
			}
		}
	}
	if c.st == stCount || c.st == stCountLF {
		return c.hs, len(b)
	}
	if (c.st == stSize || c.st == stSizeLF) && lim.forwarding && c.args != c.count {
		// An argument's header is rewritten when it announces a big one
		// (bigarg.go): it goes to redcon whole, so held back till then.
		c.size -= int64(len(b) - c.bs)
		c.st, c.bulkCut = stBulk, true
		return c.bs, len(b)
	}
	return len(b), len(b)
}

// isReset reports whether the command just read is a RESET.
func (c *guardedConn) isReset() bool {
	return c.count == 1 && c.word1 == 5 && strings.EqualFold(string(c.word[:5]), "RESET")
}

// owned reports whether the current command (its first word read) is
// one rlproxy answers itself rather than forwards.
func (c *guardedConn) owned() bool {
	return c.word1 <= int64(len(c.word)) && c.srv.table.Lookup(string(c.word[:c.word1])) != nil
}

func (c *guardedConn) tooBig(lim frameLimits) string {
	return fmt.Sprintf("request is larger than max_request_bytes (%d bytes)", lim.maxRequest)
}

// Write is redcon's way out, used only for its protocol errors (replies
// go through the client's queue straight to c.Conn): they follow every
// reply of the commands before them. Empty writes (redcon flushes after
// every read) are skipped.
func (c *guardedConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.repliesFirst()
	return c.Conn.Write(b)
}

// repliesFirst waits until the replies of the commands read so far are
// written.
func (c *guardedConn) repliesFirst() {
	if c.client != nil {
		c.client.replies.waitWritten()
	}
}

func (c *guardedConn) fail(at int, msg string) int {
	c.err = errors.New(msg)
	return at
}

// SyscallConn exposes the client's socket (under TLS too), so that a
// waiting client's disconnect can be noticed without reading from it
// (watch_linux.go).
func (c *guardedConn) SyscallConn() (syscall.RawConn, error) {
	inner := c.Conn
	if tc, ok := inner.(*tls.Conn); ok {
		inner = tc.NetConn()
	}
	sc, ok := inner.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}
