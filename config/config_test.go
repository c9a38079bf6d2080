package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

const examplePath = "../config.example.yaml"

// clearEnv hides RLPROXY_* variables of the surrounding environment; viper
// ignores empty variables.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "")
		}
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rlproxy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLoad(t *testing.T, args ...string) Config {
	t.Helper()
	c, err := Load(args, nil)
	if err != nil {
		t.Fatalf("Load(%q): %v", args, err)
	}
	return c
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNoArgsGivesDefault(t *testing.T) {
	clearEnv(t)
	if got := mustLoad(t); !reflect.DeepEqual(got, Default()) {
		t.Errorf("Load() = %+v, want Default() = %+v", got, Default())
	}
}

// The example file must hold exactly the defaults and list every key.
func TestExampleFileMatchesDefault(t *testing.T) {
	clearEnv(t)
	if got := mustLoad(t, "--config", examplePath); !reflect.DeepEqual(got, Default()) {
		t.Errorf("config.example.yaml loads as\n%+v\nwant Default()\n%+v", got, Default())
	}

	v := viper.New()
	v.SetConfigFile(examplePath)
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	got, want := v.AllKeys(), keys()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("config.example.yaml keys = %q, want every key %q", got, want)
	}
}

func TestExampleFileViaEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv("RLPROXY_CONFIG", examplePath)
	t.Setenv("RLPROXY_LISTEN", ":7000")
	if got := mustLoad(t); got.Listen != ":7000" || got.KeyPrefix != "rlproxy:" {
		t.Errorf("got %+v", got)
	}
}

func TestEveryKeyHasAFlag(t *testing.T) {
	fs := newFlagSet()
	for _, key := range keys() {
		if key == "" {
			t.Fatal("Config field without mapstructure tag")
		}
		name := flagName(key)
		if isFileOnly(key) {
			continue
		}
		if fs.Lookup(name) == nil {
			t.Errorf("key %s has no flag --%s", key, name)
		}
		if flagKey(name) != key {
			t.Errorf("flagKey(%q) = %q, want %q", name, flagKey(name), key)
		}
	}
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, `
listen: "127.0.0.1:1001"
backends: ["redis://file-a:6379", "redis://file-b:6379"]
backend_timeout: 1s
default_shards: 3
key_prefix: "file:"
`)
	setEnv := func(t *testing.T) {
		t.Setenv("RLPROXY_LISTEN", "127.0.0.1:2002")
		t.Setenv("RLPROXY_BACKENDS", "redis://env-a:6379, redis://env-b:6379,redis://env-c:6379")
		t.Setenv("RLPROXY_BACKEND_TIMEOUT", "2s")
		t.Setenv("RLPROXY_DEFAULT_SHARDS", "5")
	}
	flags := []string{
		"--config", file,
		"--listen", "127.0.0.1:3003",
		"--backend", "redis://flag-a:6379",
		"--backend=redis://flag-b:6379",
		"--backend-timeout", "3s",
		"--default-shards=7",
	}

	tests := []struct {
		name      string
		env       bool
		args      []string
		listen    string
		backends  []string
		timeout   time.Duration
		shards    int
		keyPrefix string
	}{
		{
			name: "file", args: []string{"--config", file},
			listen: "127.0.0.1:1001", backends: []string{"redis://file-a:6379", "redis://file-b:6379"},
			timeout: time.Second, shards: 3, keyPrefix: "file:",
		},
		{
			name: "env over file", env: true, args: []string{"--config", file},
			listen: "127.0.0.1:2002", backends: []string{"redis://env-a:6379", "redis://env-b:6379", "redis://env-c:6379"},
			timeout: 2 * time.Second, shards: 5, keyPrefix: "file:",
		},
		{
			// DESIGN.md: environment variables override flags and file.
			// Flags not given (e.g. --key-prefix) must not reset the file's value.
			name: "env over flags", env: true, args: flags,
			listen: "127.0.0.1:2002", backends: []string{"redis://env-a:6379", "redis://env-b:6379", "redis://env-c:6379"},
			timeout: 2 * time.Second, shards: 5, keyPrefix: "file:",
		},
		{
			name: "flags over file", args: flags,
			listen: "127.0.0.1:3003", backends: []string{"redis://flag-a:6379", "redis://flag-b:6379"},
			timeout: 3 * time.Second, shards: 7, keyPrefix: "file:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			if tt.env {
				setEnv(t)
			}
			c := mustLoad(t, tt.args...)
			if c.Listen != tt.listen {
				t.Errorf("listen = %q, want %q", c.Listen, tt.listen)
			}
			if !slices.Equal(c.Backends, tt.backends) {
				t.Errorf("backends = %q, want %q", c.Backends, tt.backends)
			}
			if c.BackendTimeout != tt.timeout {
				t.Errorf("backend_timeout = %v, want %v", c.BackendTimeout, tt.timeout)
			}
			if c.DefaultShards != tt.shards {
				t.Errorf("default_shards = %d, want %d", c.DefaultShards, tt.shards)
			}
			if c.KeyPrefix != tt.keyPrefix {
				t.Errorf("key_prefix = %q, want %q", c.KeyPrefix, tt.keyPrefix)
			}
			if c.MaxAutoShards != Default().MaxAutoShards {
				t.Errorf("max_auto_shards = %d, want default %d", c.MaxAutoShards, Default().MaxAutoShards)
			}
		})
	}
}

