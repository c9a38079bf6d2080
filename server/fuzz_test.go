package server

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/tidwall/redcon"
)

// fuzzLimit is the fuzz server's max_request_bytes: small, so that
// inputs reach it.
const fuzzLimit = 16384

// FuzzFrontDoor sends any bytes to a server that requires a password
// (the wire framing, the request limits and the auth state together) and
// checks that it never panics, allocates in proportion to its input, and
// answers exactly one reply per complete request — as many as a small
// model of the framing, the limits and AUTH/HELLO/RESET/QUIT predicts —
// plus one protocol error when the input breaks the framing or a limit.
func FuzzFrontDoor(f *testing.F) {
	for _, s := range []string{
		"PING\r\n",
		encode("AUTH", "pw") + encode("ECHO", strings.Repeat("x", 20000)),
		encode("ECHO", strings.Repeat("x", 20000)),
		"*11\r\n", "*1\r\n$16385\r\n", "*10\r\n",
		encode("HELLO", "3", "AUTH", "default", "pw", "BOGUS") + encode("PING"),
		encode("HELLO", "3", "AUTH", "app", "apppw", "SETNAME", "n") + encode("RL.SETRATE", "k", "1", "1s") + encode("RL.ACQUIRE", "k"),
		encode("AUTH", "app", "apppw") + encode("RESET") + "*11\r\n",
		encode("AUTH", "pw") + "*3000\r\n",
		encode("AUTH", "pw") + "*2\r\n$4\r\nECHO\r\n$16000\r\n",
		"AUTH pw\r\nECHO \"a b\"\r\nQUIT\r\nPING\r\n",
		"ECHO \"unbalanced\r\n", "\r\n\n*1\r\n$4\r\nPING\r\n",
		"*1\r\n$9223372036854775807\r\n", "*-1\r\n", "*1\r\n$4\nPING\r\n",
	} {
		f.Add([]byte(s))
	}
	s := New(Options{
		Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RequirePass: "pw", Users: []config.User{{Name: "app", Password: "apppw", Commands: []string{"acquire"}}},
		Limits: Limits{MaxClients: 100, MaxRequestBytes: fuzzLimit, MaxNameLength: 512},
	}, testTable(nil)[:1], limiterTable())
	if err := s.Listen(); err != nil {
		f.Fatal(err)
	}
	go s.Serve()
	f.Cleanup(func() { s.Close() })

	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			_, _ = c.Write(data)
			_ = c.(*net.TCPConn).CloseWrite() // the server reads EOF after the input
		}()
		r := bufio.NewReader(c)
		var replies []string
		for {
			rep, err := readReply(r)
			if err != nil {
				if err != io.EOF || rep != "" {
					t.Fatalf("reading reply %d: %v (%q)\ninput %q", len(replies)+1, err, rep, data)
				}
				break
			}
			replies = append(replies, rep)
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(1<<20+64*len(data)) {
			t.Errorf("%d bytes of input made the process allocate %d bytes", len(data), grew)
		}
		want, protoErr := expectReplies(data)
		if len(replies) != want {
			t.Fatalf("%d replies, want %d\ninput %q\nreplies %q", len(replies), want, data, replies)
		}
		if protoErr && !strings.HasPrefix(replies[len(replies)-1], "-ERR Protocol error: ") {
			t.Fatalf("the last reply is not a protocol error: %q\ninput %q", replies[len(replies)-1], data)
		}
	})
}

// expectReplies models what the fuzz server answers data with: how many
// replies, and whether the last is a protocol error.
func expectReplies(data []byte) (replies int, protoErr bool) {
	authed := false
	for pos := 0; pos < len(data); {
		var args []string
		var n int
		var bad bool
		if data[pos] == '*' {
			args, n, bad = frameCommand(data[pos:], !authed)
		} else {
			args, n, bad = inlineCommand(data[pos:])
		}
		if bad {
			return replies + 1, true
		}
		if n == 0 {
			return replies, false // incomplete: never answered
		}
		pos += n
		if args == nil {
			continue // an empty line
		}
		replies++
		switch name := strings.ToUpper(args[0]); {
		case name == "QUIT":
			return replies, false
		case name == "RESET" && len(args) == 1:
			authed = false
		case name == "AUTH":
			authed = authed || (len(args) == 2 && args[1] == "pw") || (len(args) == 3 && goodPair(args[1], args[2]))
		case name == "HELLO":
			authed = authed || helloAuthenticates(args)
		}
	}
	return replies, false
}

