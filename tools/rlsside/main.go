// Command rlsside runs rlproxy's rate limit service and
// envoyproxy/ratelimit side by side on one redis-server, through the same
// gRPC client.
//
//	rlsside compare -ref ratelimit -ref-check config_check -rlproxy rlproxy [-src DIR -rev REV -out PAGE.md] [CONFIG.yaml...]
//	rlsside bench -ref ratelimit -rlproxy rlproxy [-before rlproxy-old] [-redis-cpu 10] [-rounds 5 -callers 50 -conns 4 -time 5s]
//	              [-client stubs|reuse|raw] [-tuned] [-h2load]
//
// compare checks each config (every one in envoyproxy/ratelimit's source
// tree DIR with -src) with both, sends the configs both load a request
// sequence made from their rules, and writes a page of their answers
// (overall code, each descriptor's code, limit and remaining) with a
// verdict each: docs/envoy-compare.md is its output. It exits 1 when an
// answer differs where the contract does not say why. bench measures throughput,
// latency and Redis CPU per decision for a hot descriptor and for 10,000
// values of one descriptor, in interleaved rounds, and prints medians,
// beside a floor: a gRPC server answering OK without Redis (floor.go),
// with the CPU per decision of every process (client.go: the load tool's
// ways of calling; h2load.go: nghttp2's h2load as a second load tool).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "floor" {
		if err := serveFloor(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "rlsside floor:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rlsside compare|bench -ref BIN -rlproxy BIN ...")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	ref := fs.String("ref", "ratelimit", "envoyproxy/ratelimit's binary (src/service_cmd)")
	rlp := fs.String("rlproxy", "rlproxy", "rlproxy's binary")
	before := fs.String("before", "", "bench: an earlier rlproxy binary, measured in the same rounds")
	refCheck := fs.String("ref-check", "config_check", "compare: envoyproxy/ratelimit's config checker (src/config_check_cmd)")
	src := fs.String("src", "", "compare: envoyproxy/ratelimit's source tree: compare every config in it")
	rev := fs.String("rev", "", "compare: the reference's revision, for the page")
	out := fs.String("out", "", "compare: write the page to this file (default: stdout)")
	rounds := fs.Int("rounds", 5, "bench: rounds per service")
	callers := fs.Int("callers", 50, "bench: concurrent callers")
	redisCPU := fs.Int("redis-cpu", 0, "bench: cap redis-server at this percent of one core (cgroup; 0: no cap)")
	length := fs.Duration("time", 5*time.Second, "bench: length of a round")
	conns := fs.Int("conns", 4, "bench: HTTP/2 connections per service")
	client := fs.String("client", clientStubs, "bench: how the load tool calls: stubs (a new message per call), reuse (messages built once) or raw (bytes marshalled once)")
	tuned := fs.Bool("tuned", false, "bench: the load tool dials with bigger buffers and flow-control windows")
	h2 := fs.Bool("h2load", false, "bench: also load the hot descriptor with h2load (nghttp2-client), checked by the services' own counts")
	fs.Parse(os.Args[2:]) //nolint:errcheck // ExitOnError
	var err error
	switch os.Args[1] {
	case "compare":
		err = compare(compareOptions{ref: *ref, refCheck: *refCheck, rlproxy: *rlp, src: *src, rev: *rev, out: *out, configs: fs.Args()})
	case "bench":
		err = bench(benchOptions{ref: *ref, rlproxy: *rlp, before: *before, rounds: *rounds, callers: *callers, conns: *conns,
			client: *client, tuned: *tuned, h2load: *h2, redisCPU: *redisCPU, length: *length})
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsside:", err)
		os.Exit(1)
	}
}

// freePort is a loopback port free now.
func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a started process.
type proc struct {
	cmd     *exec.Cmd
	addr    string // its gRPC (or Redis) address
	metrics string // rlproxy's metrics_listen address
}

func (p *proc) stop() {
	p.cmd.Process.Kill() //nolint:errcheck // best effort
	p.cmd.Wait()         //nolint:errcheck // killed
}

func startProc(addr string, env []string, name string, args ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{cmd: cmd, addr: addr}, nil
}

// startRedis starts a redis-server without persistence.
func startRedis() (*proc, *redis.Client, error) {
	port := freePort()
	p, err := startProc(fmt.Sprintf("127.0.0.1:%d", port), nil, "redis-server", "--port", strconv.Itoa(port),
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	for i := 0; c.Ping(context.Background()).Err() != nil; i++ {
		if i > 100 {
			p.stop()
			return nil, nil, fmt.Errorf("redis-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p, c, nil
}

// startRef starts envoyproxy/ratelimit on the configs (copied into its
// runtime folder) and redisAddr.
func startRef(bin, redisAddr string, configs []string) (*proc, error) {
	root, err := os.MkdirTemp("", "rlsside")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := copyConfigs(dir, configs); err != nil {
		return nil, err
	}
	port := freePort()
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "LOG_LEVEL=warn",
		// Stats to statsd as deployed (UDP to a port nobody reads): without
		// statsd its stats go to a debug log line per request.
		"USE_STATSD=true", "STATSD_HOST=127.0.0.1", fmt.Sprintf("STATSD_PORT=%d", freePort()),
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "LIMIT_RESPONSE_HEADERS_ENABLED=true",
		fmt.Sprintf("PORT=%d", freePort()), fmt.Sprintf("DEBUG_PORT=%d", freePort()), fmt.Sprintf("GRPC_PORT=%d", port)}
	return startProc(fmt.Sprintf("127.0.0.1:%d", port), env, bin)
}

// startRlproxy starts rlproxy serving the configs (in one folder) on
// redisAddr, with extra flags.
func startRlproxy(bin, redisAddr string, configs []string, extra ...string) (*proc, error) {
	dir, err := os.MkdirTemp("", "rlsside")
	if err != nil {
		return nil, err
	}
	if err := copyConfigs(dir, configs); err != nil {
		return nil, err
	}
	port, metrics := freePort(), fmt.Sprintf("127.0.0.1:%d", freePort())
	args := append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", metrics,
		"--backend", "redis://" + redisAddr, "--rls-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--rls-config", dir, "--rls-response-headers", "--log-level", "warn"}, extra...)
	p, err := startProc(fmt.Sprintf("127.0.0.1:%d", port), nil, bin, args...)
	if p != nil {
		p.metrics = metrics
	}
	return p, err
}

// dial connects to a service (with opts, or transport(false)) and waits
// until it answers.
func dial(addr string, opts ...grpc.DialOption) (pb.RateLimitServiceClient, *grpc.ClientConn, error) {
	if len(opts) == 0 {
		opts = transport(false)
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, nil, err
	}
	c := pb.NewRateLimitServiceClient(cc)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "ping", Descriptors: descs("k=v")})
		cancel()
		if err == nil {
			return c, cc, nil
		}
		if i > 100 {
			cc.Close()
			return nil, nil, fmt.Errorf("%s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// copyConfigs copies the config files into dir, where a server reads them.
func copyConfigs(dir string, configs []string) error {
	for _, f := range configs {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
