package proxy

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
)

// busyPollStats reads the BusyPoll section of INFO.
func busyPollStats(t *testing.T, h *harness) map[string]int64 {
	t.Helper()
	info, _ := h.Do(t, "INFO", "busypoll").OK().(string)
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO busypoll: %q", line)
			}
			out[k] = n
		}
	}
	return out
}

// Polling changes how replies are waited for, never what they say: the
// same sequence of acquires gets the same answers with it on and off.
func TestBusyPoll(t *testing.T) {
	for _, budget := range []time.Duration{0, 100 * time.Microsecond, 10 * time.Millisecond} {
		t.Run(budget.String(), func(t *testing.T) {
			h := start(t, func(c *config.Config) { c.BusyPoll = budget })
			h.Do(t, "RL.SETRATE", "bp", 5, "1h").Equal(int64(1))
			for left := int64(4); left >= 0; left-- {
				h.Do(t, "RL.ACQUIRE", "bp").Granted(left)
			}
			h.Do(t, "RL.ACQUIRE", "bp").Denied(0)
			before := busyPollStats(t, h)["busy_poll_reads"]
			const lone = 20
			for range lone {
				h.Do(t, "RL.ACQUIRE", "bp").Denied(0)
			}

			st := busyPollStats(t, h)
			on := budget > 0 && runtime.GOMAXPROCS(0) >= 2
			if on {
				if st["busy_poll_us"] != h.cfg.BusyPoll.Microseconds() || st["busy_poll_reads"] == 0 {
					t.Fatalf("polling on, but INFO says %v", st)
				}
				// One client, one request at a time: none overlaps another,
				// so most reads poll (a lone request counted twice, once by
				// the reader and once by its batch, switched polling off).
				if polled := st["busy_poll_reads"] - before; budget >= 10*time.Millisecond && polled < lone {
					t.Fatalf("%d requests one at a time, yet only %d reads polled: %v", lone, polled, st)
				}
				if st["busy_poll_caught"] > st["busy_poll_reads"] {
					t.Fatalf("more reads caught than polled: %v", st)
				}
			} else if st["busy_poll_us"] != 0 || st["busy_poll_reads"] != 0 {
				t.Fatalf("polling off, but INFO says %v", st)
			}
		})
	}
}

// Through the gateway, a lone command's reply is polled for (no reader
// goroutine to wake), and then the client's next command: by the
// client's own goroutine, or by the event loop over all its sockets. No
// goroutine reads an idle shared connection; one Redis closed meanwhile
// is found so before use, and the next command goes on a new one.
func TestBusyPollForwarded(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("busy polling needs two CPUs")
	}
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprint("loop=", loop), func(t *testing.T) { testBusyPollForwarded(t, loop) })
	}
}

func testBusyPollForwarded(t *testing.T, loop bool) {
	h := start(t, passthroughOn, func(c *config.Config) { c.BusyPoll, c.PassthroughLoop = 10*time.Millisecond, loop })
	h.Do(t, "SET", "bpf", "v").Equal("OK")
	// The GETs go on a connection of their own: INFO (from h) would take
	// it out of the event loop.
	r := h.raw(t)
	r.Steps([][2]string{{"PING", "+PONG"}})
	before := busyPollStats(t, h)["busy_poll_reads"]
	// INFO's client polls its idle socket for up to the budget after the
	// reply, holding the one polling slot: the GETs come after that.
	time.Sleep(30 * time.Millisecond)
	const lone = 20
	for range lone {
		r.Steps([][2]string{{"GET bpf", "$1"}})
		if got := r.Line(); got != "v" {
			t.Fatalf("GET bpf: %q", got)
		}
	}
	if polled := busyPollStats(t, h)["busy_poll_reads"] - before; polled < lone {
		t.Fatalf("%d forwarded commands one at a time, yet only %d reads polled", lone, polled)
	}
	// The proxy runs in this process: its goroutines are ours to see.
	readers := func() error {
		buf := make([]byte, 1<<22)
		if n := strings.Count(string(buf[:runtime.Stack(buf, true)]), "passthrough.(*conn).read("); n > 0 {
			return fmt.Errorf("%d goroutines read idle backend connections", n)
		}
		return nil
	}
	if err := eventually(2*time.Second, readers); err != nil {
		t.Fatal(err)
	}

	b := h.backend.Client(t)
	killed, err := b.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Result()
	if err != nil || killed == 0 {
		t.Fatalf("CLIENT KILL of rlproxy's connections: %d, %v", killed, err)
	}
	for range 3 {
		h.Do(t, "GET", "bpf").Equal("v")
	}
}