// Keys absent from the file (or with no file at all) are still read from
// the environment.
func TestEnvOnlyKeys(t *testing.T) {
	file := writeFile(t, "listen: \":6390\"\n")
	for _, args := range [][]string{{"--config", file}, nil} {
		clearEnv(t)
		t.Setenv("RLPROXY_KEY_PREFIX", "env:")
		t.Setenv("RLPROXY_MAX_PROBES", "0")
		t.Setenv("RLPROXY_SHARD_RATE", "1000")
		t.Setenv("RLPROXY_DENY_CACHE", "false")
		t.Setenv("RLPROXY_BREAKER_COOLDOWN", "250ms")
		t.Setenv("RLPROXY_CLUSTER", "redis://c1:7000,redis://c2:7000")
		t.Setenv("RLPROXY_ON_BACKEND_ERROR", "allow")
		t.Setenv("RLPROXY_REQUIRE_PASS", "hunter2")
		t.Setenv("RLPROXY_METRICS_LISTEN", "127.0.0.1:9121")

		c := mustLoad(t, args...)
		want := Default()
		if args != nil {
			want.Listen = ":6390"
		}
		want.KeyPrefix = "env:"
		want.MaxProbes = 0
		want.ShardRate = 1000
		want.DenyCache = false
		want.BreakerCooldown = 250 * time.Millisecond
		want.Cluster = []string{"redis://c1:7000", "redis://c2:7000"}
		want.OnBackendError = "allow"
		want.RequirePass = "hunter2"
		want.MetricsListen = "127.0.0.1:9121"
		if !reflect.DeepEqual(c, want) {
			t.Errorf("args %q:\ngot  %+v\nwant %+v", args, c, want)
		}
	}
}

func TestFlagsOfEveryType(t *testing.T) {
	clearEnv(t)
	c := mustLoad(t,
		"--cluster", "redis://a:7000,redis://b:7000", "--cluster", "rediss://c:7000",
		"--deny-cache=false", "--pool-size", "4", "--shard-rate", "123",
		"--max-waiters", "5", "--log-level", "debug", "--log-format", "json",
		"--require-pass", "pw", "--breaker-cooldown", "2m", "--metrics-listen", ":9121",
	)
	want := Default()
	want.Cluster = []string{"redis://a:7000", "redis://b:7000", "rediss://c:7000"}
	want.DenyCache = false
	want.PoolSize = 4
	want.ShardRate = 123
	want.MaxWaiters = 5
	want.LogLevel = "debug"
	want.LogFormat = "json"
	want.RequirePass = "pw"
	want.BreakerCooldown = 2 * time.Minute
	want.MetricsListen = ":9121"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestUnknownKeyInFile(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "listen: \":6390\"\nlisen: \":6391\"\nlog:\n  level: debug\n")
	_, err := Load([]string{"--config", file}, nil)
	wantErr(t, err, file, `unknown key "lisen"`, `unknown key "log.level"`)
}

