package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// TestGatewayPingBusy: with the gateway PING is the backend's, so a
// client sees Redis's BUSY while a script runs too long, as Redis's own
// tests expect, and PONG again once SCRIPT KILL ended it: on database 0,
// where the script runs on the shared backend connection (the others'
// commands then go on a side one, not behind it), and on database 9,
// where each client has a connection of its own.
func TestGatewayPingBusy(t *testing.T) {
	h := start(t, passthroughOn)
	if err := h.backend.Client(t).ConfigSet(context.Background(), "lua-time-limit", "10").Err(); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"0", "9"} {
		rd, r := h.raw(t), h.raw(t)
		rd.Steps([][2]string{{"SELECT " + db, "+OK"}})
		r.Steps([][2]string{{"SELECT " + db, "+OK"}})
		rd.Send("EVAL", "while true do end", "0")
		redistest.WaitFor(t, func() bool { return strings.HasPrefix(r.Call("PING"), "-BUSY ") })
		if got := r.Call("SCRIPT", "KILL"); got != "+OK" {
			t.Fatalf("db %s: SCRIPT KILL: %q", db, got)
		}
		if got := rd.Line(); !strings.Contains(got, "killed by user") {
			t.Errorf("db %s: the killed script's caller got %q", db, got)
		}
		if got := r.Call("PING"); got != "+PONG" {
			t.Errorf("db %s: PING after SCRIPT KILL: %q", db, got)
		}
	}
}
