// Package config owns rlproxy's configuration: the typed Config every other
// package receives, its defaults (in Default, and nowhere else), loading it
// from a YAML file, RLPROXY_* environment variables and command-line flags
// (Load), and checking it (Validate).
//
// This is the only package that imports viper or pflag; the rest of rlproxy
// sees a plain, already validated Config value.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is rlproxy's complete configuration.
//
// Each field is set by the YAML key in its mapstructure tag, by the
// environment variable RLPROXY_<KEY> (upper case; lists comma-separated) and
// by the flag --<key-with-dashes> (except Backends, whose flag is --backend).
type Config struct {
	// (Optional) Address rlproxy accepts Redis-protocol clients on.
	// Defaults to "127.0.0.1:6380".
	Listen string `mapstructure:"listen"`

	// (Optional) redis:// or rediss:// URLs of standalone Redis nodes the
	// limiters are spread over; user, password, database and TLS (rediss) go
	// in the URL. Mutually exclusive with Cluster. When both are empty the
	// proxy uses an embedded in-memory backend. Defaults to empty.
	Backends []string `mapstructure:"backends"`

	// (Optional) redis:// or rediss:// seed URLs of one Redis Cluster.
	// Mutually exclusive with Backends. Defaults to empty.
	Cluster []string `mapstructure:"cluster"`

	// (Optional) PEM file of the certificate authorities that sign the
	// rediss:// backends' certificates, for servers whose certificates a
	// system root does not sign (self-hosted Redis with TLS). Empty means
	// the system's roots. Needs a rediss:// URL. Defaults to "".
	BackendTLSCAFile string `mapstructure:"backend_tls_ca_file"`

	// (Optional) PEM files of the client certificate and its key that
	// rlproxy presents to rediss:// backends which require one (Redis's
	// tls-auth-clients). Set both or neither. Need a rediss:// URL.
	// Default to "".
	BackendTLSCertFile string `mapstructure:"backend_tls_cert_file"`
	BackendTLSKeyFile  string `mapstructure:"backend_tls_key_file"`

	// (Optional) Password clients must send with AUTH before any other
	// command: the password of the "default" user, who may run every
	// command on every limiter. Empty (and no users) disables
	// authentication. Defaults to "".
	RequirePass string `mapstructure:"require_pass"`

	// (Optional) Named users, Redis-ACL style: each authenticates with
	// AUTH name password (or HELLO 3 AUTH name password) and may run the
	// commands of its categories on the limiters its patterns match. Set in
	// the config file only. Defaults to none.
	Users []User `mapstructure:"users"`

	// (Optional) Address accepting clients over TLS (as well as plain
	// clients on listen). Needs tls_cert_file and tls_key_file. Empty: no
	// TLS listener. Defaults to "".
	TLSListen string `mapstructure:"tls_listen"`

	// (Optional) PEM files of the certificate (with its chain) and key
	// rlproxy presents on tls_listen. Reloaded on SIGHUP. Default to "".
	TLSCertFile string `mapstructure:"tls_cert_file"`
	TLSKeyFile  string `mapstructure:"tls_key_file"`

	// (Optional) PEM file of the CAs that sign client certificates: when
	// set, clients on tls_listen must present one (mutual TLS). Reloaded on
	// SIGHUP. Defaults to "".
	TLSClientCAFile string `mapstructure:"tls_client_ca_file"`

	// (Optional) Lets a reload (SIGHUP) drop authentication the running
	// config has (DroppedAuth: require_pass, all users, a user's limiters
	// list, tls_listen, tls_client_ca_file). Without it such a file is
	// refused and the running config stays, so an empty, half-written or
	// mistaken file never opens the front door. Config file only: a flag
	// or variable would leave the guard off for good. No effect at start.
	// Defaults to false.
	ReloadMayDropAuth bool `mapstructure:"reload_may_drop_auth"`

	// (Optional) Most client connections at once; one more is answered
	// "ERR max number of clients reached" and closed. Must be > 0.
	// Defaults to 10000.
	MaxClients int `mapstructure:"max_clients"`

	// (Optional) Close a client connection idle this long (one waiting in
	// RL.ACQUIRE is not idle). 0 means never. Must be >= 0. Defaults to 0.
	Timeout time.Duration `mapstructure:"timeout"`

	// (Optional) Largest command an authenticated client may send, in
	// bytes as on the wire; a bigger one closes the connection with a
	// protocol error before the rest is read. (Before AUTH the limits are
	// Redis's: 10 arguments of at most 16 KiB.) 16384..536870912.
	// Defaults to 1048576 (1 MiB).
	MaxRequestBytes int64 `mapstructure:"max_request_bytes"`

	// (Optional) Longest limiter name and client name (CLIENT SETNAME), in
	// bytes. 1..65536. Defaults to 512.
	MaxNameLength int `mapstructure:"max_name_length"`

	// (Optional) Prefix of every key rlproxy writes on the backends. Must not
	// contain '{' or '}', which would break the hash tags rlproxy adds.
	// Defaults to "rlproxy:" ("rl:" is the default prefix of
	// express-rate-limit's Redis store and others, whose keys a gateway
	// user must reach).
	KeyPrefix string `mapstructure:"key_prefix"`

	// (Optional) Number of sub-limiters (shards) a limiter is split into when
	// RL.SETRATE gives no SHARDS option; 1..1024. Defaults to 1.
	DefaultShards int `mapstructure:"default_shards"`

	// (Optional) Permits per second one sub-limiter should carry; SHARDS AUTO
	// sizes a limiter's shard count from its rate with it. Must be > 0.
	// Defaults to 50000.
	ShardRate int64 `mapstructure:"shard_rate"`

	// (Optional) Upper bound on the shard count SHARDS AUTO picks; 1..1024.
	// Defaults to 64.
	MaxAutoShards int `mapstructure:"max_auto_shards"`

	// (Optional) How many other shards an acquire tries after its first shard
	// denies; 0..1024. Defaults to 2.
	MaxProbes int `mapstructure:"max_probes"`

	// (Optional) What an acquire answers when its backend fails: "error"
	// (return the error), "allow" (fail open) or "deny" (fail closed).
	// Defaults to "error".
	OnBackendError BackendErrorPolicy `mapstructure:"on_backend_error"`

	// (Optional) Time limit of each backend call (dial, read and write).
	// Must be > 0. Defaults to 500ms.
	BackendTimeout time.Duration `mapstructure:"backend_timeout"`

	// (Optional) How long a failed backend node is skipped before one probe
	// call tests it again. Must be > 0. Defaults to 1s.
	BreakerCooldown time.Duration `mapstructure:"breaker_cooldown"`

	// (Optional) How many calls in a row a backend node must fail to
	// answer (unreachable or past backend_timeout) before its breaker
	// opens: one slow answer among good ones does not. Must be >= 1.
	// Defaults to 3.
	BreakerFailures int `mapstructure:"breaker_failures"`

	// (Optional) How long SIGTERM / SIGINT may take: waiting clients are
	// answered "ERR rlproxy is shutting down" (their booked permits given
	// back) at once, requests in flight get this long to finish, then
	// every connection is closed. Must be > 0. Defaults to 5s.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`

	// (Optional) On SIGTERM / SIGINT, how long /readyz answers 503
	// (draining) while clients are still served, before the listeners
	// close: time for a load balancer to stop sending new clients. Only
	// when metrics_listen serves /readyz; it is part of shutdown_timeout,
	// so it must be >= 0 and < shutdown_timeout. Defaults to 1s.
	ShutdownReadyDelay time.Duration `mapstructure:"shutdown_ready_delay"`

	// (Optional) How long a connection polls its socket for a reply (or a
	// client's next request) before sleeping, when the proxy is otherwise
	// idle: it spares a thread wake-up per hop at light load, for CPU that
	// nothing else wanted. 0 disables it. Must be >= 0 and <= 10ms.
	// Defaults to 100us.
	BusyPoll time.Duration `mapstructure:"busy_poll"`

	// (Optional) Connections per backend node; 0 means go-redis' default
	// (10 per CPU). Must be >= 0. Defaults to 0.
	PoolSize int `mapstructure:"pool_size"`

	// (Optional) Answer repeated denials from a local cache until their
	// retry_after has passed, sparing the backend. Defaults to true.
	DenyCache bool `mapstructure:"deny_cache"`

	// (Optional) Most denials the deny cache holds; when it is full,
	// expired ones are cleared and, if need be, random live ones make
	// room, so new denials are still cached. Must be > 0. Defaults to
	// 100000 (about 20 MB at most).
	DenyCacheSize int `mapstructure:"deny_cache_size"`

	// (Optional) Maximum number of clients waiting at once (TIMEOUT/BLOCK)
	// in this proxy. Must be > 0. Defaults to 10000.
	MaxWaiters int `mapstructure:"max_waiters"`

	// (Optional) Policies: one rule over every name that starts with a
	// prefix, applied as RL.POLICY SET at start (before clients are
	// answered) and on SIGHUP. One unchanged is left as it is; one removed
	// from the file is not deleted (RL.POLICY DEL does that). Set in the
	// config file only. Defaults to none.
	Policies []Policy `mapstructure:"policies"`

	// (Optional) Most policies there may be (RL.POLICY SET of one more is
	// refused). Must be > 0. Defaults to 1000.
	MaxPolicies int `mapstructure:"max_policies"`

	// (Optional) How often a proxy polls for changes made through other
	// proxies that the change feed (Pub/Sub) did not bring: the policies'
	// version, and the limiters it has waiters on. Changes normally arrive
	// within a round trip; this bounds how late they are while Pub/Sub is
	// down. Must be between 100ms and 1h. Defaults to 5s.
	ChangeBackstop time.Duration `mapstructure:"change_backstop"`

	// (Optional) Minimum log level: "debug", "info", "warn" or "error".
	// Defaults to "info".
	LogLevel string `mapstructure:"log_level"`

	// (Optional) Log line format: "text" or "json". Defaults to "text".
	LogFormat string `mapstructure:"log_format"`

	// (Optional) Address serving Prometheus metrics at /metrics and the
	// health checks /healthz and /readyz, for example "127.0.0.1:9121".
	// Empty disables all three. Defaults to "".
	MetricsListen string `mapstructure:"metrics_listen"`

	// (Optional) Address serving Envoy's rate limit service (gRPC
	// envoy.service.ratelimit.v3.RateLimitService and the gRPC health
	// service), for example "127.0.0.1:8081". Over TLS with the tls_*
	// files when tls_listen is set. Needs rls_config. Empty: off.
	// Defaults to "".
	RLSListen string `mapstructure:"rls_listen"`

	// (Optional) A file, or a folder of .yaml files, of envoyproxy/ratelimit
	// rate limit configs (domain, descriptors, rate_limit ...). Reloaded
	// on SIGHUP: a bad file refuses the reload and the running rules stay.
	// Defaults to "".
	RLSConfig string `mapstructure:"rls_config"`

	// (Optional) Add RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
	// and their X-RateLimit-* spellings to each ShouldRateLimit reply's
	// response_headers_to_add. Defaults to false.
	RLSResponseHeaders bool `mapstructure:"rls_response_headers"`

	// (Optional) Gateway passthrough: forward every command rlproxy does
	// not own to Redis and relay its reply unchanged, so an application
	// uses Redis and the RL.* commands through one URL. Defaults to false.
	Passthrough bool `mapstructure:"passthrough"`

	// (Optional) redis:// or rediss:// URL of the Redis passthrough
	// forwards to. Empty means the first of backends, the cluster (by key
	// slot) or the embedded backend. Defaults to "".
	PassthroughBackend string `mapstructure:"passthrough_backend"`

	// (Optional) Most backend connections pinned to clients at once
	// (MULTI, blocking commands, Pub/Sub, SELECT, CLIENT TRACKING); one
	// more is answered "ERR max number of pinned connections reached".
	// Must be > 0. Defaults to 1000.
	PassthroughMaxPinned int `mapstructure:"passthrough_max_pinned"`

	// (Optional) Most of those pinned connections one user (of users,
	// admins excepted) holds at once, so one tenant's blocked clients
	// cannot take every MULTI and SUBSCRIBE from the others; one more is
	// answered "ERR max number of pinned connections per user reached".
	// Must be >= 0. Defaults to 0: a tenth of passthrough_max_pinned (at
	// least 1).
	PassthroughMaxPinnedPerUser int `mapstructure:"passthrough_max_pinned_per_user"`

	// (Optional) Longest wait for a forwarded command's reply (blocking
	// commands such as BLPOP excepted). Past it the backend connection is
	// dropped and replaced, and every command waiting on it is answered
	// "ERR passthrough backend connection broken: no reply in ...". Must
	// be > 0. Defaults to 5s.
	PassthroughTimeout time.Duration `mapstructure:"passthrough_timeout"`

	// (Optional) Most bytes of forwarded commands' replies queued for a
	// client whose socket does not take them (it sends and does not
	// read); past it the client is closed, like Redis's
	// client-output-buffer-limit. 0 means no bound. Defaults to 33554432
	// (32 MiB).
	PassthroughClientBuffer int `mapstructure:"passthrough_client_buffer"`

	// (Optional) How long a client that holds passthrough_client_buffer
	// bytes of a big streamed reply may take none of it before it is
	// closed. The clients sharing its backend connection wait that long
	// for their replies, so it is kept apart from passthrough_timeout
	// (which must cover Redis's own time to build a big reply). Must be
	// > 0. Defaults to 5s.
	PassthroughClientStall time.Duration `mapstructure:"passthrough_client_stall"`
	// (Optional) Read the gateway's clients and the shared backend
	// connections from one event loop (a goroutine over an epoll set)
	// instead of a goroutine each, running plain forwarded commands and
	// the handshake there: no goroutine's wake-up per command, and
	// commands reach Redis in the order they came. Linux only; clients
	// under TLS or with a timeout keep their goroutine. Defaults to true
	// (docs/gateway.md).
	PassthroughLoop bool `mapstructure:"passthrough_loop"`
}

