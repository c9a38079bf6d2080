package proxy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestGatewayClientReply: CLIENT REPLY ON|OFF|SKIP as Redis: the replies
// of forwarded commands and of rlproxy's own are dropped alike, errors
// too, pipelined; Pub/Sub confirmations and messages still come. Each
// script's transcript is compared with Redis's, RESP2 and RESP3.
func TestGatewayClientReply(t *testing.T) {
	h := start(t, passthroughOn)
	for _, script := range []string{
		"CLIENT REPLY OFF\r\nSET a 1\r\nGET a\r\nPING x\r\nECHO y\r\nNOSUCH z\r\nINCR\r\nCLIENT REPLY ON\r\nGET a\r\n",
		"CLIENT REPLY SKIP\r\nGET a\r\nGET a\r\nCLIENT REPLY SKIP\r\nPING p\r\nPING q\r\n",
		"CLIENT REPLY SKIP\r\nCLIENT REPLY ON\r\nPING\r\n",
		"CLIENT REPLY OFF\r\nCLIENT REPLY SKIP\r\nPING a\r\nPING b\r\nCLIENT REPLY ON\r\nPING c\r\n",
		"CLIENT REPLY SKIP\r\nNOSUCH\r\nCLIENT REPLY SKIP\r\nCLIENT REPLY SKIP\r\nPING a\r\nPING b\r\n",
		"CLIENT REPLY OFF\r\nMULTI\r\nSET a 2\r\nEXEC\r\nCLIENT REPLY ON\r\nGET a\r\n",
		"CLIENT REPLY OFF\r\nSUBSCRIBE ch\r\nPSUBSCRIBE c*\r\nUNSUBSCRIBE ch\r\nPUNSUBSCRIBE c*\r\nCLIENT REPLY ON\r\n",
		"CLIENT REPLY SKIP\r\nRESET\r\nPING\r\n",
		"CLIENT REPLY OFF\r\nRESET\r\nPING\r\n",
		"CLIENT REPLY MAYBE\r\nCLIENT REPLY\r\nCLIENT REPLY ON OFF\r\n",
	} {
		sameAsRedis(t, h, script)
	}
	// RESP3: a message to oneself comes though the PUBLISH reply is dropped.
	sameAsRedisIn(t, h, []bool{true}, "CLIENT REPLY OFF\r\nSUBSCRIBE ch\r\nPUBLISH ch hello\r\nUNSUBSCRIBE ch\r\nCLIENT REPLY ON\r\n")
	// rlproxy's own commands, the batched RL.ACQUIRE among them.
	for _, hello3 := range []bool{false, true} {
		got := transcript(t, h.proxy.Addr(), hello3, "RL.DEL k\r\nCLIENT REPLY SKIP\r\nRL.SETRATE k 10 1h\r\n"+
			"RL.ACQUIRE k\r\nCLIENT REPLY OFF\r\nRL.ACQUIRE k\r\nRL.ACQUIRE k\r\nRL.AVAILABLE k\r\nCLIENT REPLY ON\r\nRL.AVAILABLE k\r\n")
		if len(got) != 9 || got[1] != "*4" || got[2] != ":1" || got[3] != ":9" || !slices.Equal(got[6:], []string{"+OK", ":7", "$6"}) {
			t.Errorf("RESP3 %v: RL.* with CLIENT REPLY: %q", hello3, got)
		}
	}
	// A big reply, streamed in parts, is dropped whole.
	if err := h.backend.Client(t).Set(context.Background(), "big", strings.Repeat("x", 3<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	sameAsRedis(t, h, "CLIENT REPLY SKIP\r\nGET big\r\nSTRLEN big\r\n")
	// Inside MULTI it is refused (queued, it would silence rlproxy's own
	// backend connection), and EXEC aborts.
	r := h.raw(t)
	r.Steps([][2]string{{"MULTI", "+OK"}, {"CLIENT REPLY OFF", "-ERR CLIENT REPLY is not allowed inside MULTI"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors."}, {"PING", "+PONG"}})
}

// TestGatewayHelloVersion: HELLO's version is the backend's
// redis_version, as INFO's is.
func TestGatewayHelloVersion(t *testing.T) {
	h := start(t, passthroughOn)
	info, err := h.backend.Client(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, version, _ := strings.Cut(info, "redis_version:")
	version, _, _ = strings.Cut(version, "\r\n")
	for _, proto := range []int{2, 3} {
		c := h.Conn(t, func(o *redis.Options) { o.Protocol = proto })
		for range 2 { // asked of the backend, then kept
			hello := c.Do(t, "HELLO", "3").OK().(map[any]any)
			if hello["version"] != version || version == "" {
				t.Errorf("RESP%d: HELLO's version %v, the backend's redis_version %q", proto, hello["version"], version)
			}
		}
	}
}
