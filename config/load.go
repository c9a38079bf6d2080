package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

var (
	// ErrHelp is returned by Load when --help (-h) was given; the usage has
	// already been written. The caller should exit with status 0.
	ErrHelp = errors.New("config: help requested")

	// ErrVersion is returned by Load when --version was given. The caller
	// should print its version and exit with status 0.
	ErrVersion = errors.New("config: version requested")
)

// envPrefix prefixes the environment variable of every key.
const envPrefix = "RLPROXY"

// Load builds the Config from, lowest to highest precedence: Default(), the
// YAML file named by --config (or $RLPROXY_CONFIG), the flags in args
// (which exclude the program name) and RLPROXY_* environment variables —
// the order DESIGN.md's CLI contract gives: flags override the file, the
// environment overrides both (a deployment's environment has the last
// word over a command line baked into an image). The result is
// validated. Usage goes to stderr when --help is given.
func Load(args []string, stderr io.Writer) (Config, error) {
	return load(args, stderr, false)
}

// Reload is Load for a running rlproxy (SIGHUP): it also refuses a config
// file that sets no key — empty, or cut before its first key — which is
// never what a reload means (a file being written, or emptied by mistake).
func Reload(args []string) (Config, error) {
	return load(args, nil, true)
}

func load(args []string, stderr io.Writer, reload bool) (Config, error) {
	if stderr == nil {
		stderr = io.Discard
	}
	fs := newFlagSet()
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("config: %w (see --help)", err)
	}
	if help, _ := fs.GetBool("help"); help {
		printUsage(stderr, fs)
		return Config{}, ErrHelp
	}
	if version, _ := fs.GetBool("version"); version {
		return Config{}, ErrVersion
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("config: unexpected argument %q: settings are given as --flags (see --help)", fs.Arg(0))
	}
	if file, _ := fs.GetString("check-config"); file != "" {
		if fs.Changed("config") {
			return Config{}, errors.New("config: --check-config names the file to check: leave out --config")
		}
		c, err := build(fs, file, false)
		return Config{}, check(c, err)
	}
	path, _ := fs.GetString("config")
	if env := os.Getenv(envPrefix + "_CONFIG"); env != "" {
		path = env
	}
	c, err := build(fs, path, reload)
	if err != nil {
		return Config{}, err
	}
	return c, nil
}

// build makes the Config from the flags in fs, the file at path (if
// any), and the environment, and validates it.
func build(fs *pflag.FlagSet, path string, reload bool) (Config, error) {
	v := viper.New()
	if path != "" {
		if err := readFile(v, path); err != nil {
			return Config{}, err
		}
		if reload && len(v.AllKeys()) == 0 {
			return Config{}, fmt.Errorf("config: config file %s is empty (it sets no key): a reload needs the whole file", path)
		}
	}

	// Unmarshal only sees environment variables of keys bound explicitly.
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	for _, key := range keys() {
		if isFileOnly(key) {
			continue
		}
		if err := v.BindEnv(key); err != nil {
			return Config{}, fmt.Errorf("config: binding %s: %w", key, err)
		}
	}

	// Only flags given on the command line count: a flag's default must not
	// override the file. Set is viper's top precedence, so a flag whose
	// environment variable is set is left out: the environment wins.
	fs.Visit(func(f *pflag.Flag) {
		key := flagKey(f.Name)
		if !slices.Contains(keys(), key) {
			return // --config, --check-config, --help, --version
		}
		if os.Getenv(envName(key)) != "" {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v.Set(key, sv.GetSlice())
		} else {
			v.Set(key, f.Value.String())
		}
	})

	c, err := decode(v)
	if err != nil {
		return Config{}, err
	}
	c.Backends = cleanList(c.Backends)
	c.Cluster = cleanList(c.Cluster)
	if len(c.Users) == 0 {
		c.Users = nil // "users: []" equals an absent key
	}
	if len(c.Policies) == 0 {
		c.Policies = nil
	}

	return c, c.Validate() // c too: --check-config parses its TLS files
}