// Default returns the configuration used for every key that no file,
// environment variable or flag sets. It is the only place defaults live.
func Default() Config {
	return Config{
		Listen:          "127.0.0.1:6380",
		Backends:        nil,
		Cluster:         nil,
		RequirePass:     "",
		Users:           nil,
		TLSListen:       "",
		TLSCertFile:     "",
		TLSKeyFile:      "",
		TLSClientCAFile: "",

		ReloadMayDropAuth: false,

		MaxClients:      10000,
		Timeout:         0,
		MaxRequestBytes: 1 << 20,
		MaxNameLength:   512,
		KeyPrefix:       "rlproxy:",
		DefaultShards:   1,
		ShardRate:       50000,
		MaxAutoShards:   64,
		MaxProbes:       2,
		OnBackendError:  FailWithError,
		BackendTimeout:  500 * time.Millisecond,
		BreakerCooldown: time.Second,
		BreakerFailures: 3,
		ShutdownTimeout: 5 * time.Second,
		BusyPoll:        100 * time.Microsecond,
		PoolSize:        0,
		DenyCache:       true,
		DenyCacheSize:   100_000,
		MaxWaiters:      10000,
		MaxPolicies:     1000,
		ChangeBackstop:  5 * time.Second,
		LogLevel:        "info",
		LogFormat:       "text",
		MetricsListen:   "",

		ShutdownReadyDelay:          time.Second,
		Passthrough:                 false,
		PassthroughBackend:          "",
		PassthroughMaxPinned:        1000,
		PassthroughMaxPinnedPerUser: 0,
		PassthroughTimeout:          5 * time.Second,
		PassthroughClientBuffer:     32 << 20,
		PassthroughClientStall:      5 * time.Second,
		PassthroughLoop:             true,
	}
}

