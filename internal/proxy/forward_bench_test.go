package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// BenchmarkGatewayForward is the gateway's cost per forwarded command:
// GETs sent as raw RESP over loopback, through rlproxy to a real Redis,
// by 1 or 50 connections, unpipelined or in pipelines of 16; one op is
// one GET. The client side reuses its buffers, so allocs/op are
// rlproxy's (Redis is another process).
//
//	go test ./internal/proxy -run '^$' -bench GatewayForward -benchmem
func BenchmarkGatewayForward(b *testing.B) {
	h := start(b, passthroughOn)
	h.Do(b, "SET", "bench:k", "v").OK()
	const cmd = "*2\r\n$3\r\nGET\r\n$7\r\nbench:k\r\n"
	const reply = "$1\r\nv\r\n"
	for _, conns := range []int{1, 50} {
		for _, pipeline := range []int{1, 16} {
			b.Run(fmt.Sprintf("conns=%d/pipeline=%d", conns, pipeline), func(b *testing.B) {
				cs := make([]net.Conn, conns)
				for i := range cs {
					c, err := net.Dial("tcp", h.proxy.Addr())
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					cs[i] = c
				}
				req := bytes.Repeat([]byte(cmd), pipeline)
				want := bytes.Repeat([]byte(reply), pipeline)
				rounds := b.N/(conns*pipeline) + 1
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				errs := make(chan error, conns)
				for _, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						got := make([]byte, len(want))
						for range rounds {
							if _, err := c.Write(req); err != nil {
								errs <- err
								return
							}
							if _, err := io.ReadFull(c, got); err != nil {
								errs <- err
								return
							}
						}
						if !bytes.Equal(got, want) {
							errs <- fmt.Errorf("replies %q, want %q", got, want)
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			})
		}
	}
}

// A lone forwarded GET allocates at most forwardAllocs objects in
// rlproxy (it took 18 before the busy-poll read, the idle-connection
// peek, Forward's scratch slices, a reader's sessions to flush and the
// backend waiters' array stopped allocating; 6 after, a few more when
// requests overlap and a reader goroutine takes over). The count is the
// process's (the proxy runs in it), over many GETs on one connection
// whose buffers are reused.
func TestGatewayForwardAllocations(t *testing.T) {
	const forwardAllocs = 10
	h := start(t, passthroughOn)
	h.Do(t, "SET", "allocs:k", "v").OK()
	c, err := net.Dial("tcp", h.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte("*2\r\n$3\r\nGET\r\n$8\r\nallocs:k\r\n")
	got := make([]byte, len("$1\r\nv\r\n"))
	get := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != "$1\r\nv\r\n" {
			t.Fatalf("GET answered %q", got)
		}
	}
	for range 200 { // the connections' buffers grown, the session opened
		get()
	}
	const n = 2000
	if per := testing.AllocsPerRun(n, get); per > forwardAllocs {
		t.Fatalf("a forwarded GET allocates %.1f objects, want at most %d", per, forwardAllocs)
	}
}