func TestBadFile(t *testing.T) {
	clearEnv(t)
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := Load([]string{"--config", missing}, nil)
	wantErr(t, err, "config:", missing)

	malformed := writeFile(t, "listen: [\n")
	_, err = Load([]string{"--config", malformed}, nil)
	wantErr(t, err, "config:", malformed)
}

func TestMalformedValues(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want []string
	}{
		{name: "duration without unit", file: "backend_timeout: 5\n", want: []string{"backend_timeout", "unit"}},
		{name: "bad duration", env: map[string]string{"RLPROXY_BREAKER_COOLDOWN": "soon"}, want: []string{"breaker_cooldown", `"soon"`}},
		{name: "bad int", file: "default_shards: many\n", want: []string{"default_shards", `"many"`}},
		{name: "bad bool", env: map[string]string{"RLPROXY_DENY_CACHE": "maybe"}, want: []string{"deny_cache", `"maybe"`}},
		{name: "bad flag value", args: []string{"--max-probes", "x"}, want: []string{"max-probes"}},
		{name: "unknown flag", args: []string{"--lisen", ":1"}, want: []string{"--lisen"}},
		{name: "positional argument", args: []string{"extra"}, want: []string{`"extra"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			_, err := Load(args, nil)
			wantErr(t, err, tt.want...)
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string // substring of the error; "" = valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"listen empty", func(c *Config) { c.Listen = "" }, "config: listen must be"},
		{"listen no port", func(c *Config) { c.Listen = "localhost" }, `listen must be a host:port address (got "localhost")`},
		{"listen bad port", func(c *Config) { c.Listen = "localhost:http" }, "config: listen"},
		{"listen port only", func(c *Config) { c.Listen = ":0" }, ""},
		{"metrics_listen bad", func(c *Config) { c.MetricsListen = "9121" }, "config: metrics_listen"},
		{"metrics_listen same as listen", func(c *Config) { c.MetricsListen = c.Listen }, "config: metrics_listen must differ from listen"},
		{"backends ok", func(c *Config) {
			c.Backends = []string{"redis://a:6379", "rediss://user:pw@b:6380/3", "redis://[::1]:6379"}
		}, ""},
		{"backends bad scheme", func(c *Config) { c.Backends = []string{"redis://a:6379", "foo://x"} },
			`config: backends[1]: invalid URL "foo://x": scheme must be redis or rediss`},
		{"backends no scheme", func(c *Config) { c.Backends = []string{"10.0.0.1:6379"} }, "config: backends[0]: invalid URL"},
		{"backends no host", func(c *Config) { c.Backends = []string{"redis://"} }, "config: backends[0]: invalid URL \"redis://\": host is missing"},
		{"backends bad db", func(c *Config) { c.Backends = []string{"redis://a:6379/x"} }, "config: backends[0]: invalid URL"},
		{"backends bad option", func(c *Config) { c.Backends = []string{"redis://a:6379?bogus=1"} }, "config: backends[0]: invalid URL"},
		{"backends duplicate", func(c *Config) { c.Backends = []string{"redis://a:1", "redis://b:1", "redis://a:1"} },
			"config: backends[2]: duplicate of backends[0]"},
		{"cluster ok", func(c *Config) { c.Cluster = []string{"redis://a:7000", "rediss://b:7000"} }, ""},
		{"cluster bad scheme", func(c *Config) { c.Cluster = []string{"http://a:7000"} }, "config: cluster[0]: invalid URL \"http://a:7000\": scheme must be redis or rediss"},
		{"cluster db not 0", func(c *Config) { c.Cluster = []string{"redis://a:7000/1"} }, "config: cluster[0]"},
		{"backends and cluster", func(c *Config) {
			c.Backends = []string{"redis://a:6379"}
			c.Cluster = []string{"redis://b:7000"}
		}, "config: backends and cluster are mutually exclusive"},
		{"backend TLS files with rediss", func(c *Config) {
			c.Backends = []string{"redis://a:6379", "rediss://b:6380"}
			c.BackendTLSCAFile, c.BackendTLSCertFile, c.BackendTLSKeyFile = "config.go", "config.go", "load.go"
		}, ""},
		{"backend TLS CA for a TLS cluster", func(c *Config) {
			c.Cluster, c.BackendTLSCAFile = []string{"rediss://a:7000"}, "config.go"
		}, ""},
		{"backend TLS files without rediss", func(c *Config) {
			c.Backends, c.BackendTLSCAFile = []string{"redis://a:6379"}, "config.go"
		}, "config: backend_tls_* files are set but no backend or cluster URL uses TLS (rediss://)"},
		{"backend TLS files with the embedded backend", func(c *Config) { c.BackendTLSCAFile = "config.go" },
			"no backend or cluster URL uses TLS"},
		{"backend TLS cert without key", func(c *Config) {
			c.Backends, c.BackendTLSCertFile = []string{"rediss://a:6379"}, "config.go"
		}, "config: backend_tls_cert_file and backend_tls_key_file go together"},
		{"backend TLS key without cert", func(c *Config) {
			c.Backends, c.BackendTLSKeyFile = []string{"rediss://a:6379"}, "config.go"
		}, "backend_tls_cert_file and backend_tls_key_file go together"},
		{"backend TLS CA file missing", func(c *Config) {
			c.Backends, c.BackendTLSCAFile = []string{"rediss://a:6379"}, "no/such/ca.pem"
		}, "config: backend_tls_ca_file: stat no/such/ca.pem: no such file or directory"},
		{"key_prefix open brace", func(c *Config) { c.KeyPrefix = "rl:{x" }, `config: key_prefix must not contain '{' or '}' (got "rl:{x")`},
		{"key_prefix close brace", func(c *Config) { c.KeyPrefix = "}" }, "config: key_prefix"},
		{"key_prefix empty", func(c *Config) { c.KeyPrefix = "" }, ""},
		{"default_shards 0", func(c *Config) { c.DefaultShards = 0 }, "config: default_shards must be between 1 and 1024 (got 0)"},
		{"default_shards 1025", func(c *Config) { c.DefaultShards = 1025 }, "config: default_shards"},
		{"default_shards 1024", func(c *Config) { c.DefaultShards = 1024 }, ""},
		{"shard_rate 0", func(c *Config) { c.ShardRate = 0 }, "config: shard_rate must be > 0 (got 0)"},
		{"max_auto_shards 0", func(c *Config) { c.MaxAutoShards = 0 }, "config: max_auto_shards"},
		{"max_auto_shards 2000", func(c *Config) { c.MaxAutoShards = 2000 }, "config: max_auto_shards"},
		{"max_probes -1", func(c *Config) { c.MaxProbes = -1 }, "config: max_probes must be between 0 and 1024 (got -1)"},
		{"max_probes 1025", func(c *Config) { c.MaxProbes = 1025 }, "config: max_probes"},
		{"max_probes 0", func(c *Config) { c.MaxProbes = 0 }, ""},
		{"on_backend_error", func(c *Config) { c.OnBackendError = "x" }, `config: on_backend_error must be one of error, allow, deny (got "x")`},
		{"on_backend_error deny", func(c *Config) { c.OnBackendError = "deny" }, ""},
		{"backend_timeout 0", func(c *Config) { c.BackendTimeout = 0 }, `config: backend_timeout must be > 0 (got "0s")`},
		{"breaker_cooldown negative", func(c *Config) { c.BreakerCooldown = -time.Second }, `config: breaker_cooldown must be > 0 (got "-1s")`},
		{"policies over max_policies", func(c *Config) {
			c.MaxPolicies = 1
			c.Policies = []Policy{{Pattern: "a:*", Rate: 1, Interval: "1s"}, {Pattern: "b:*", Rate: 1, Interval: "1s"}}
		}, "config: policies: 2 listed, more than max_policies (1)"},
		{"breaker_failures 0", func(c *Config) { c.BreakerFailures = 0 }, "config: breaker_failures must be >= 1 (got 0)"},
		{"pool_size -1", func(c *Config) { c.PoolSize = -1 }, "config: pool_size must be >= 0 (got -1)"},
		{"shutdown_ready_delay negative", func(c *Config) { c.ShutdownReadyDelay = -time.Second }, `config: shutdown_ready_delay must be >= 0 and less than shutdown_timeout 5s (got "-1s")`},
		{"shutdown_ready_delay past the timeout", func(c *Config) { c.ShutdownReadyDelay = 5 * time.Second }, `config: shutdown_ready_delay must be >= 0 and less than shutdown_timeout 5s (got "5s")`},
		{"busy_poll negative", func(c *Config) { c.BusyPoll = -time.Microsecond }, `config: busy_poll must be between 0 and 10ms (got "-1µs")`},
		{"busy_poll too long", func(c *Config) { c.BusyPoll = time.Second }, `config: busy_poll must be between 0 and 10ms (got "1s")`},
		{"max_waiters 0", func(c *Config) { c.MaxWaiters = 0 }, "config: max_waiters must be > 0 (got 0)"},
		{"log_level", func(c *Config) { c.LogLevel = "verbose" }, `config: log_level must be one of debug, info, warn, error (got "verbose")`},
		{"log_format", func(c *Config) { c.LogFormat = "xml" }, `config: log_format must be one of text, json (got "xml")`},
		{"policy pattern shape", func(c *Config) { c.Policies = []Policy{{Pattern: "user:", Rate: 1, Interval: "1s"}} },
			`config: policies[0]: pattern must be a prefix followed by '*' (like user:*), got "user:"`},
		{"policy prefix as long as a name", func(c *Config) {
			c.MaxNameLength = 8
			c.Policies = []Policy{{Pattern: "user:123*", Rate: 1, Interval: "1s"}}
		}, ""},
		{"policy prefix longer than a name", func(c *Config) {
			c.MaxNameLength = 8
			c.Policies = []Policy{{Pattern: "user:1234*", Rate: 1, Interval: "1s"}}
		}, "config: policies[0]: pattern is longer than 9 bytes: no name could match it (max_name_length is 8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			wantErr(t, err, tt.want)
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.DefaultShards = 0
	c.LogFormat = "xml"
	wantErr(t, c.Validate(), "default_shards", "log_format")
}

// Backend URLs carry passwords; error messages end up in logs.
func TestValidateRedactsPasswords(t *testing.T) {
	c := Default()
	c.Backends = []string{"foo://user:hunter2@x:1", "redis://user:hunter2@x:1/notadb", "redis://user:hunter2@x:bad"}
	err := c.Validate()
	wantErr(t, err, "backends[0]", "backends[1]", "backends[2]")
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error reveals the password: %v", err)
	}
}

func TestBackendsAndClusterViaLoad(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "backends: [\"redis://a:6379\"]\n")
	t.Setenv("RLPROXY_CLUSTER", "redis://b:7000")
	_, err := Load([]string{"--config", file}, nil)
	wantErr(t, err, "backends and cluster are mutually exclusive")
}

func TestHelp(t *testing.T) {
	clearEnv(t)
	for _, arg := range []string{"--help", "-h"} {
		var out bytes.Buffer
		_, err := Load([]string{"--listen", ":1", arg}, &out)
		if !errors.Is(err, ErrHelp) {
			t.Fatalf("Load(%s) error = %v, want ErrHelp", arg, err)
		}
		usage := out.String()
		for _, key := range keys() {
			if isFileOnly(key) {
				continue
			}
			if !strings.Contains(usage, "--"+flagName(key)+" ") {
				t.Errorf("usage lacks --%s:\n%s", flagName(key), usage)
			}
		}
		for _, s := range []string{"--config", "--version", `(default "127.0.0.1:6380")`, "(default 500ms)", "RLPROXY_"} {
			if !strings.Contains(usage, s) {
				t.Errorf("usage lacks %q:\n%s", s, usage)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	clearEnv(t)
	var out bytes.Buffer
	if _, err := Load([]string{"--version"}, &out); !errors.Is(err, ErrVersion) {
		t.Fatalf("error = %v, want ErrVersion", err)
	}
	if out.Len() != 0 {
		t.Errorf("--version wrote %q; the caller prints the version", out.String())
	}
}