// BackendErrorPolicy is what an acquire answers when a backend it needs
// is unavailable (on_backend_error).
type BackendErrorPolicy string

// The policies of on_backend_error.
const (
	FailWithError BackendErrorPolicy = "error" // return the error
	FailOpen      BackendErrorPolicy = "allow" // grant
	FailClosed    BackendErrorPolicy = "deny"  // deny, retry after 1s
)

// maxShards bounds default_shards, max_auto_shards and max_probes: the
// largest shard count a limiter may have. It is limiter.MaxShards, written
// out because config imports nothing of rlproxy's (a test in
// internal/proxy keeps the two equal).
const maxShards = 1024

// MaxShards is maxShards, for that test.
const MaxShards = maxShards

// Validate checks every key and returns nil or an error listing each
// problem on its own line, each naming the offending key.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: "+format, args...))
	}

	if err := checkAddr(c.Listen); err != nil {
		bad("listen must be a host:port address (got %q): %v", c.Listen, err)
	}
	if c.MetricsListen != "" {
		if err := checkAddr(c.MetricsListen); err != nil {
			bad("metrics_listen must be empty or a host:port address (got %q): %v", c.MetricsListen, err)
		} else if c.MetricsListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") { // ":0": two free ports
			bad("metrics_listen must differ from listen (both %q)", c.Listen)
		}
	}

	errs = append(errs, c.checkFrontDoor()...)

	if c.RLSListen != "" {
		if err := checkAddr(c.RLSListen); err != nil {
			bad("rls_listen must be empty or a host:port address (got %q): %v", c.RLSListen, err)
		} else if (c.RLSListen == c.Listen || c.RLSListen == c.MetricsListen) && !strings.HasSuffix(c.RLSListen, ":0") {
			bad("rls_listen must differ from listen and metrics_listen (%q)", c.RLSListen)
		}
		if c.RLSConfig == "" {
			bad("rls_listen needs rls_config (the rate limit configs it serves)")
		}
	}

	if len(c.Backends) > 0 && len(c.Cluster) > 0 {
		bad("backends and cluster are mutually exclusive: set one of them (or neither, for the embedded in-memory backend)")
	}
	errs = append(errs, checkURLs("backends", c.Backends, false)...)
	errs = append(errs, checkURLs("cluster", c.Cluster, true)...)
	errs = append(errs, c.checkBackendTLS()...)

	if strings.ContainsAny(c.KeyPrefix, "{}") {
		bad("key_prefix must not contain '{' or '}' (got %q)", c.KeyPrefix)
	}
	if c.DefaultShards < 1 || c.DefaultShards > maxShards {
		bad("default_shards must be between 1 and %d (got %d)", maxShards, c.DefaultShards)
	}
	if c.ShardRate <= 0 {
		bad("shard_rate must be > 0 (got %d)", c.ShardRate)
	}
	if c.MaxAutoShards < 1 || c.MaxAutoShards > maxShards {
		bad("max_auto_shards must be between 1 and %d (got %d)", maxShards, c.MaxAutoShards)
	}
	if c.MaxProbes < 0 || c.MaxProbes > maxShards {
		bad("max_probes must be between 0 and %d (got %d)", maxShards, c.MaxProbes)
	}
	switch c.OnBackendError {
	case FailWithError, FailOpen, FailClosed:
	default:
		bad("on_backend_error must be one of error, allow, deny (got %q)", c.OnBackendError)
	}
	if c.BackendTimeout <= 0 {
		bad("backend_timeout must be > 0 (got %q)", c.BackendTimeout.String())
	}
	if c.BreakerCooldown <= 0 {
		bad("breaker_cooldown must be > 0 (got %q)", c.BreakerCooldown.String())
	}
	if c.BreakerFailures < 1 {
		bad("breaker_failures must be >= 1 (got %d)", c.BreakerFailures)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown_timeout must be > 0 (got %q)", c.ShutdownTimeout.String())
	}
	if c.ShutdownReadyDelay < 0 || (c.ShutdownTimeout > 0 && c.ShutdownReadyDelay >= c.ShutdownTimeout) {
		bad("shutdown_ready_delay must be >= 0 and less than shutdown_timeout %s (got %q)", c.ShutdownTimeout, c.ShutdownReadyDelay.String())
	}
	if c.BusyPoll < 0 || c.BusyPoll > 10*time.Millisecond {
		bad("busy_poll must be between 0 and 10ms (got %q)", c.BusyPoll.String())
	}
	if c.PoolSize < 0 {
		bad("pool_size must be >= 0 (got %d)", c.PoolSize)
	}
	if c.DenyCacheSize <= 0 {
		bad("deny_cache_size must be > 0 (got %d)", c.DenyCacheSize)
	}
	if c.MaxWaiters <= 0 {
		bad("max_waiters must be > 0 (got %d)", c.MaxWaiters)
	}
	if c.PassthroughMaxPinned <= 0 {
		bad("passthrough_max_pinned must be > 0 (got %d)", c.PassthroughMaxPinned)
	}
	if c.PassthroughMaxPinnedPerUser < 0 {
		bad("passthrough_max_pinned_per_user must be >= 0 (got %d)", c.PassthroughMaxPinnedPerUser)
	}
	if c.PassthroughTimeout <= 0 {
		bad("passthrough_timeout must be > 0 (got %q)", c.PassthroughTimeout.String())
	}
	if c.PassthroughClientBuffer < 0 {
		bad("passthrough_client_buffer must be >= 0 (got %d)", c.PassthroughClientBuffer)
	}
	if c.PassthroughClientStall <= 0 {
		bad("passthrough_client_stall must be > 0 (got %q)", c.PassthroughClientStall.String())
	}
	if c.PassthroughBackend != "" {
		errs = append(errs, checkURLs("passthrough_backend", []string{c.PassthroughBackend}, false)...)
	}

	if c.MaxPolicies <= 0 {
		bad("max_policies must be > 0 (got %d)", c.MaxPolicies)
	} else if len(c.Policies) > c.MaxPolicies {
		bad("policies: %d listed, more than max_policies (%d)", len(c.Policies), c.MaxPolicies)
	}
	if c.ChangeBackstop < 100*time.Millisecond || c.ChangeBackstop > time.Hour {
		bad("change_backstop must be between 100ms and 1h (got %q)", c.ChangeBackstop.String())
	}
	for i, p := range c.Policies {
		if !strings.HasSuffix(p.Pattern, "*") || strings.Count(p.Pattern, "*") != 1 {
			bad("policies[%d]: pattern must be a prefix followed by '*' (like user:*), got %q", i, p.Pattern)
		}
		if len(p.Pattern) > c.MaxNameLength+1 {
			bad("policies[%d]: pattern is longer than %d bytes: no name could match it (max_name_length is %d)", i, c.MaxNameLength+1, c.MaxNameLength)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level must be one of debug, info, warn, error (got %q)", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("log_format must be one of text, json (got %q)", c.LogFormat)
	}

	return errors.Join(errs...)
}

