package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// replyReader reads RESP2 replies (and the RESP3 scalars, should a server
// send them). decision is the allocation-free path of the load loop;
// value decodes a whole reply for setup and statistics.
type replyReader struct {
	r *bufio.Reader
	// lastError is the text of the last error reply decision saw.
	lastError string
}

// errorReply is an error reply from the server (not a broken connection).
type errorReply string

func (e errorReply) Error() string { return string(e) }

// Outcomes of one request, as decision reports them.
const (
	denied = iota
	granted
	failed // an error reply, or a reply of an unexpected shape
)

// decision reads one limiter reply — an array whose first element is the
// granted flag (1 or 0), as RL.ACQUIRE and the direct GCRA script answer —
// and reports its outcome. Only a broken connection or a malformed frame is
// returned as an error.
func (rr *replyReader) decision() (int, error) {
	line, err := rr.line()
	if err != nil {
		return failed, err
	}
	switch line[0] {
	case '*':
		n, err := atoi(line[1:])
		if err != nil {
			return failed, err
		}
		if n < 1 {
			return failed, nil
		}
		first, err := rr.line()
		if err != nil {
			return failed, err
		}
		outcome := failed
		if first[0] == ':' {
			switch v, err := atoi(first[1:]); {
			case err != nil:
				return failed, err
			case v == 1:
				outcome = granted
			case v == 0:
				outcome = denied
			}
		} else if err := rr.skipRest(first); err != nil {
			return failed, err
		}
		for i := int64(1); i < n; i++ {
			if err := rr.skip(); err != nil {
				return failed, err
			}
		}
		return outcome, nil
	case '-':
		rr.lastError = string(line[1:])
		return failed, nil
	case '+':
		if string(line[1:]) == "PONG" {
			return granted, nil // the --ping load: served
		}
		return failed, nil
	default:
		return failed, rr.skipRest(line)
	}
}

// line reads one CRLF-terminated line, without the CRLF. The slice is
// only valid until the next read.
func (rr *replyReader) line() ([]byte, error) {
	line, err := rr.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("resp: line too long")
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("resp: malformed line %q", line)
	}
	return line[:len(line)-2], nil
}

// skip reads and discards one reply.
func (rr *replyReader) skip() error {
	line, err := rr.line()
	if err != nil {
		return err
	}
	return rr.skipRest(line)
}

// skipRest discards what follows a reply's first line.
func (rr *replyReader) skipRest(line []byte) error {
	switch line[0] {
	case '$', '=', '!':
		n, err := atoi(line[1:])
		if err != nil || n < 0 {
			return err
		}
		_, err = rr.r.Discard(int(n) + 2)
		return err
	case '*', '~', '>', '%':
		n, err := atoi(line[1:])
		if err != nil {
			return err
		}
		if line[0] == '%' {
			n *= 2
		}
		for i := int64(0); i < n; i++ {
			if err := rr.skip(); err != nil {
				return err
			}
		}
	}
	return nil
}

// value decodes one whole reply: int64, string, nil, []any, or an
// errorReply value (returned, not as the error).
func (rr *replyReader) value() (any, error) {
	line, err := rr.line()
	if err != nil {
		return nil, err
	}
	switch line[0] {
	case '+':
		return string(line[1:]), nil
	case '-':
		return errorReply(line[1:]), nil
	case ':':
		return atoi(line[1:])
	case '_':
		return nil, nil
	case '$':
		n, err := atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rr.r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = rr.value(); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("resp: unsupported reply type %q", line[0])
}

// atoi parses a decimal integer without allocating.
func atoi(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("resp: empty number")
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' || n > (1<<62)/10 {
			return 0, fmt.Errorf("resp: bad number %q", b)
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}