func goodPair(user, pass string) bool {
	return (user == "default" && pass == "pw") || (user == "app" && pass == "apppw")
}

// helloAuthenticates reports whether a HELLO with AUTH succeeds as a whole.
func helloAuthenticates(args []string) bool {
	if len(args) > 1 {
		if v, err := strconv.Atoi(args[1]); err != nil || (v != 2 && v != 3) {
			return false
		}
	}
	ok := false
	for i := 2; i < len(args); i++ {
		switch {
		case strings.EqualFold(args[i], "AUTH") && i+2 < len(args):
			ok = goodPair(args[i+1], args[i+2])
			if !ok {
				return false
			}
			i += 2
		case strings.EqualFold(args[i], "SETNAME") && i+1 < len(args):
			name := args[i+1]
			if len(name) > 512 || strings.ContainsFunc(name, func(r rune) bool { return r < '!' || r > '~' }) {
				return false
			}
			i++
		default:
			return false
		}
	}
	return ok
}

// frameCommand reads one RESP command at the start of b as the guard
// judges it: its arguments and length; n == 0 when incomplete; bad when
// it breaks the framing or a limit (before AUTH: 10 arguments of 16 KiB;
// after: fuzzLimit bytes).
func frameCommand(b []byte, preAuth bool) (args []string, n int, bad bool) {
	// A negative count ("*-10") is a no-op, as in Redis, of any size.
	neg := len(b) > 1 && b[1] == '-'
	num := func(at int, isCount bool) (v int64, next int, bad bool) {
		v = -1
		for i := at; i < len(b); i++ {
			ch := b[i]
			switch {
			case ch >= '0' && ch <= '9':
				v = max(v, 0)*10 + int64(ch-'0')
				switch {
				case isCount && neg:
					if v > maxBulk {
						return 0, 0, true
					}
				case preAuth && isCount && v > preAuthArgs, preAuth && !isCount && v > preAuthBulk:
					return 0, 0, true
				case (isCount && v > maxArgs) || v > maxBulk:
					return 0, 0, true
				}
			case ch == '\r' && v >= 0:
				if i+1 == len(b) {
					return 0, 0, false
				}
				if b[i+1] != '\n' {
					return 0, 0, true
				}
				return v, i + 2, false
			default:
				return 0, 0, true
			}
		}
		return 0, 0, false // incomplete
	}
	first := 1
	if neg {
		first = 2
	}
	count, i, bad := num(first, true)
	if bad || i == 0 {
		return nil, 0, bad
	}
	if neg || count == 0 {
		return nil, i, false // skipped, as an empty line
	}
	if int64(i)+6*count > fuzzLimit {
		return nil, 0, true
	}
	for left := count; left > 0; left-- {
		if i == len(b) {
			return nil, 0, false
		}
		if b[i] != '$' {
			return nil, 0, true
		}
		size, next, bad := num(i+1, false)
		if bad || next == 0 {
			return nil, 0, bad
		}
		if int64(next)+size+2+6*(left-1) > fuzzLimit {
			return nil, 0, true
		}
		end := next + int(size)
		if end+2 > len(b) {
			return nil, 0, false // redcon checks the CRLF once both bytes are in
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0, true
		}
		args = append(args, string(b[next:end]))
		i = end + 2
	}
	return args, i, false
}

// inlineCommand reads one inline command (a line) at the start of b with
// redcon's own parser.
func inlineCommand(b []byte) (args []string, n int, bad bool) {
	end := bytes.IndexByte(b, '\n')
	if end > maxInline || (end < 0 && len(b) > maxInline) {
		return nil, 0, true
	}
	if end < 0 {
		return nil, 0, false
	}
	cmds, err := redcon.NewReader(bytes.NewReader(b[:end+1])).ReadCommands()
	switch {
	case err == io.EOF:
		return nil, end + 1, false // no arguments
	case err != nil:
		return nil, 0, true
	}
	for _, a := range cmds[0].Args {
		args = append(args, string(a))
	}
	return args, end + 1, false
}
