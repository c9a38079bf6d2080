// Package redistest starts real redis-server processes for integration tests.
//
// StartServer runs one redis-server on a free port on 127.0.0.1 and
// StartCluster builds a real Redis Cluster from several of them with
// `redis-cli --cluster create`. Every server:
//
//   - listens on 127.0.0.1 only, on a port picked at random (startup is retried
//     on fresh ports if another process grabs the port first);
//   - keeps nothing on disk (--save "" --appendonly no) and runs in its own
//     temporary directory, which also holds its log file (redis.log);
//   - is killed, and its directory removed, when the test that started it
//     finishes (t.Cleanup), even if the test failed or left it paused.
//
// All failures are reported with t.Fatal and include the tail of the server's
// log. redis-server (and redis-cli, for clusters) must be on PATH; if they are
// not, the test fails with a message saying so.
//
// Like t.Fatal, the functions and methods that take a testing.TB must be
// called from the test's own goroutine.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlproxy/rlproxy/internal/resp"
)

const (
	startAttempts = 5                // launches tried before giving up (see Server.start)
	readyTimeout  = 10 * time.Second // how long a new process has to answer
	stopTimeout   = 10 * time.Second // how long a killed process has to exit
	logName       = "redis.log"      // server stdout+stderr, inside its directory
)

// Option configures StartServer.
type Option func(*options)

type options struct {
	password  string
	args      []string
	cluster   bool // run as a cluster node (used by StartCluster)
	tls       bool
	tlsClient bool // TLS clients must present a certificate
}

// WithPassword starts the server with --requirepass pw. Client and URL include
// the password.
func WithPassword(pw string) Option {
	return func(o *options) { o.password = pw }
}

// WithTLS adds a TLS port to the plain one (which Client and URL keep
// using): TLSURL, with a certificate for 127.0.0.1 signed by a throwaway
// CA (TLSFiles). With clientCerts, TLS clients must present a certificate
// that CA signed (tls-auth-clients yes).
func WithTLS(clientCerts bool) Option {
	return func(o *options) { o.tls, o.tlsClient = true, clientCerts }
}

// WithArgs appends extra redis-server arguments, e.g.
// WithArgs("--maxmemory", "10mb"). They come last, so they override the
// defaults.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// AsClusterNode runs the server with cluster mode on (and a cluster bus
// port of its own), for tests that build a cluster by hand, e.g. one node
// holding every slot behind WithArgs("--cluster-announce-port", ...).
func AsClusterNode() Option {
	return func(o *options) { o.cluster = true }
}

// Server is one redis-server process owned by a test.
type Server struct {
	opts    options
	bin     string // path of redis-server
	dir     string // temporary working directory (holds the log)
	port    int    // fixed once StartServer returns; reused by Restart
	busPort int    // cluster bus port; 0 unless this is a cluster node
	tlsPort int    // 0 unless WithTLS
	tls     TLSFiles
	tlsArgs []string // the server's certificate options

	mu   sync.Mutex
	proc *process // running process; nil after Stop
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // result of cmd.Wait; read only after done is closed
}

// StartServer starts a redis-server on a free 127.0.0.1 port and waits until
// it answers. The process is killed and its directory removed when the test
// finishes.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return startServer(t, o)
}

func startServer(t testing.TB, o options) *Server {
	t.Helper()
	s := &Server{opts: o, bin: LookPath(t, "redis-server"), dir: t.TempDir()}
	// Registered after t.TempDir, so it runs before the directory is removed
	// (cleanups run last-in, first-out).
	t.Cleanup(func() {
		if err := s.kill(); err != nil {
			t.Errorf("redistest: cleanup: %v", err)
		}
	})
	if o.tls {
		files, cert, key, err := writeTLSFiles(s.dir)
		if err != nil {
			t.Fatalf("redistest: TLS files: %v", err)
		}
		authClients := "no"
		if o.tlsClient {
			authClients = "yes"
		}
		s.tls, s.tlsArgs = files, []string{"--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", files.CA, "--tls-auth-clients", authClients}
	}
	if err := s.start(false); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns "redis://127.0.0.1:port", or "redis://:pw@127.0.0.1:port" if
// the server has a password.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.opts.password != "" {
		u.User = url.UserPassword("", s.opts.password)
	}
	return u.String()
}

