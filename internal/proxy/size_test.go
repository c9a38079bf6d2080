package proxy

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A forwarded command or reply may be as large as Redis allows:
// max_request_bytes (1 MiB by default) bounds only the commands rlproxy
// answers itself, and a big reply is relayed whatever
// passthrough_client_buffer (32 MiB by default) is. RLPROXY_BIG_VALUE_MB
// sets the value's size (100 for the contract's figure; the default keeps
// make test quick).
func TestGatewayBigValues(t *testing.T) {
	h := start(t, passthroughOn)
	size := 40 << 20 // past both limits
	if v, err := strconv.Atoi(os.Getenv("RLPROXY_BIG_VALUE_MB")); err == nil && v > 0 {
		size = v << 20
	}
	big := strings.Repeat("0123456789abcdef", size/16)
	c := h.client(t, func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 30*time.Second, 30*time.Second })
	ctx := context.Background()
	began := time.Now()
	if err := c.Set(ctx, "big:v", big, 0).Err(); err != nil {
		t.Fatalf("SET of %d bytes: %v", size, err)
	}
	set := time.Since(began)
	got, err := c.Get(ctx, "big:v").Result()
	t.Logf("%d MB: SET took %v, GET %v", size>>20, set, time.Since(began)-set)
	if err != nil || got != big {
		t.Fatalf("GET of %d bytes: %d bytes, %v", size, len(got), err)
	}
	if n := h.backend.Client(t).StrLen(ctx, "big:v").Val(); n != int64(size) {
		t.Fatalf("STRLEN on the backend = %d, want %d", n, size)
	}
	direct := h.backend.Client(t)
	began = time.Now()
	_ = direct.Set(ctx, "big:d", big, 0).Err()
	set = time.Since(began)
	_ = direct.Get(ctx, "big:d").Err()
	t.Logf("direct to Redis: SET took %v, GET %v", set, time.Since(began)-set)
	// RL.* commands stay bounded.
	// Only the header of a 2 MiB name: the bound holds at its length, and
	// a client still writing when the connection closes would get EPIPE.
	r := h.raw(t)
	if _, err := fmt.Fprintf(r.c, "*4\r\n$10\r\nRL.SETRATE\r\n$%d\r\n", 2<<20); err != nil {
		t.Fatal(err)
	}
	if got := r.Line(); got != "-ERR Protocol error: request is larger than max_request_bytes (1048576 bytes)" {
		t.Fatalf("a 2 MiB RL.SETRATE: %q", got)
	}
}
