package proxy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// express-rate-limit's Redis store (rate-limit-redis), with its defaults
// (prefix "rl:", its scripts by SCRIPT LOAD and EVALSHA), works through
// the gateway: rlproxy's own keys are under "rlproxy:", not "rl:".
// Skipped when Node.js or testdata/clients/node's libraries (make deps)
// are missing.
func TestGatewayExpressRateLimit(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node not found on PATH: %v", err)
	}
	dir := filepath.Join("testdata", "clients", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "rate-limit-redis")); err != nil {
		t.Skipf("the Node.js libraries are not installed (run `make deps`): %v", err)
	}
	h := start(t, passthroughOn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "express.mjs", h.port())
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	want := "request 1: 200 remaining=2\nrequest 2: 200 remaining=1\nrequest 3: 200 remaining=0\n" +
		"request 4: 429 remaining=0\nrequest 5: 429 remaining=0\nkeys: rl:127.0.0.1 ttl>0: true\n"
	if err != nil || string(out) != want {
		t.Fatalf("express.mjs: %v\n%s\nwant:\n%s", err, out, want)
	}
}