// TLSURL returns "rediss://127.0.0.1:tlsport" (with the password, if
// any) of a WithTLS server.
func (s *Server) TLSURL() string {
	u := url.URL{Scheme: "rediss", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))}
	if s.opts.password != "" {
		u.User = url.UserPassword("", s.opts.password)
	}
	return u.String()
}

// TLSFiles returns the CA and client certificate files of a WithTLS server.
func (s *Server) TLSFiles() TLSFiles { return s.tls }

// Client returns a new go-redis client for the server (with its password, if
// any). It is closed when the test finishes.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.opts.password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause freezes the server with SIGSTOP, simulating a stalled node: its port
// still accepts connections, but nothing is answered until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.running(t)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: pause %s: %v%s", s.Addr(), err, s.logTail())
	}
	// Signal delivery is asynchronous; make sure the server really is frozen
	// before the test relies on it.
	if err := waitStopped(p.cmd.Process.Pid, 5*time.Second); err != nil {
		t.Fatalf("redistest: pause %s: %v%s", s.Addr(), err, s.logTail())
	}
}

// Resume continues a server frozen by Pause (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.running(t).cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: resume %s: %v%s", s.Addr(), err, s.logTail())
	}
}

// Stop kills the server (SIGKILL, so nothing is saved) and waits until the
// process has exited, so its port is closed when Stop returns. Stopping a
// stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Restart starts the server again on the same port, with the same options,
// and waits until it answers. If it is still running it is stopped first.
// Nothing is persisted, so the new process starts with an empty dataset.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if err := s.startLocked(true); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

// running returns the current process or fails the test. s.mu must be held.
func (s *Server) running(t testing.TB) *process {
	t.Helper()
	if s.proc == nil {
		t.Fatalf("redistest: redis-server %s is not running (stopped?)", s.Addr())
	}
	return s.proc
}

// start launches redis-server, retrying on failure. The port is free when we
// pick it, but another process can bind it before redis-server does; then
// redis-server exits, and we try again: on fresh ports, or, when keepPort
// is set (Restart), on the same port after a short pause.
func (s *Server) start(keepPort bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(keepPort)
}

func (s *Server) startLocked(keepPort bool) error {
	var err error
	attempt := 1
	for ; ; attempt++ {
		if attempt > 1 && keepPort {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		if !keepPort {
			if err = s.pickPorts(); err != nil {
				return err
			}
		}
		var p *process
		if p, err = s.launch(); err == nil {
			s.proc = p
			return nil
		}
		// Only an early exit is worth retrying: a server that is alive but
		// not answering would not do better on another port.
		if !errors.Is(err, errExited) || attempt == startAttempts {
			break
		}
	}
	return fmt.Errorf("could not start redis-server (attempt %d of %d): %w%s", attempt, startAttempts, err, s.logTail())
}

// pickPorts chooses a free port (and one for the cluster bus, so we do not
// depend on port+10000 being free, and one for TLS) by listening on
// 127.0.0.1:0.
func (s *Server) pickPorts() error {
	n := 1
	if s.opts.cluster {
		n++
	}
	if s.opts.tls {
		n++
	}
	var ports []int
	for range n {
		// Keep each listener open until all ports are picked, so they differ.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	s.port, ports = ports[0], ports[1:]
	if s.opts.cluster {
		s.busPort, ports = ports[0], ports[1:]
	}
	if s.opts.tls {
		s.tlsPort = ports[0]
	}
	return nil
}

func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
	}
	if s.opts.password != "" {
		args = append(args, "--requirepass", s.opts.password)
	}
	if s.opts.tls {
		args = append(append(args, "--tls-port", strconv.Itoa(s.tlsPort)), s.tlsArgs...)
	}
	if s.opts.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-node-timeout", "2000",
		)
	}
	return append(args, s.opts.args...)
}