// checkBackendTLS checks the backend_tls_* files: they exist, the
// certificate comes with its key, and some backend uses TLS (rediss://),
// so that a file meant for TLS is never silently unused.
func (c Config) checkBackendTLS() []error {
	var errs []error
	files := []struct{ key, path string }{
		{"backend_tls_ca_file", c.BackendTLSCAFile},
		{"backend_tls_cert_file", c.BackendTLSCertFile},
		{"backend_tls_key_file", c.BackendTLSKeyFile},
	}
	set := false
	for _, f := range files {
		if f.path == "" {
			continue
		}
		set = true
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %v", f.key, err))
		}
	}
	if (c.BackendTLSCertFile == "") != (c.BackendTLSKeyFile == "") {
		errs = append(errs, fmt.Errorf("config: backend_tls_cert_file and backend_tls_key_file go together: set both or neither"))
	}
	isTLS := func(u string) bool { return strings.HasPrefix(u, "rediss://") }
	if set && !slices.ContainsFunc(c.Backends, isTLS) && !slices.ContainsFunc(c.Cluster, isTLS) {
		errs = append(errs, fmt.Errorf("config: backend_tls_* files are set but no backend or cluster URL uses TLS (rediss://)"))
	}
	return errs
}

// checkAddr accepts "host:port" and ":port" with a numeric port.
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number between 0 and 65535", port)
	}
	return nil
}

