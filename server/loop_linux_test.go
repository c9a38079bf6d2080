//go:build linux

package server

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/internal/evloop"
)

// loopCommand takes only whole, well-formed RESP commands; anything it
// cannot judge goes to the guard (whole false), a command cut short
// waits for more (n 0).
func TestLoopCommand(t *testing.T) {
	for _, tc := range []struct {
		in    string
		args  []string
		n     int
		whole bool
	}{
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", []string{"GET", "k"}, 20, true},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1", []string{"GET", "k"}, 20, true},
		{"*1\r\n$0\r\n\r\n", []string{""}, 10, true},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk", nil, 0, true},
		{"*2\r\n$3\r\nGE", nil, 0, true},
		{"*2\r", nil, 0, true},
		{"", nil, 0, true},
		{"PING\r\n", nil, 0, false},      // inline
		{"*0\r\n", nil, 0, false},        // empty: Redis skips it, the guard drops it
		{"*-1\r\n", nil, 0, false},       // negative
		{"*1\r\n+OK\r\n", nil, 0, false}, // not a bulk string
		{"*1\r\n$x\r\n", nil, 0, false},  // not a length
		{"*1\r\n$3\r\nGETX\r\n", nil, 0, false},
		{"*1\r\n$70000\r\n", nil, 0, false}, // big: bigarg.go's
		{"*99999999999999\r\n", nil, 0, false},
	} {
		args, n, whole := loopCommand([]byte(tc.in))
		if !slices.Equal(args, tc.args) || n != tc.n || whole != tc.whole {
			t.Errorf("loopCommand(%q) = %q, %d, %v; want %q, %d, %v", tc.in, args, n, whole, tc.args, tc.n, tc.whole)
		}
	}
}

// loopForward is a gateway that records the loop it is given to read
// its shared connections.
type loopForward struct {
	noForward
	got *evloop.Loop
}

func (f *loopForward) ReadInLoop(l *evloop.Loop) { f.got = l }

// The loop reads the gateway's shared connections only when it serves
// clients: with timeout set it serves none, and the clients' goroutines
// read their replies (polling at light load; the loop's reading them
// took a lone GET's p50 from 63–79 to 127–151 µs).
func TestLoopReadsBackendOnlyWhenItServesClients(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		f := &loopForward{}
		lim := DefaultLimits
		lim.Timeout = timeout
		srv := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Forward: f, Loop: true, Limits: lim})
		if err := srv.startLoop(); err != nil {
			t.Fatal(err)
		}
		srv.stopLoop()
		if reads := f.got != nil; reads != (timeout == 0) {
			t.Errorf("timeout %v: the loop reads the shared connections: %v, want %v", timeout, reads, timeout == 0)
		}
	}
}
