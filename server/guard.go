package server

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/rlproxy/rlproxy/internal/busypoll"
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

// guardListener checks every client's byte stream before redcon parses
// it. redcon trusts the lengths in RESP headers: "$9223372036854775807"
// overflows its index arithmetic and panics (in its own goroutine, so the
// whole process dies), "*99999999999" spins one core for minutes, and
// endless bytes without a newline grow its buffer without bound.
type guardListener struct {
	net.Listener
	poller *busypoll.Poller
}

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// A client connection polls only while no request is in progress.
	return &guardedConn{Conn: l.poller.Wrap(c, 0)}, nil
}

// guardedConn passes a client's bytes through while following the RESP
// framing. At the first byte that breaks it, Read returns what came
// before; the next Read writes a Redis-worded protocol error to the
// client and fails, so redcon closes the connection. redcon never sees
// a complete bad header.
type guardedConn struct {
	net.Conn
	st   frameState
	n    int64 // the header number being read; inline: the line's length
	args int64 // arguments left in the current command
	body int64 // bytes left of the current argument, with its CRLF
	err  error // a protocol error to report at the next Read
	// beforeError, when set, runs before the error is written.
	beforeError func()
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
		if c.beforeError != nil {
			c.beforeError()
		}
		// Best effort: the connection is closed right after.
		_, _ = c.Conn.Write([]byte("-ERR Protocol error: " + c.err.Error() + "\r\n"))
		return 0, fmt.Errorf("%w: %w", errBadFrame, c.err)
	}
	n, err := c.Conn.Read(p)
	if ok := c.scan(p[:n]); ok < n {
		if ok == 0 {
			return c.Read(p) // reports c.err
		}
		return ok, nil
	}
	return n, err
}

// scan follows the framing through b and returns how many bytes of it
// are good (all of b, or up to the first bad byte, with c.err set).
func (c *guardedConn) scan(b []byte) int {
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch c.st {
		case stStart:
			if ch == '*' {
				c.st, c.n = stCount, -1
			} else if ch != '\n' {
				c.st, c.n = stInline, 1
			}
		case stInline:
			if ch == '\n' {
				c.st = stStart
			} else if c.n++; c.n > maxInline {
				return c.fail(i, "too big inline request")
			}
		case stCount, stSize:
			what := "invalid multibulk length"
			if c.st == stSize {
				what = "invalid bulk length"
			}
			switch {
			case ch >= '0' && ch <= '9':
				c.n = max(c.n, 0)*10 + int64(ch-'0')
				if (c.st == stCount && c.n > maxArgs) || c.n > maxBulk {
					return c.fail(i, what)
				}
			case ch == '\r' && c.st == stCount && c.n > 0:
				c.st = stCountLF
			case ch == '\r' && c.st == stSize && c.n >= 0: // "$0": an empty argument
				c.st = stSizeLF
			default:
				return c.fail(i, what)
			}
		case stCountLF:
			if ch != '\n' {
				return c.fail(i, "invalid multibulk length")
			}
			c.st, c.args = stBulk, c.n
		case stBulk:
			if ch != '$' {
				return c.fail(i, fmt.Sprintf("expected '$', got %q", ch))
			}
			c.st, c.n = stSize, -1
		case stSizeLF:
			if ch != '\n' {
				return c.fail(i, "invalid bulk length")
			}
			c.st, c.body = stBody, c.n+2
		case stBody:
			skip := min(c.body, int64(len(b)-i))
			c.body -= skip
			i += int(skip) - 1
			if c.body == 0 {
				if c.args--; c.args == 0 {
					c.st = stStart
				} else {
					c.st = stBulk
				}
			}
		}
	}
	return len(b)
}

// Write skips empty writes: redcon flushes after every read, also when
// the reply went out by itself (a lone batch call: handle).
func (c *guardedConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return c.Conn.Write(b)
}

func (c *guardedConn) fail(at int, msg string) int {
	c.err = errors.New(msg)
	return at
}

// SyscallConn exposes the client's socket, so that a waiting client's
// disconnect can be noticed without reading from it (watch_linux.go).
func (c *guardedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}
