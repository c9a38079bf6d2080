package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/rlproxy/rlproxy/commands"
)

// The server's share of an RL.ACQUIRE: reading and parsing the RESP
// frames (the framing guard, then redcon), dispatch through the command
// table, running pipelined concurrent commands, and encoding the reply.
// The handlers here answer at once, so what is measured is the front end.

// acquireReply is what RL.ACQUIRE returns for a grant.
var acquireReply = []any{int64(1), int64(99), int64(0), int64(10)}

func BenchmarkAppendReply(b *testing.B) {
	cases := []struct {
		name  string
		v     any
		proto int
	}{
		{"acquire/resp2", acquireReply, 2},
		{"acquire/resp3", acquireReply, 3},
		{"int", int64(12345), 2},
		{"getrate-map/resp3", commands.Map{"rate", int64(100), "interval_ms", int64(1000), "algo", "token-bucket",
			"burst", int64(100), "shards", int64(1), "mode", "OVERALL", "ttl_ms", int64(0)}, 3},
		{"error", errors.New("no such limiter 'k' (create it with RL.SETRATE or RL.POLICY SET)"), 2},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf = appendReply(buf[:0], c.v, c.proto)
			}
		})
	}
}

// benchTable has one command like RL.ACQUIRE (batched, four integers
// back) and the same command run one after another.
func benchTable() []commands.Command {
	h := func(context.Context, commands.Caller, []string) (any, error) {
		return []int64{1, 99, 0, 10}, nil
	}
	batch := func(_ context.Context, _ commands.Caller, calls [][]string, reply func(int, any)) {
		for i := range calls {
			reply(i, []int64{1, 99, 0, 10})
		}
	}
	return []commands.Command{
		{Name: "B.CONCURRENT", Arity: -2, Group: "bench", Summary: "Answers like RL.ACQUIRE.", Handler: h, Batch: batch},
		{Name: "B.SEQUENTIAL", Arity: -2, Group: "bench", Summary: "Answers like RL.ACQUIRE.", Handler: h},
	}
}

func benchServe(b *testing.B) *Server {
	b.Helper()
	s := New(Options{Listen: "127.0.0.1:0", Version: "bench", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, benchTable())
	if err := s.Listen(); err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	b.Cleanup(func() {
		s.Close()
		<-served
	})
	return s
}

// BenchmarkServerPipeline sends pipelines of commands over one loopback
// connection and reads every reply; one op is one command. Allocations
// are the server's (the client reuses its buffers).
func BenchmarkServerPipeline(b *testing.B) {
	s := benchServe(b)
	want := appendReply(nil, acquireReply, 2)
	for _, cmd := range []string{"B.CONCURRENT", "B.SEQUENTIAL"} {
		for _, pipeline := range []int{1, 16, 128} {
			b.Run(fmt.Sprintf("%s/pipeline=%d", cmd, pipeline), func(b *testing.B) {
				c, err := net.Dial("tcp", s.Addr())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				var req []byte
				for range pipeline {
					req = append(req, fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$9\r\nbench:key\r\n", len(cmd), cmd)...)
				}
				replies := bytes.Repeat(want, pipeline)
				got := make([]byte, len(replies))
				b.ReportAllocs()
				b.ResetTimer()
				for n := 0; n < b.N; n += pipeline {
					if _, err := c.Write(req); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, got); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if !bytes.Equal(got, replies) {
					b.Fatalf("replies:\n%q\nwant:\n%q", got, replies)
				}
			})
		}
	}
}

// BenchmarkLookup is the command table lookup every command goes through
// (twice for a concurrent one: once to group it, once to run it).
func BenchmarkLookup(b *testing.B) {
	s := New(Options{Listen: "127.0.0.1:0"}, benchTable())
	for _, name := range []string{"B.CONCURRENT", "b.concurrent"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.table.Lookup(name) == nil {
					b.Fatal("not found")
				}
			}
		})
	}
}
