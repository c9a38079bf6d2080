package passthrough

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/rlproxy/rlproxy/internal/resp"
)

// maxFrameBytes bounds one reply frame read from a backend (Redis's own
// proto-max-bulk-len is 512 MiB).
const maxFrameBytes = 512 << 20

// readFrame reads one complete RESP2 or RESP3 reply frame and returns its
// bytes as they came, so a reply is relayed unchanged whatever its type
// (maps, sets, doubles, big numbers, verbatim strings, attributes). An
// attribute ('|') is part of the frame that follows it.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var out []byte
	for pending := 1; pending > 0; pending-- {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errors.New("reply line too long")
			}
			return nil, err
		}
		if len(line) < 3 || line[len(line)-2] != '\r' {
			return nil, fmt.Errorf("bad reply line %q", truncate(line))
		}
		out = append(out, line...)
		switch line[0] {
		case '+', '-', ':', ',', '#', '_', '(':
		case '$', '=', '!':
			n, err := frameLen(line)
			if err != nil {
				return nil, err
			}
			if n < 0 {
				continue // $-1: the RESP2 null
			}
			start := len(out)
			out = append(out, make([]byte, n+2)...)
			if _, err := readFull(r, out[start:]); err != nil {
				return nil, err
			}
			if out[len(out)-2] != '\r' || out[len(out)-1] != '\n' {
				return nil, errors.New("bad bulk reply ending")
			}
		case '*', '~', '>', '%', '|':
			n, err := frameLen(line)
			if err != nil {
				return nil, err
			}
			if line[0] == '%' || line[0] == '|' {
				n *= 2
			}
			if line[0] == '|' {
				n++ // the value the attribute is about
			}
			if n > 0 {
				pending += int(n)
			}
		default:
			return nil, fmt.Errorf("bad reply type %q", line[0])
		}
		if len(out) > maxFrameBytes {
			return nil, errors.New("reply too large")
		}
	}
	return out, nil
}

// nextFrame returns the next reply frame: when the whole frame is in
// r's buffer, a view of it, valid only until r is read again (most
// replies: no copy); else a copy read by readFrame.
func nextFrame(r *bufio.Reader) ([]byte, error) {
	if b, _ := r.Peek(r.Buffered()); len(b) > 0 {
		if n := resp.FrameIn(b, maxFrameBytes); n > 0 {
			_, _ = r.Discard(n)
			return b[:n:n], nil
		}
	}
	return readFrame(r)
}

func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// frameLen reads the length of a header line ("$5\r\n", "*-1\r\n").
func frameLen(line []byte) (int64, error) {
	n, err := strconv.ParseInt(string(line[1:len(line)-2]), 10, 64)
	if err != nil || n < -1 || n > maxFrameBytes {
		return 0, fmt.Errorf("bad reply length %q", truncate(line))
	}
	return n, nil
}

func truncate(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// pubsubFrame reads a Pub/Sub frame: an array (RESP2) or push (RESP3)
// whose first element is a bulk string kind ("message", "subscribe",
// "invalidate", ...); for (un)subscribe confirmations also the channel.
// ok is false for any other frame.
func pubsubFrame(f []byte) (kind, channel string, push, ok bool) {
	if len(f) == 0 || (f[0] != '*' && f[0] != '>') {
		return "", "", false, false
	}
	push = f[0] == '>'
	i := bytes.IndexByte(f, '\n')
	n, err := frameLen(f[:i+1])
	if err != nil || n < 1 {
		return "", "", push, false
	}
	rest := f[i+1:]
	kind, rest, ok = bulkAt(rest)
	if !ok {
		return "", "", push, false
	}
	if n >= 2 {
		channel, _, _ = bulkAt(rest)
	}
	return kind, channel, push, true
}

// bulkAt reads a bulk string at the start of b.
func bulkAt(b []byte) (string, []byte, bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 3 || b[0] != '$' {
		return "", nil, false
	}
	n, err := frameLen(b[:i+1])
	if err != nil || n < 0 || int64(len(b)) < int64(i+1)+n+2 {
		return "", nil, false
	}
	return string(b[i+1 : i+1+int(n)]), b[i+1+int(n)+2:], true
}
