package backend

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// A script that ran but whose reply was lost (the connection cut after
// the command went through, or no reply before the timeout) is not sent
// again by anything between Node.Eval and Redis: it would spend permits
// twice. Checked on a standalone node and on a Redis Cluster, each behind
// a proxy that swallows the reply of one EVALSHA.
func TestScriptRunsOnceWhenItsReplyIsLost(t *testing.T) {
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	for _, mode := range []struct {
		name   string
		fault  fault
		wantTo string
	}{
		{"connection cut", faultCut, "EOF"},
		{"no reply", faultHold, "timeout"},
	} {
		for _, cluster := range []bool{false, true} {
			name := mode.name + "/standalone"
			if cluster {
				name = mode.name + "/cluster"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv, o := behindFaultProxy(t, cluster)
				o.Timeout = 300 * time.Millisecond
				pool, err := Open(context.Background(), o, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pool.Close() })
				node := pool.Nodes()[0]
				ctx := context.Background()
				if v, err := node.Eval(ctx, incr, []string{"k"}); err != nil || v != int64(1) {
					t.Fatalf("first call: %v, %v; want 1", v, err)
				}

				srv.proxy.arm(mode.fault)
				v, err := node.Eval(ctx, incr, []string{"k"})
				if err == nil || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("call whose reply was lost: %v, %v; want an unavailable error (%s)", v, err, mode.wantTo)
				}
				if n, err := srv.direct.Get(ctx, "k").Int(); err != nil || n != 2 {
					t.Fatalf("the script ran %d times in all (%v); want 2: the call whose reply was lost ran once", n, err)
				}
				if v, err := node.Eval(ctx, incr, []string{"k"}); err != nil || v != int64(3) {
					t.Fatalf("next call: %v, %v; want 3", v, err)
				}
			})
		}
	}
}

// A TRYAGAIN (a slot half moved) proves the script did not run: on a
// cluster it is tried again, and runs once.
func TestScriptTriedAgainAfterTryAgain(t *testing.T) {
	t.Parallel()
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	srv, o := behindFaultProxy(t, true)
	pool, err := Open(context.Background(), o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	srv.proxy.arm(faultTryAgain)
	if v, err := pool.Nodes()[0].Eval(context.Background(), incr, []string{"k"}); err != nil || v != int64(1) {
		t.Fatalf("call answered TRYAGAIN once: %v, %v; want 1", v, err)
	}
	if n, err := srv.direct.Get(context.Background(), "k").Int(); err != nil || n != 1 {
		t.Fatalf("the script ran %d times (%v); want once", n, err)
	}
}

// proxied is a redis-server reached through a faultProxy.
type proxied struct {
	proxy  *faultProxy
	direct redis.UniversalClient // straight to the server
}

// behindFaultProxy starts a redis-server and a faultProxy in front of it,
// and returns pool options that reach it through the proxy only. A
// cluster is one node holding every slot that announces the proxy's
// port, so the cluster client, too, talks to it through the proxy.
func behindFaultProxy(t *testing.T, cluster bool) (*proxied, Options) {
	p := startFaultProxy(t)
	if !cluster {
		srv := redistest.StartServer(t)
		p.setTarget(srv.Addr())
		return &proxied{proxy: p, direct: srv.Client(t)}, Options{Backends: []string{"redis://" + p.addr()}}
	}
	_, port, _ := net.SplitHostPort(p.addr())
	srv := redistest.StartServer(t, redistest.AsClusterNode(),
		redistest.WithArgs("--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", port))
	p.setTarget(srv.Addr())
	direct := srv.Client(t)
	ctx := context.Background()
	if err := direct.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := direct.ClusterInfo(ctx).Result()
		if err == nil && bytes.Contains([]byte(info), []byte("cluster_state:ok")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("one-node cluster not ok: %q, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &proxied{proxy: p, direct: direct}, Options{Cluster: []string{"redis://" + p.addr()}}
}

type fault int32

const (
	faultNone     fault = iota
	faultCut            // forward the command, then close the connection instead of replying
	faultHold           // forward the command and swallow its reply
	faultTryAgain       // answer TRYAGAIN in the server's stead (the command does not run)
)

// faultProxy forwards TCP connections to target. Armed with a fault, it
// applies it to the next EVALSHA that passes, once.
type faultProxy struct {
	l net.Listener

	mu     sync.Mutex
	target string
	armed  fault
	conns  []net.Conn
}

func startFaultProxy(t *testing.T) *faultProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{l: l}
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *faultProxy) addr() string { return p.l.Addr().String() }

func (p *faultProxy) setTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

func (p *faultProxy) arm(f fault) {
	p.mu.Lock()
	p.armed = f
	p.mu.Unlock()
}

// take returns the armed fault, disarming it, if b carries an EVALSHA.
func (p *faultProxy) take(b []byte) fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.armed
	if f == faultNone || !bytes.Contains(bytes.ToLower(b), []byte("evalsha")) {
		return faultNone
	}
	p.armed = faultNone
	return f
}

func (p *faultProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *faultProxy) pipe(client net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.Dial("tcp", target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, server)
	p.mu.Unlock()
	defer client.Close()
	defer server.Close()

	// go-redis sends one command at a time on a connection (no pipelines
	// here), so the reply read after a faulted command is its reply.
	var mu sync.Mutex
	mode := faultNone
	go func() {
		defer server.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				switch f := p.take(buf[:n]); f {
				case faultTryAgain:
					if _, err := client.Write([]byte("-TRYAGAIN Multiple keys request during rehashing of slot\r\n")); err != nil {
						return
					}
					continue
				case faultCut, faultHold:
					mu.Lock()
					mode = f
					mu.Unlock()
				}
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			mu.Lock()
			m := mode
			mu.Unlock()
			switch m {
			case faultCut:
				return
			case faultNone:
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
