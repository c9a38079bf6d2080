package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// TestGatewayPingBusy: with the gateway PING is the backend's, so a
// client sees Redis's BUSY while a script runs too long, as Redis's own
// tests expect, and PONG again once SCRIPT KILL ended it. The clients
// use database 9, as Redis's tests do: each has a backend connection of
// its own (on database 0 a long script holds up the commands queued
// behind it on the shared connection; docs/gateway.md).
func TestGatewayPingBusy(t *testing.T) {
	h := start(t, passthroughOn)
	if err := h.backend.Client(t).ConfigSet(context.Background(), "lua-time-limit", "10").Err(); err != nil {
		t.Fatal(err)
	}
	rd, r := h.raw(t), h.raw(t)
	rd.Steps([][2]string{{"SELECT 9", "+OK"}})
	r.Steps([][2]string{{"SELECT 9", "+OK"}})
	rd.Send("EVAL", "while true do end", "0")
	redistest.WaitFor(t, func() bool { return strings.HasPrefix(r.Call("PING"), "-BUSY ") })
	if got := r.Call("SCRIPT", "KILL"); got != "+OK" {
		t.Fatalf("SCRIPT KILL: %q", got)
	}
	if got := rd.Line(); !strings.Contains(got, "killed by user") {
		t.Errorf("the killed script's caller got %q", got)
	}
	if got := r.Call("PING"); got != "+PONG" {
		t.Errorf("PING after SCRIPT KILL: %q", got)
	}
}