// readFile loads the YAML file at path into v and rejects keys Config does
// not have, so that a typo is an error rather than a silently ignored line.
func readFile(v *viper.Viper, path string) error {
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("config: reading config file %s: %w", path, err)
	}
	var errs []error
	known := keys()
	for _, key := range v.AllKeys() { // only the file's keys: nothing else is set yet
		if !slices.Contains(known, key) {
			errs = append(errs, fmt.Errorf("config: %s: unknown key %q (valid keys are listed in config.example.yaml)", path, key))
		}
	}
	return errors.Join(errs...)
}

// decode returns Default() overlaid with every key set in v. Keys are
// decoded one by one so that a malformed value gets a one-line error naming
// its key and value.
func decode(v *viper.Viper) (Config, error) {
	c := Default()
	fields := reflect.ValueOf(&c).Elem()
	var errs []error
	for i, key := range keys() {
		if !v.IsSet(key) {
			continue
		}
		err := v.UnmarshalKey(key, fields.Field(i).Addr().Interface(), viper.DecodeHook(decodeHook),
			func(dc *mapstructure.DecoderConfig) { dc.ErrorUnused = true }) // a typo inside a user entry
		if err != nil {
			// Drop mapstructure's "'<name>' " prefix, empty for UnmarshalKey.
			var de interface{ Unwrap() error }
			if errors.As(err, &de) && de.Unwrap() != nil {
				err = de.Unwrap()
			}
			errs = append(errs, fmt.Errorf("config: %s: invalid value %q: %v", key, fmt.Sprint(v.Get(key)), err))
		}
	}
	return c, errors.Join(errs...)
}

// keys returns the key of every Config field, in field order.
func keys() []string {
	t := reflect.TypeFor[Config]()
	ks := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		ks = append(ks, t.Field(i).Tag.Get("mapstructure"))
	}
	return ks
}

// flagName returns the flag that sets key.
func flagName(key string) string {
	if key == "backends" {
		return "backend" // repeated once per URL
	}
	return strings.ReplaceAll(key, "_", "-")
}

// flagKey is the inverse of flagName.
func flagKey(name string) string {
	if name == "backend" {
		return "backends"
	}
	return strings.ReplaceAll(name, "-", "_")
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	wordType     = reflect.TypeFor[Word]()
)

// decodeHook converts the strings environment variables and flags produce:
// "500ms" to a time.Duration and "a,b" to a list. A bare number is not a
// valid duration: YAML "backend_timeout: 5" would otherwise mean 5ns.
func decodeHook(from, to reflect.Type, data any) (any, error) {
	switch {
	case to == durationType && from != durationType:
		switch from.Kind() {
		case reflect.String:
			return time.ParseDuration(strings.TrimSpace(data.(string)))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
			return nil, fmt.Errorf("duration %v has no unit: write it like \"500ms\" or \"2s\"", data)
		}
	case to == wordType && from.Kind() >= reflect.Int && from.Kind() <= reflect.Uint64:
		return fmt.Sprint(data), nil // a policy's "shards: 4" or "interval: 1000" (ms)
	case to.Kind() == reflect.Slice && from.Kind() == reflect.String:
		return strings.Split(data.(string), ","), nil
	}
	return data, nil
}

