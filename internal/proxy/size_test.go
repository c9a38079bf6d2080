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
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/resp"
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

// Big arguments of forwarded commands are taken out of the stream before
// redcon parses it (server/bigarg.go) and put back before the command
// runs: a pipeline mixing them with small commands, a big key, several
// big values in one command and 4-byte arguments (a marker's size),
// written in odd-sized pieces that cut every header, reaches Redis
// intact and in order.
func TestGatewayBigArgumentsInPieces(t *testing.T) {
	h := start(t, passthroughOn)
	ctx := context.Background()
	val := func(n int, c byte) string {
		b := []byte(strings.Repeat(string(c), n))
		for i := 0; i < n; i += 4099 {
			b[i] = byte('a' + i%26) // not one repeated byte: an offset would show
		}
		return string(b)
	}
	bigKey := "k:" + val(1<<20, 'K')
	v1, v2, v3 := val(1<<20, 'x'), val(3<<20+5, 'y'), val(2<<20, 'z')
	cmds := [][]string{
		{"SET", "small", "abcd"},
		{"SET", "one", v1},
		{"MSET", "two", v2, "three", v3, "four", "wxyz"},
		{"SET", bigKey, "1234"},
		{"APPEND", "one", "tail"},
		{"GET", "four"},
	}
	var stream []byte
	for _, c := range cmds {
		stream = resp.AppendCommand(stream, c...)
	}
	r := h.raw(t)
	go func() {
		// Pieces of 1 to 13 bytes around each header, 64 KiB in bodies.
		for i, k := 0, 0; i < len(stream); k++ {
			n := 1 + k%13
			if k%3 == 0 {
				n = 64 << 10
			}
			n = min(n, len(stream)-i)
			if _, err := r.c.Write(stream[i : i+n]); err != nil {
				return
			}
			i += n
		}
	}()
	for _, want := range []string{"+OK", "+OK", "+OK", "+OK", ":1048580", "$4", "wxyz"} {
		if got := r.Line(); got != want {
			t.Fatalf("reply %q, want %q", got, want)
		}
	}
	b := h.backend.Client(t)
	for k, want := range map[string]string{"small": "abcd", "one": v1 + "tail", "two": v2, "three": v3, "four": "wxyz", bigKey: "1234"} {
		if got := b.Get(ctx, k).Val(); got != want {
			t.Errorf("GET %.12q on the backend: %d bytes, want %d", k, len(got), len(want))
		}
	}
	// RL.* commands stay bounded by max_request_bytes, big argument or not.
	// Only the header (a client still writing when the connection
	// closes would get EPIPE).
	if _, err := fmt.Fprintf(r.c, "*3\r\n$10\r\nRL.SETRATE\r\n$1\r\nk\r\n$%d\r\n", 2<<20); err != nil {
		t.Fatal(err)
	}
	if got := r.Line(); got != "-ERR Protocol error: request is larger than max_request_bytes (1048576 bytes)" {
		t.Fatalf("a big RL.SETRATE: %q", got)
	}
}

// A client that reads a big streamed reply slowly is not one that
// stopped reading: it is paced, never closed, though one write of its
// buffer takes it much longer than passthrough_client_stall (each piece
// it takes counts as progress).
func TestGatewaySlowReaderNotClosed(t *testing.T) {
	const size, buffer = 10 << 20, 4 << 20
	h := start(t, passthroughOn, func(c *config.Config) {
		c.PassthroughClientBuffer = buffer
		c.PassthroughClientStall = time.Second
		c.PassthroughTimeout = time.Minute // Redis's own time to build the reply is not the point
	})
	if err := h.backend.Client(t).SetRange(context.Background(), "slow", size-1, "x").Err(); err != nil {
		t.Fatal(err)
	}
	r := h.raw(t)
	r.Send("GET", "slow")
	_ = r.c.SetReadDeadline(time.Now().Add(time.Minute))
	got, buf := 0, make([]byte, 32<<10)
	for got < size+len("$10485760\r\n\r\n") {
		n, err := r.r.Read(buf)
		if err != nil {
			t.Fatalf("closed after %d of %d bytes: %v", got, size, err)
		}
		got += n
		// 3.2 MB/s at most: a write of its 4 MB buffer takes it over
		// the stall (1 s), a piece of it (256 KiB) far less.
		time.Sleep(10 * time.Millisecond)
	}
	if n := infoField(t, h, "passthrough", "client_buffer_closed"); n != "0" {
		t.Errorf("client_buffer_closed:%s, want 0", n)
	}
}

// infoField reads one field of an INFO section.
func infoField(t testing.TB, h *harness, section, field string) string {
	t.Helper()
	info := h.Do(t, "INFO", section).OK().(string)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s: %q", section, field, info)
	return ""
}
