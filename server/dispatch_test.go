package server

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tidwall/redcon"
)

// TestArgStringsOutliveTheReadBuffer checks what argStrings relies on:
// the arguments of a command redcon has read from a connection stay as
// they are while redcon reads on (it gives each command a copy of its
// own), so strings that view them need no copy of their own. Each read
// brings one command of 32 bytes, so redcon's 4 KiB read buffer fills up
// exactly and is written over from its start, again and again.
func TestArgStringsOutliveTheReadBuffer(t *testing.T) {
	var in bytes.Buffer
	const n = 1000
	for i := range n {
		fmt.Fprintf(&in, "*2\r\n$3\r\nGET\r\n$12\r\nkey:%08d\r\n", i) // 32 bytes
	}
	rd := redcon.NewReader(&chunked{in.Bytes(), 32})
	var calls [][]string
	for len(calls) < n {
		cmds, err := rd.ReadCommands()
		if err != nil {
			t.Fatal(err)
		}
		calls = argStrings(calls, cmds)
	}
	for i, call := range calls {
		if want := fmt.Sprintf("key:%08d", i); len(call) != 2 || call[0] != "GET" || call[1] != want {
			t.Fatalf("call %d = %q, want [GET %s]", i, call, want)
		}
	}
}