// checkURLs validates the backend or cluster URLs of key. Passwords are
// redacted from the messages, which usually end up in logs.
func checkURLs(key string, urls []string, cluster bool) []error {
	var errs []error
	seen := make(map[string]int, len(urls))
	for i, raw := range urls {
		name := fmt.Sprintf("%s[%d]", key, i)
		if err := checkURL(raw, cluster); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", name, err))
			continue
		}
		if j, dup := seen[raw]; dup {
			errs = append(errs, fmt.Errorf("config: %s: duplicate of %s[%d]", name, key, j))
			continue
		}
		seen[raw] = i
	}
	return errs
}

func checkURL(raw string, cluster bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the url.Error text would repeat a password
		}
		return fmt.Errorf("invalid URL: %v", err)
	}
	shown := raw
	if _, hasPassword := u.User.Password(); hasPassword {
		shown = u.Redacted()
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("invalid URL %q: scheme must be redis or rediss", shown)
	}
	if u.Host == "" {
		return fmt.Errorf("invalid URL %q: host is missing", shown)
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return fmt.Errorf("invalid URL %q: %v", shown, err)
	}
	if cluster && opts.DB != 0 {
		return fmt.Errorf("invalid URL %q: Redis Cluster only has database 0 (got %d)", shown, opts.DB)
	}
	return nil
}

