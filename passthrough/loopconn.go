package passthrough

import (
	"bufio"
	"errors"
	"syscall"

	"github.com/rlproxy/rlproxy/internal/evloop"
	"github.com/rlproxy/rlproxy/internal/resp"
)

// errWouldBlock: the socket of a connection the loop reads has nothing
// to read now.
var errWouldBlock = errors.New("would block")

// readInLoop makes the event loop the reader of a new lazy connection
// (nothing is awaited on it yet): it reads the replies as they come
// (Ready), and send never starts a reader goroutine.
func (c *conn) readInLoop(l *evloop.Loop) error {
	if c.r.Buffered() > 0 {
		return errors.New("bytes nobody asked for after the setup")
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	if c.fd, err = descriptor(rc); err != nil {
		return err
	}
	c.loop, c.lr, c.lazy, c.reading = l, newLoopReader(c.nc, rc), true, true
	if canPeek {
		// Redis may close it while idle (its timeout, CLIENT KILL, a
		// restart) just before a command comes, ahead of the loop's
		// seeing it: broken checks, as for a connection nobody reads.
		c.peek = newPeeker(rc)
	}
	c.r = bufio.NewReaderSize(c.lr, 32<<10)
	return c.enterLoop()
}

// enterLoop adds the connection to the loop's set (again).
func (c *conn) enterLoop() error {
	c.lr.nowait.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if err := c.loop.Add(c.fd, c); err != nil {
		return err
	}
	c.inLoop = true
	return nil
}

// Ready is the loop's: it makes one read of what the socket has and
// hands out every whole reply buffered, then writes the commands queued
// meanwhile (one write for all the clients' commands that came during
// the round trip). A reply bigger than the buffer goes to a goroutine.
func (c *conn) Ready() {
	var got flushing
	read := false
	for {
		if b, _ := c.r.Peek(c.r.Buffered()); len(b) > 0 && resp.FrameIn(b, maxFrameBytes) > 0 {
			// Whole and under the buffer's size: readOne reads nothing more.
			if !c.readOne(&got) {
				return
			}
			continue
		}
		if read {
			break
		}
		if c.r.Buffered() == c.r.Size() {
			got.flush()
			c.readBig()
			return
		}
		_, err := c.r.Peek(c.r.Buffered() + 1)
		read = true
		if err == errWouldBlock {
			break
		}
		if err != nil {
			got.flush()
			c.fail(err)
			return
		}
	}
	got.flush()
	c.writeQueued()
}

// readBig leaves a reply too big for the buffer to a goroutine, which
// reads it (streamed, stream.go) and what is buffered after it, then
// gives the connection back to the loop.
func (c *conn) readBig() {
	c.leaveLoop()
	go c.readAside(closed)
}

// closed is a channel closed from the start.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Aside is the loop's, when it is held (evloop.Hold: a client's command
// that waits for its earlier replies before it is sent): the replies
// awaited here are read by a goroutine until over is closed.
func (c *conn) Aside(over <-chan struct{}) {
	c.mu.Lock()
	awaited := c.inLoop && len(c.waiters) > 0
	c.mu.Unlock()
	if awaited {
		c.leaveLoop()
		go c.readAside(over)
	}
}

// leaveLoop takes the connection out of the loop's set, for a goroutine
// to read it (the loop's goroutine).
func (c *conn) leaveLoop() {
	c.mu.Lock()
	c.inLoop = false
	c.mu.Unlock()
	c.loop.Remove(c.fd)
	c.lr.nowait.Store(false)
}

// readAside reads replies on a goroutine of its own, and gives the
// connection back to the loop when it has handed out all it read and
// over is closed or no reply is awaited.
func (c *conn) readAside(over <-chan struct{}) {
	var got flushing
	for c.readOne(&got) {
		if c.r.Buffered() > 0 {
			continue
		}
		got.flush()
		if !c.writeQueued() {
			return
		}
		select {
		case <-over:
		default:
			if !c.idle() {
				continue
			}
		}
		if err := c.enterLoop(); err != nil {
			c.fail(err)
		}
		return
	}
}
