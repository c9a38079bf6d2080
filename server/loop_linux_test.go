//go:build linux

package server

import (
	"slices"
	"testing"
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