// errExited means redis-server exited before answering (typically because its
// port was taken: see the log).
var errExited = errors.New("redis-server exited during startup")

// launch runs redis-server once and waits until it answers.
func (s *Server) launch() (*process, error) {
	logf, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := s.args()
	fmt.Fprintf(logf, "\n--- redistest: %s %q\n", s.bin, args)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	// An *os.File is handed to the child directly: no copying goroutines.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	err = startCmd(cmd)
	logf.Close() // the child has its own copy
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p); err != nil {
		_ = p.kill()
		return nil, err
	}
	return p, nil
}

// waitReady polls the server until it answers. It asks for INFO rather than
// PING so it can check the process id: if another redis-server holds the
// port, it answers too, but ours is about to exit with "Address already in
// use".
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%w on port %d (%v)", errExited, s.port, p.err)
		default:
		}
		pid, err := probe(s.Addr(), s.opts.password)
		if err == nil {
			if pid == p.cmd.Process.Pid {
				return nil
			}
			err = fmt.Errorf("port is answered by another redis-server (pid %d)", pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer within %v: %v", s.Addr(), readyTimeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probe sends [AUTH and] INFO server over a raw connection and returns the
// answering server's process id. (A go-redis client is not used here: after
// a refused dial its pool refuses to dial again for a second.)
func probe(addr, password string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return 0, err
	}
	var req []byte
	if password != "" {
		req = resp.AppendCommand(req, "AUTH", password)
	}
	req = resp.AppendCommand(req, "INFO", "server")
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}

	r := bufio.NewReader(conn)
	readLine := func() (string, error) {
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}
	if password != "" {
		if line, err := readLine(); err != nil || line != "+OK" {
			return 0, fmt.Errorf("AUTH: %q %v", line, err)
		}
	}
	// The INFO reply is a bulk string: "$<len>\r\n<text>\r\n".
	line, err := readLine()
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(line, "$"))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return 0, fmt.Errorf("INFO: unexpected reply %q", line)
	}
	text := make([]byte, n)
	if _, err := io.ReadFull(r, text); err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(text), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO: no process_id")
}

// kill stops the process if it is running.
func (s *Server) kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if s.proc == nil {
		return nil
	}
	err := s.proc.kill()
	s.proc = nil
	if err != nil {
		return fmt.Errorf("stop %s: %w%s", s.Addr(), err, s.logTail())
	}
	return nil
}

// kill sends SIGCONT (in case the process is paused) and SIGKILL, and waits
// for the process to exit. Once it has, the kernel has closed its sockets.
func (p *process) kill() error {
	// Errors are ignored: the process may already have exited.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redis-server (pid %d) did not exit within %v of SIGKILL", p.cmd.Process.Pid, stopTimeout)
	}
}

// logTail returns the last lines of the server's log, formatted to be
// appended to an error message.
func (s *Server) logTail() string {
	const maxBytes, maxLines = 4096, 25
	path := filepath.Join(s.dir, logName)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("\n(no log: %v)", err)
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return fmt.Sprintf("\n--- tail of %s:\n%s\n---", path, strings.Join(lines, "\n"))
}

// LookPath finds a Redis binary (redis-server, redis-cli, ...) or fails
// the test with a helpful message.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (%v); these tests need a real Redis installed (e.g. apt-get install redis-server)", name, err)
	}
	return p
}

// hasLine reports whether the INFO-style text (lines ending in \r\n)
// contains the exact line.
func hasLine(text, line string) bool {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if strings.TrimSuffix(sc.Text(), "\r") == line {
			return true
		}
	}
	return false
}
