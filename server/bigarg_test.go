package server

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// TestBigArgumentsTakenOut: with the gateway on, a forwarded command's
// big argument skips redcon (a 4-byte marker goes in its place) and is
// put back before the command runs, whatever the sizes of the reads
// (every header cut somewhere); the command name and commands rlproxy
// owns are left to redcon.
func TestBigArgumentsTakenOut(t *testing.T) {
	srv := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Forward: noForward{}})
	big := func(c byte, n int) string { return strings.Repeat(string(c), n-1) + "!" }
	cmds := [][]string{
		{"SET", "a", big('x', bigArgMin)},
		{"SET", "b", "wxyz"},
		{"MSET", big('k', bigArgMin+3), "v", "c", big('y', 2*bigArgMin)},
		{"PING"},
	}
	var data []byte
	for _, c := range cmds {
		data = append(data, encode(c...)...)
	}
	for _, n := range []int{1, 2, 3, 7, 13, 4096, 1 << 16} {
		in := &guardInput{r: &chunked{b: data, n: n}}
		g := &guardedConn{Conn: in, srv: srv}
		rd := redcon.NewReader(g)
		var got [][]string
		markers := 0
		for len(got) < len(cmds) {
			read, err := rd.ReadCommands()
			if err != nil {
				t.Fatalf("reads of %d bytes: %v (wrote %q)", n, err, in.out.String())
			}
			calls := argStrings(nil, read)
			for _, args := range calls {
				for _, a := range args {
					if len(a) == 4 && a != "wxyz" && a != "PING" && a != "MSET" {
						markers++
					}
				}
			}
			g.restore(calls)
			got = append(got, calls...)
		}
		if markers != 3 {
			t.Errorf("reads of %d bytes: %d arguments taken out, want 3", n, markers)
		}
		for i := range cmds {
			if strings.Join(got[i], " ") != strings.Join(cmds[i], " ") {
				t.Errorf("reads of %d bytes: command %d differs (%d arguments, want %d)", n, i, len(got[i]), len(cmds[i]))
			}
		}
		if len(g.bigs) != 0 {
			t.Errorf("reads of %d bytes: %d arguments never put back", n, len(g.bigs))
		}
	}
}

// noForward stands for the gateway where only its presence matters.
type noForward struct{ Forwarder }
