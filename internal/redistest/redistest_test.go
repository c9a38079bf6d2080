package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestServerSetGet(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q, want 127.0.0.1:port", s.Addr())
	}
	if want := "redis://" + s.Addr(); s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	c := s.Client(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx(t), "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
}

func TestPassword(t *testing.T) {
	t.Parallel()
	s := StartServer(t, WithPassword("s3cret"))
	if want := "redis://:s3cret@" + s.Addr(); s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}

	// Without the password: refused.
	anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx(t)).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without password: err = %v, want NOAUTH", err)
	}

	// With it, via Client and via URL.
	if err := s.Client(t).Ping(ctx(t)).Err(); err != nil {
		t.Errorf("Client PING: %v", err)
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	viaURL := redis.NewClient(opt)
	defer viaURL.Close()
	if err := viaURL.Ping(ctx(t)).Err(); err != nil {
		t.Errorf("PING via URL: %v", err)
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := StartServer(t, WithArgs("--maxmemory", "10mb"))
	got, err := s.Client(t).ConfigGet(ctx(t), "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "10485760" {
		t.Errorf("maxmemory = %q, want 10485760", got["maxmemory"])
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}

	s.Pause(t)
	start := time.Now()
	err := c.Ping(ctx(t)).Err()
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("PING while paused: err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("PING while paused took %v, want about the 200ms ReadTimeout", d)
	}

	s.Resume(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Errorf("PING after resume: %v", err)
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	addr := s.Addr()
	c := s.Client(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Stop(t)
	s.Stop(t) // stopping twice is fine
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}

	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Addr after Restart = %s, want %s", s.Addr(), addr)
	}
	if err := c.Get(ctx(t), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET k after restart: err = %v, want redis.Nil (empty dataset)", err)
	}
	if n, err := c.DBSize(ctx(t)).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after restart = %d, %v; want 0", n, err)
	}

	s.Restart(t) // restarting a running server is fine too
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Errorf("PING after second restart: %v", err)
	}
}

// A test that ends with its server paused must still leave no process behind.
func TestCleanupKillsPausedServer(t *testing.T) {
	t.Parallel()
	var s *Server
	var pid int
	t.Run("inner", func(t *testing.T) {
		s = StartServer(t)
		pid = s.proc.cmd.Process.Pid
		s.Pause(t)
	})
	if pid == 0 {
		t.Fatal("inner test did not start a server")
	}
	// The subtest's cleanups have run: the process must be gone (reaped).
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("redis-server pid %d after cleanup: kill(0) = %v, want ESRCH", pid, err)
	}
	if conn, err := net.Dial("tcp", s.Addr()); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after cleanup", s.Addr())
	}
}

// fatalRecorder stands in for a testing.TB to capture a t.Fatalf.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server here; Setenv forbids t.Parallel
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartServer(r)
		t.Error("StartServer returned without redis-server on PATH")
	}()
	<-done
	if !strings.Contains(r.msg, "redis-server not found") {
		t.Errorf("Fatalf message = %q, want it to say redis-server was not found", r.msg)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Nodes) != 3 || len(c.Addrs()) != 3 || len(c.URLs()) != 3 {
		t.Fatalf("got %d nodes, %d addrs, %d urls; want 3 each", len(c.Nodes), len(c.Addrs()), len(c.URLs()))
	}
	for _, n := range c.Nodes {
		info, err := n.Client(t).ClusterInfo(ctx(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			t.Errorf("%s: CLUSTER INFO:\n%s", n.Addr(), info)
		}
	}

	cc := c.Client(t)
	owners := map[string]bool{}
	for i := range 20 {
		key := fmt.Sprintf("{tag%d}key", i)
		if err := cc.Set(ctx(t), key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		master, err := cc.MasterForKey(ctx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		owners[master.Options().Addr] = true
		// The owner serves the key directly (no MOVED).
		if got, err := master.Get(ctx(t), key).Int(); err != nil || got != i {
			t.Errorf("GET %s on %s = %d, %v; want %d", key, master.Options().Addr, got, err, i)
		}
	}
	if len(owners) < 2 {
		t.Errorf("20 hash tags landed on %d node(s) %v, want >= 2", len(owners), owners)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := StartServer(t, WithTLS(true), WithPassword("pw"))
	files := s.TLSFiles()
	opt, err := redis.ParseURL(s.TLSURL())
	if err != nil || opt.TLSConfig == nil || opt.Password != "pw" {
		t.Fatalf("TLSURL() = %q: %+v, %v; want rediss:// with the password", s.TLSURL(), opt, err)
	}
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	opt.TLSConfig.RootCAs = x509.NewCertPool()
	opt.TLSConfig.RootCAs.AppendCertsFromPEM(pem)
	dial := func(withCert bool) error {
		o := *opt
		o.TLSConfig = opt.TLSConfig.Clone()
		if withCert {
			cert, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
			if err != nil {
				t.Fatal(err)
			}
			o.TLSConfig.Certificates = []tls.Certificate{cert}
		}
		c := redis.NewClient(&o)
		defer c.Close()
		return c.Ping(ctx(t)).Err()
	}
	if err := dial(true); err != nil {
		t.Errorf("TLS with the client certificate: %v", err)
	}
	if err := dial(false); err == nil {
		t.Error("TLS without a client certificate worked; the server requires one")
	}
	// The plain port still answers, for Client and the readiness check.
	if err := s.Client(t).Ping(ctx(t)).Err(); err != nil {
		t.Errorf("plain port: %v", err)
	}
}
