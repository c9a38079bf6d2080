package passthrough

import (
	"errors"
	"strconv"
)

// A bulk reply of streamMin bytes or more is relayed in parts of
// streamPart bytes as it is read, never held whole: the client's reply
// queue takes each part once it holds less than passthrough_client_buffer
// (a client that stops taking them is closed), so rlproxy's memory per
// client stays bounded whatever the reply's size (up to Redis's 512 MB).
const (
	streamMin  = 1 << 20
	streamPart = 256 << 10
)

// stream relays the next frame in parts when it is a big bulk reply to a
// command that takes its reply as it comes, and reports whether it did;
// false (nil error): the caller reads the frame whole. Meanwhile the
// command stays at the head, exempt from the reply timeout: the client's
// reading paces the connection, and the client is closed when it stops.
func (c *conn) stream(got *flushing) (bool, error) {
	size, hdr, err := c.bigBulk()
	if err != nil || size < 0 {
		return false, err
	}
	c.mu.Lock()
	if len(c.waiters) == 0 || !c.waiters[0].streams() {
		c.mu.Unlock()
		return false, nil
	}
	w := c.waiters[0]
	w.block, w.streamed = true, true
	c.mu.Unlock()

	header := append([]byte(nil), c.peeked(hdr)...)
	_, _ = c.r.Discard(hdr)
	wanted := w.reply(w.i, header, true)
	buf := make([]byte, streamPart)
	last := []byte{} // the part that completes the reply (empty when dropped)
	for left := size + 2; left > 0; {
		part := buf[:min(left, int64(len(buf)))]
		if rest := left - int64(len(part)); rest > 0 && rest < 2 {
			part = part[:left-2] // the last part holds the whole CRLF
		}
		if !wanted { // the client is gone: the rest is read and dropped
			n, err := c.r.Discard(len(part))
			if err != nil {
				return true, err
			}
			left -= int64(n)
			continue
		}
		if _, err := readFull(c.r, part); err != nil {
			return true, err
		}
		if left -= int64(len(part)); left == 0 {
			if len(part) < 2 || part[len(part)-2] != '\r' || part[len(part)-1] != '\n' {
				return true, errors.New("bad bulk reply ending")
			}
			last = part
			break
		}
		wanted = w.reply(w.i, part, true)
	}
	c.mu.Lock()
	c.waiters[0] = nil
	c.waiters = c.waiters[1:]
	c.mu.Unlock()
	w.done(last, nil)
	got.add(w.s)
	return true, nil
}

// streams reports whether the waiter takes its reply in parts: a
// client's command whose reply goes out as the backend sent it.
func (w *waiter) streams() bool {
	return w.reply != nil && w.answer == nil && w.confirms == 0
}

// bigBulk peeks at the next frame: when it is a bulk string ('$') of
// streamMin bytes or more, its size and the length of its header line;
// else size -1. It reads no further than the frame's own header, so it
// never waits for bytes the backend has no reason to send.
func (c *conn) bigBulk() (size int64, hdr int, err error) {
	for k := 1; k <= 16; k++ {
		b, err := c.r.Peek(k)
		if err != nil {
			return -1, 0, err
		}
		if b[0] != '$' {
			return -1, 0, nil
		}
		if b[k-1] != '\n' {
			continue
		}
		if k < 4 || b[k-2] != '\r' {
			return -1, 0, nil
		}
		n, err := strconv.ParseInt(string(b[1:k-2]), 10, 64)
		if err != nil || n < streamMin || n > maxFrameBytes {
			return -1, 0, nil // readFrame takes it, or says what is wrong
		}
		return n, k, nil
	}
	return -1, 0, nil
}

// peeked returns the next n bytes, already buffered, without reading.
func (c *conn) peeked(n int) []byte {
	b, _ := c.r.Peek(n)
	return b
}