// Policy is one entry of policies: RL.POLICY SET's pattern and options
// (rlproxy checks the options as RL.POLICY SET does, at start and on
// reload).
type Policy struct {
	// (Required) A prefix followed by '*': "user:*", "tenant:acme:*", "*".
	Pattern string `mapstructure:"pattern"`
	// (Required) Permits per interval, and the interval ("1s", "500ms").
	Rate     int64 `mapstructure:"rate"`
	Interval Word  `mapstructure:"interval"`
	// (Optional) Further limits, each a rate and an interval (LIMIT).
	Limits []PolicyLimit `mapstructure:"limits"`
	// (Optional) ALGO, BURST, SHARDS (a number or "AUTO"), MODE and SHADOW
	// as in RL.POLICY SET.
	Algo   string `mapstructure:"algo"`
	Burst  int64  `mapstructure:"burst"`
	Shards Word   `mapstructure:"shards"`
	Mode   string `mapstructure:"mode"`
	Shadow bool   `mapstructure:"shadow"`
}

// PolicyLimit is one further limit of a policy.
type PolicyLimit struct {
	Rate     int64 `mapstructure:"rate"`
	Interval Word  `mapstructure:"interval"`
}

// Word is a policy's argument written as RL.POLICY SET takes it: a string,
// or a number written as one ("shards: 4").
type Word string

// Args are the policy as RL.POLICY SET's arguments after the subcommand.
func (p Policy) Args() []string {
	args := []string{p.Pattern, strconv.FormatInt(p.Rate, 10), string(p.Interval)}
	for _, l := range p.Limits {
		args = append(args, "LIMIT", strconv.FormatInt(l.Rate, 10), string(l.Interval))
	}
	if p.Algo != "" {
		args = append(args, "ALGO", p.Algo)
	}
	if p.Burst != 0 {
		args = append(args, "BURST", strconv.FormatInt(p.Burst, 10))
	}
	if p.Shards != "" {
		args = append(args, "SHARDS", string(p.Shards))
	}
	if p.Mode != "" {
		args = append(args, "MODE", p.Mode)
	}
	if p.Shadow {
		args = append(args, "SHADOW")
	}
	return args
}

// MaxPinnedPerUser is passthrough_max_pinned_per_user, its default (0)
// made a tenth of passthrough_max_pinned.
func (c Config) MaxPinnedPerUser() int {
	if c.PassthroughMaxPinnedPerUser > 0 {
		return c.PassthroughMaxPinnedPerUser
	}
	return max(1, c.PassthroughMaxPinned/10)
}