// cleanList trims the elements of a list, drops empty ones and returns nil
// for an empty list, so that "backends: []" equals an absent key.
func cleanList(list []string) []string {
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// newFlagSet defines --config, --check-config, --help, --version and one flag per key, with
// Default() values as the defaults shown by --help.
func newFlagSet() *pflag.FlagSet {
	d := Default()
	fs := pflag.NewFlagSet("rlproxy", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard) // Load returns parse errors; it prints nothing itself
	fs.Usage = func() {}

	fs.String("config", "", "YAML config `file` (default $RLPROXY_CONFIG)")
	fs.String(flagName("listen"), d.Listen, "`address` rlproxy accepts Redis clients on")
	fs.StringSlice(flagName("backends"), d.Backends, "redis:// or rediss:// `URL` of a standalone Redis node (user, password, db and TLS in the URL); repeat for several. With no --backend and no --cluster an embedded in-memory backend is used")
	fs.StringSlice(flagName("cluster"), d.Cluster, "redis:// or rediss:// seed `URL` of a Redis Cluster; repeat for several. Excludes --backend")
	fs.String(flagName("backend_tls_ca_file"), d.BackendTLSCAFile, "PEM `file` of the CAs that sign rediss:// backends' certificates (empty: the system's roots)")
	fs.String(flagName("backend_tls_cert_file"), d.BackendTLSCertFile, "PEM `file` of the client certificate for rediss:// backends that require one")
	fs.String(flagName("backend_tls_key_file"), d.BackendTLSKeyFile, "PEM `file` of that certificate's key")
	fs.String(flagName("require_pass"), d.RequirePass, "`password` of the default user, who may run everything: clients send it with AUTH (empty: no authentication unless users are set in the config file)")
	fs.String(flagName("tls_listen"), d.TLSListen, "`address` accepting clients over TLS (plain clients stay on --listen; needs --tls-cert-file and --tls-key-file)")
	fs.String(flagName("tls_cert_file"), d.TLSCertFile, "PEM `file` of the certificate (and chain) served on --tls-listen; reloaded on SIGHUP")
	fs.String(flagName("tls_key_file"), d.TLSKeyFile, "PEM `file` of that certificate's key; reloaded on SIGHUP")
	fs.String(flagName("tls_client_ca_file"), d.TLSClientCAFile, "PEM `file` of the CAs of client certificates: when set, TLS clients must present one (mutual TLS)")
	fs.Int(flagName("max_clients"), d.MaxClients, "most client connections at once; one more is answered an error and closed (> 0)")
	fs.Duration(flagName("timeout"), d.Timeout, "close a client connection idle this long (not one waiting in RL.ACQUIRE; 0 = never)")
	fs.Int64(flagName("max_request_bytes"), d.MaxRequestBytes, "largest command an authenticated client may send, in bytes (16384..536870912)")
	fs.Int(flagName("max_name_length"), d.MaxNameLength, "longest limiter name and client name, in bytes (1..65536)")
	fs.String(flagName("key_prefix"), d.KeyPrefix, "prefix of every key written on the backends; must not contain '{' or '}'")
	fs.Int(flagName("default_shards"), d.DefaultShards, "shards of a limiter whose RL.SETRATE has no SHARDS option (1..1024)")
	fs.Int64(flagName("shard_rate"), d.ShardRate, "permits/s per shard that SHARDS AUTO sizes limiters for (> 0)")
	fs.Int(flagName("max_auto_shards"), d.MaxAutoShards, "most shards SHARDS AUTO gives a limiter (1..1024)")
	fs.Int(flagName("max_probes"), d.MaxProbes, "other shards an acquire tries after a denial (0..1024)")
	fs.String(flagName("on_backend_error"), string(d.OnBackendError), "answer when a backend fails: error, allow (fail open) or deny (fail closed)")
	fs.Duration(flagName("backend_timeout"), d.BackendTimeout, "time limit of each backend dial, read and write (> 0)")
	fs.Duration(flagName("breaker_cooldown"), d.BreakerCooldown, "how long a failed backend node is skipped before a probe call (> 0)")
	fs.Int(flagName("breaker_failures"), d.BreakerFailures, "calls in a row a backend node must fail to answer before its breaker opens (>= 1)")
	fs.Duration(flagName("shutdown_timeout"), d.ShutdownTimeout, "how long SIGTERM/SIGINT may take to drain waiting clients and requests in flight (> 0)")
	fs.Duration(flagName("shutdown_ready_delay"), d.ShutdownReadyDelay, "on SIGTERM/SIGINT, how long /readyz answers 503 while clients are still served, before the listeners close (part of --shutdown-timeout; only with --metrics-listen)")
	fs.Duration(flagName("busy_poll"), d.BusyPoll, "how long an otherwise idle proxy polls a socket before sleeping (0 = never)")
	fs.Int(flagName("pool_size"), d.PoolSize, "connections per backend node (0: go-redis default, 10 per CPU)")
	fs.Bool(flagName("deny_cache"), d.DenyCache, "answer denials locally until their retry_after, a second at most (disable with --deny-cache=false)")
	fs.Int(flagName("deny_cache_size"), d.DenyCacheSize, "most denials the deny cache holds (> 0)")
	fs.Int(flagName("max_waiters"), d.MaxWaiters, "most clients waiting at once with TIMEOUT/BLOCK (> 0)")
	fs.Int(flagName("max_policies"), d.MaxPolicies, "most policies (RL.POLICY) there may be (> 0)")
	fs.Duration(flagName("change_backstop"), d.ChangeBackstop, "how often changes the change feed (Pub/Sub) may have missed are polled for (100ms..1h)")
	fs.String(flagName("log_level"), d.LogLevel, "minimum log `level`: debug, info, warn or error")
	fs.String(flagName("log_format"), d.LogFormat, "log `format`: text or json")
	fs.String(flagName("metrics_listen"), d.MetricsListen, "`address` serving Prometheus /metrics, e.g. 127.0.0.1:9121 (empty: off)")
	fs.String(flagName("rls_listen"), d.RLSListen, "`address` serving Envoy's rate limit service (gRPC ShouldRateLimit), e.g. 127.0.0.1:8081 (empty: off; needs --rls-config)")
	fs.String(flagName("rls_config"), d.RLSConfig, "envoyproxy/ratelimit rate limit config `file` or folder of .yaml files; reloaded on SIGHUP")
	fs.Bool(flagName("rls_response_headers"), d.RLSResponseHeaders, "add RateLimit-* and X-RateLimit-* headers to ShouldRateLimit replies")
	fs.String("check-config", "", "check the config `file` (with the other flags and RLPROXY_* variables, as rlproxy would read it; users, TLS files) without starting: prints ok or one line per problem, exits 0 or 1")
	fs.Bool(flagName("passthrough"), d.Passthrough, "gateway: forward every command rlproxy does not own to Redis (one URL for Redis and RL.*)")
	fs.String(flagName("passthrough_backend"), d.PassthroughBackend, "redis:// `URL` passthrough forwards to (empty: the first --backend, or the embedded backend)")
	fs.Int(flagName("passthrough_max_pinned"), d.PassthroughMaxPinned, "most backend connections pinned to clients at once (MULTI, blocking commands, Pub/Sub) (> 0)")
	fs.Duration(flagName("passthrough_timeout"), d.PassthroughTimeout, "longest wait for a forwarded command's reply, blocking commands excepted (> 0)")
	fs.Int(flagName("passthrough_max_pinned_per_user"), d.PassthroughMaxPinnedPerUser, "most pinned backend connections one user holds (0: a tenth of passthrough_max_pinned)")
	fs.Int(flagName("passthrough_client_buffer"), d.PassthroughClientBuffer, "most `bytes` of forwarded replies queued for a client that does not read them (0: no bound)")
	fs.Duration(flagName("passthrough_client_stall"), d.PassthroughClientStall, "how long a client holding passthrough_client_buffer of a big reply may take none of it before it is closed (> 0)")
	fs.Bool(flagName("passthrough_loop"), d.PassthroughLoop, "serve the gateway's plain clients and read its shared backend connections from one event loop over epoll (Linux; false: a goroutine each)")
	fs.BoolP("help", "h", false, "print this help and exit")
	fs.Bool("version", false, "print the version and exit")
	return fs
}

func printUsage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprint(w, `Usage: rlproxy [flags]

rlproxy is a Redis-protocol proxy serving rate limiters (RL.SETRATE,
RL.ACQUIRE, ...) that run as Lua scripts on backend Redis servers.

Settings come from, lowest to highest precedence: built-in defaults, the
YAML file given with --config, flags, and RLPROXY_* environment variables.
Flag --some-key is YAML key some_key and variable RLPROXY_SOME_KEY (--backend
is backends and RLPROXY_BACKENDS); list variables are comma-separated.

Flags:
`)
	fmt.Fprint(w, fs.FlagUsages())
}

// envName is the environment variable of key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(key)
}
