package server

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// readAll runs data through the frame guard into redcon's parser, n
// bytes per read, and returns the commands read (space-joined) and what
// the guard wrote back (protocol errors).
func readAll(t *testing.T, data string, n int) ([]string, string) {
	t.Helper()
	srv := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	in := &guardInput{r: &chunked{b: []byte(data), n: n}}
	rd := redcon.NewReader(&guardedConn{Conn: in, srv: srv})
	var got []string
	for {
		cmds, err := rd.ReadCommands()
		for _, c := range cmds {
			var args []string
			for _, a := range c.Args {
				args = append(args, string(a))
			}
			got = append(got, strings.Join(args, " "))
		}
		if err != nil {
			return got, in.out.String()
		}
	}
}

// TestProtocolEdges: as Redis's networking.c: a command of no arguments
// ("*0", "*-10") is skipped, however the bytes come; a bad header closes
// the connection with Redis's Protocol error text.
func TestProtocolEdges(t *testing.T) {
	for n := 1; n <= 16; n++ {
		got, out := readAll(t, "*-10\r\n*0\r\n*1\r\n$4\r\nPING\r\n*-1\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n*0\r\n", n)
		if strings.Join(got, ",") != "PING,ECHO x" || out != "" {
			t.Errorf("no-op commands read %d bytes at a time: commands %q, wrote %q", n, got, out)
		}
	}
	for data, want := range map[string]string{
		"*3000000000\r\n":                           "-ERR Protocol error: invalid multibulk length\r\n",
		"*\r\n":                                     "-ERR Protocol error: invalid multibulk length\r\n",
		"*1\r\nfoo\r\n":                             "-ERR Protocol error: expected '$', got 'f'\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n":    "-ERR Protocol error: expected '$', got 'f'\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n":    "-ERR Protocol error: invalid bulk length\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n": "-ERR Protocol error: invalid bulk length\r\n",
	} {
		if _, out := readAll(t, data, 3); out != want {
			t.Errorf("%q: wrote %q, want %q", data, out, want)
		}
	}
}
