//go:build linux

package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/internal/resp"
)

// loopOn turns the gateway's event loop on (passthrough_loop).
func loopOn(c *config.Config) { c.PassthroughLoop = true }

// loopCommands reads INFO's count of commands the loop ran.
func loopCommands(t *testing.T, h *harness) int {
	t.Helper()
	n, err := strconv.Atoi(infoField(t, h, "passthrough", "loop_commands"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// setGetPipeline writes n SETs of key+i to value+i, each followed by its
// GET, in one write, and checks the replies in order.
func setGetPipeline(t *testing.T, r *raw, n int, key, value string) {
	t.Helper()
	var pipe []byte
	for i := range n {
		pipe = resp.AppendCommand(pipe, "SET", fmt.Sprint(key, i), fmt.Sprint(value, i))
		pipe = resp.AppendCommand(pipe, "GET", fmt.Sprint(key, i))
	}
	if _, err := r.c.Write(pipe); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := r.Line(); got != "+OK" {
			t.Fatalf("SET %d: %q", i, got)
		}
		want := fmt.Sprint(value, i)
		if got := r.Line() + r.Line(); got != fmt.Sprintf("$%d%s", len(want), want) {
			t.Fatalf("GET %d: %q", i, got)
		}
	}
}

// The loop serves plain commands itself: a pipeline in one write, and a
// command cut into one-byte writes (its parts come in many reads), are
// answered in order, and every one of them was run by the loop.
func TestGatewayLoopPipelinesAndPieces(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	before := loopCommands(t, h)
	r := h.raw(t)
	setGetPipeline(t, r, 50, "k", "v")
	cmd := resp.AppendCommand(nil, "APPEND", "k0", "-tail")
	for i := range cmd {
		if _, err := r.c.Write(cmd[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Line(); got != ":7" {
		t.Fatalf("APPEND sent a byte at a time: %q", got)
	}
	if got := loopCommands(t, h) - before; got != 101 {
		t.Fatalf("the loop ran %d commands, want 101", got)
	}
}

// At a command the loop does not run (MULTI, a big value, RL.*), the
// connection goes back to its goroutine with what the loop read ahead:
// the replies keep their order and the state commands work. MULTI waits
// for the reply of the SET before it (which the loop reads from the
// shared connection) while the loop holds the others: the loop has that
// connection read aside meanwhile, so no hold runs out.
func TestGatewayLoopHandsBack(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	r := h.raw(t)
	big := strings.Repeat("b", 1<<20) // over what the loop holds of one request
	var b []byte
	for _, c := range [][]string{{"SET", "a", "1"}, {"MULTI"}, {"INCR", "a"}, {"EXEC"}, {"SET", "big", big}, {"STRLEN", "big"}, {"GET", "a"}} {
		b = resp.AppendCommand(b, c...)
	}
	if _, err := r.c.Write(b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+OK", "+OK", "+QUEUED", "*1", ":2", "+OK", ":1048576", "$1", "2"} {
		if got := r.Line(); got != want {
			t.Fatalf("reply %q, want %q", got, want)
		}
	}
	if got := infoField(t, h, "passthrough", "loop_holds_expired"); got != "0" {
		t.Fatalf("loop_holds_expired %s: the loop waited out a hand-back", got)
	}
}

// A command the loop hands back reaches Redis before the commands other
// clients send after it, as with Redis alone (Redis's suite, "BRPOPLPUSH
// with multiple blocked clients"): two clients block in BRPOPLPUSH, a
// third pushes; the first is woken first (its target is a string:
// WRONGTYPE), the second gets the element. A push that overtook them
// would go to the first at once and leave the second blocked.
func TestGatewayLoopHandBackKeepsOrder(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	r := h.raw(t)
	r.Steps([][2]string{{"SET target1 nolist", "+OK"}})
	for range 10 {
		r.Call("DEL", "blist", "target2")
		rd1, rd2, w := h.raw(t), h.raw(t), h.raw(t)
		rd1.Send("BRPOPLPUSH", "blist", "target1", "0")
		rd2.Send("BRPOPLPUSH", "blist", "target2", "0")
		w.Send("LPUSH", "blist", "foo")
		if got := rd1.Line(); !strings.HasPrefix(got, "-WRONGTYPE") {
			t.Fatalf("first blocked client got %q, want WRONGTYPE", got)
		}
		if got := rd2.Line(); got != "$3" {
			t.Fatalf("second blocked client got %q, want foo", got)
		}
		if got := rd2.Line(); got != "foo" {
			t.Fatalf("second blocked client got %q, want foo", got)
		}
		if got := w.Line(); got != ":1" {
			t.Fatalf("LPUSH answered %q", got)
		}
	}
}

// Clients the loop handed to their goroutines (pinned by SELECT, in
// Pub/Sub, after WATCH) keep arrival order too: the loop still reads
// their sockets and holds the others until their command is on its way
// (Redis's suite, "PUBLISH/SUBSCRIBE after UNSUBSCRIBE without
// arguments" and "BRPOPLPUSH does not affect WATCH while still
// blocked"). A PUBLISH sent right after another client's UNSUBSCRIBE
// reaches no subscriber; a LPUSH sent right after another client's EXEC
// does not abort that transaction.
func TestGatewayLoopKeepsOrderOfPinnedClients(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	r := h.raw(t)
	r.Steps([][2]string{{"SELECT 9", "+OK"}})
	for i := range 30 {
		sub := h.raw(t)
		sub.Steps([][2]string{{"SELECT 9", "+OK"}})
		sub.Send("SUBSCRIBE", "chan1")
		for range 6 { // *3, subscribe, chan1, :1
			sub.Line()
		}
		sub.Send("UNSUBSCRIBE")
		if got := r.Call("PUBLISH", "chan1", "hello"); got != ":0" {
			t.Errorf("round %d: PUBLISH after another client's UNSUBSCRIBE reached %s subscribers", i, got)
		}
	}
	for i := range 30 {
		w := h.raw(t)
		w.Steps([][2]string{{"SELECT 9", "+OK"}, {"DEL dst", ":0"}, {"WATCH dst", "+OK"}, {"MULTI", "+OK"}, {"GET dst", "+QUEUED"}})
		w.Send("EXEC")
		if got := r.Call("LPUSH", "dst", "x"); got != ":1" {
			t.Fatalf("round %d: LPUSH answered %q", i, got)
		}
		if got := w.Line(); got != "*1" {
			t.Fatalf("round %d: EXEC sent before another client's LPUSH answered %q, want *1", i, got)
		}
		r.Call("DEL", "dst")
	}
}

// A client served by the loop that stops reading is closed once it holds
// passthrough_client_buffer of replies (counted), and the others go on.
func TestGatewayLoopClientStopsReading(t *testing.T) {
	h := start(t, passthroughOn, loopOn, func(c *config.Config) {
		c.PassthroughClientBuffer = 256 << 10
		c.PassthroughTimeout = time.Minute // the shared connection relays what the client asked before it closes
	})
	ctx := context.Background()
	if err := h.backend.Client(t).Set(ctx, "v", strings.Repeat("x", 16<<10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := loopCommands(t, h)
	r := h.raw(t)
	var b []byte
	for range 40 { // 40 replies of 16 KiB in one read of the loop
		b = resp.AppendCommand(b, "GET", "v")
	}
	// Written till the proxy closes it: the socket buffers fill first.
	for i := 0; i < 2000; i++ {
		_ = r.c.SetWriteDeadline(time.Now().Add(2 * time.Second)) // the proxy stops reading it
		if _, err := r.c.Write(b); err != nil {
			break
		}
		if infoField(t, h, "passthrough", "client_buffer_closed") != "0" {
			break
		}
	}
	deadline := time.Now().Add(time.Minute)
	for infoField(t, h, "passthrough", "client_buffer_closed") == "0" {
		if time.Now().After(deadline) {
			t.Fatal("a client that does not read was not closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if loopCommands(t, h) == before {
		t.Fatal("the loop ran none of its commands")
	}
	_ = r.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, r.c); err != nil && !isReset(err) {
		t.Fatalf("the closed client's socket: %v", err)
	}
	// The others go on once the shared connection has relayed (and
	// dropped) the replies the closed client asked for.
	after := h.client(t, func(o *redis.Options) { o.ReadTimeout = time.Minute })
	if err := after.Set(ctx, "after", "1", 0).Err(); err != nil {
		t.Fatalf("SET after: %v", err)
	}
}

func isReset(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset"))
}

// A client that leaves while its reply is on the way costs nothing: the
// proxy forgets it and serves the next ones.
func TestGatewayLoopDisconnectMidReply(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	ctx := context.Background()
	if err := h.backend.Client(t).Set(ctx, "v", strings.Repeat("x", 4<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "PING").Equal("PONG")
	clients := func() string { return infoField(t, h, "clients", "connected_clients") }
	base := clients()
	for range 5 {
		r := h.raw(t)
		r.Send("GET", "v")
		buf := make([]byte, 1000)
		if _, err := io.ReadFull(r.c, buf); err != nil {
			t.Fatal(err)
		}
		r.c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for clients() != base {
		if time.Now().After(deadline) {
			t.Fatalf("connected_clients %s, want %s: the clients that left were not forgotten", clients(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := h.raw(t)
	if got := r.Call("STRLEN", "v"); got != ":4194304" {
		t.Fatalf("STRLEN after: %q", got)
	}
}

// With a password, the loop runs AUTH itself and refuses what comes
// before it, as the goroutine path does.
func TestGatewayLoopAuth(t *testing.T) {
	h := start(t, passthroughOn, loopOn, func(c *config.Config) { c.RequirePass = "pw" })
	before := loopCommands(t, h)
	r := h.raw(t)
	r.Steps([][2]string{
		{"GET k", "-NOAUTH Authentication required."},
		{"AUTH wrong", "-WRONGPASS invalid username-password pair or user is disabled."},
		{"AUTH pw", "+OK"},
		{"SET k 1", "+OK"},
		{"GET k", "$1"},
	})
	if got := loopCommands(t, h) - before; got != 5 {
		t.Fatalf("the loop ran %d commands, want 5", got)
	}
}

// A client's next request that comes while its goroutine runs one of
// rlproxy's own commands (INFO asks the backend) is read once the
// goroutine is done, never left unread: 300 times INFO, then at once a
// GET in a write of its own, each answered.
func TestGatewayLoopReadsOnAfterOwnCommand(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	r := h.raw(t)
	r.Steps([][2]string{{"SELECT 9", "+OK"}, {"SET k v", "+OK"}})
	for i := range 300 {
		r.Send("INFO", "server")
		r.Send("GET", "k")
		size := r.Line()
		if !strings.HasPrefix(size, "$") {
			t.Fatalf("round %d: INFO answered %q", i, size)
		}
		n, _ := strconv.Atoi(size[1:])
		if _, err := io.ReadFull(r.r, make([]byte, n+2)); err != nil {
			t.Fatalf("round %d: INFO's text: %v", i, err)
		}
		if got := r.Line() + r.Line(); got != "$1v" {
			t.Fatalf("round %d: GET answered %q", i, got)
		}
	}
}

// A client's command that must wait for its earlier replies on another
// backend connection (a script runs on the shared one, so the command
// goes on the side connection; in a cluster, another node) is not run
// by the loop, which reads those replies itself: it would wait for them
// forever, and every client with it. A GET sent right behind a 200 ms
// script, and a pipeline over the nodes of a cluster, are answered, and
// another client is served meanwhile.
func TestGatewayLoopLeavesWaitsToTheClient(t *testing.T) {
	script := "local t = redis.call('TIME') while true do local n = redis.call('TIME') " +
		"if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > 200000 then return 1 end end"
	t.Run("script", func(t *testing.T) {
		h := start(t, passthroughOn, loopOn)
		r := h.raw(t)
		r.Steps([][2]string{{"SET k v", "+OK"}})
		r.Send("EVAL", script, "0")
		time.Sleep(20 * time.Millisecond) // the script runs
		r.Send("GET", "k")
		if got := r.Line(); got != ":1" {
			t.Fatalf("EVAL answered %q", got)
		}
		if got := r.Line() + r.Line(); got != "$1v" {
			t.Fatalf("GET behind the script answered %q", got)
		}
		if got := h.raw(t).Call("GET", "k"); got != "$1" {
			t.Fatalf("another client's GET answered %q", got)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := redistest.StartCluster(t, 3)
		h := startProxy(t, nil, passthroughOn, loopOn, func(c *config.Config) { c.Cluster = cluster.URLs() })
		setGetPipeline(t, h.raw(t), 30, "ck:", "")
	})
}

// Clients that call RL.ACQUIRE leave the loop for their goroutines, 50 at
// once under load, and every request is still answered (the socket was
// once given back while the loop ran on, and some requests went
// unanswered: 25 of 50 clients stuck in one run of 300 requests each).
func TestGatewayLoopGivesBackUnderLoad(t *testing.T) {
	h := start(t, passthroughOn, loopOn)
	h.Do(t, "RL.SETRATE", "hot", 100000000, "1s").Equal(int64(1))
	errs := make(chan error, 50)
	for range 50 {
		r := h.raw(t)
		go func() {
			for i := range 300 {
				if _, err := r.c.Write(resp.AppendCommand(nil, "RL.ACQUIRE", "hot", "1")); err != nil {
					errs <- err
					return
				}
				_ = r.c.SetReadDeadline(time.Now().Add(callTimeout))
				line, err := r.r.ReadString('\n')
				if err != nil || line != "*4\r\n" {
					errs <- fmt.Errorf("request %d: %q, %v", i, line, err)
					return
				}
				for range 4 { // its 4 integers
					if _, err = r.r.ReadString('\n'); err != nil {
						errs <- fmt.Errorf("request %d: %v", i, err)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 50 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
