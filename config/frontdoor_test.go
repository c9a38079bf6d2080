package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Users come from the config file, as a new user types them.
func TestUsersFromFile(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, `
users:
  - name: app
    password: "s3cret"
    commands: [acquire]
    limiters: ["api:*"]
  - name: ops
    password_sha256: "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"
    commands: [admin]
`)
	c := mustLoad(t, "--config", file)
	want := []User{
		{Name: "app", Password: "s3cret", Commands: []string{"acquire"}, Limiters: []string{"api:*"}},
		{Name: "ops", PasswordSHA256: "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0", Commands: []string{"admin"}},
	}
	if !reflect.DeepEqual(c.Users, want) {
		t.Errorf("users = %+v\nwant %+v", c.Users, want)
	}
}

func TestBadUsers(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"users:\n  - name: app\n    commands: [acquire]\n", "users[0] (app): set exactly one of password and password_sha256"},
		{"users:\n  - name: app\n    password: a\n    password_sha256: ab\n    commands: [acquire]\n", "set exactly one"},
		{"users:\n  - name: app\n    password_sha256: xyz\n    commands: [acquire]\n", "password_sha256 must be 64 hex digits"},
		{"users:\n  - name: app\n    password: a\n", "users[0] (app): commands must list acquire, redis and/or admin"},
		{"users:\n  - name: app\n    password: a\n    commands: [write]\n", `unknown category "write"`},
		{"users:\n  - password: a\n    commands: [admin]\n", "users[0]: name is missing"},
		{"users:\n  - name: a b\n    password: a\n    commands: [admin]\n", "without spaces"},
		{"users:\n  - {name: a, password: x, commands: [admin]}\n  - {name: a, password: y, commands: [admin]}\n", "users[1] (a): duplicate of users[0]"},
		{"require_pass: x\nusers:\n  - {name: default, password: y, commands: [admin]}\n", "the user default is require_pass's"},
		{"users:\n  - name: app\n    pasword: a\n    commands: [admin]\n", "pasword"},
		{"users:\n  - {name: app, password: a, commands: [admin], limiters: [\"\"]}\n", "empty pattern"},
	} {
		clearEnv(t)
		_, err := Load([]string{"--config", writeFile(t, tc.yaml)}, nil)
		wantErr(t, err, tc.want)
	}
}

func TestFrontDoorKeys(t *testing.T) {
	clearEnv(t)
	t.Setenv("RLPROXY_MAX_CLIENTS", "7")
	t.Setenv("RLPROXY_TIMEOUT", "30s")
	c := mustLoad(t, "--max-request-bytes", "65536", "--max-name-length", "64")
	if c.MaxClients != 7 || c.Timeout != 30*time.Second || c.MaxRequestBytes != 65536 || c.MaxNameLength != 64 {
		t.Errorf("got %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-clients", "0"}, "max_clients must be > 0"},
		{[]string{"--timeout", "-1s"}, "timeout must be >= 0"},
		{[]string{"--max-request-bytes", "100"}, "max_request_bytes must be between"},
		{[]string{"--max-name-length", "0"}, "max_name_length must be between"},
		{[]string{"--tls-listen", ":6390"}, "tls_listen needs tls_cert_file and tls_key_file"},
		{[]string{"--tls-cert-file", "x.pem"}, "need tls_listen"},
		{[]string{"--tls-listen", ":6390", "--tls-cert-file", "/nonexistent.pem", "--tls-key-file", "/nonexistent.key"}, "tls_cert_file: stat /nonexistent.pem"},
		{[]string{"--tls-listen", "127.0.0.1:6380"}, "tls_listen must differ from listen"},
		{[]string{"--rls-listen", ":8081"}, "rls_listen needs rls_config"},
		{[]string{"--rls-listen", "nowhere", "--rls-config", "r.yaml"}, "rls_listen must be empty or a host:port address"},
	} {
		clearEnv(t)
		_, err := Load(tc.args, nil)
		wantErr(t, err, tc.want)
	}
}

func TestChanged(t *testing.T) {
	a, b := Default(), Default()
	b.MaxClients, b.KeyPrefix = 5, "x:"
	b.Users = []User{{Name: "u", Password: "p", Commands: []string{"admin"}}}
	if got, want := Changed(a, b), []string{"users", "max_clients", "key_prefix"}; !slices.Equal(got, want) {
		t.Errorf("Changed = %q, want %q", got, want)
	}
	if got := Changed(a, Default()); got != nil {
		t.Errorf("Changed of equal configs = %q", got)
	}
}

// What a reload may not drop by accident, and what is a change, not a drop.
func TestDroppedAuth(t *testing.T) {
	app := User{Name: "app", Password: "pw", Commands: []string{"acquire", "redis"}, Limiters: []string{"api:*"},
		Keys: []string{"app:*"}, BackendUser: &BackendUser{Name: "app", Password: "apw"}}
	ops := User{Name: "ops", Password: "pw", Commands: []string{"admin"}}
	running := Default()
	running.RequirePass, running.Users = "root", []User{app, ops}
	running.TLSListen, running.TLSCertFile, running.TLSKeyFile, running.TLSClientCAFile = ":6390", "c", "k", "ca"
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"same", func(*Config) {}, nil},
		{"empty", func(c *Config) { *c = Default() }, []string{"require_pass", "users", "tls_listen", "tls_client_ca_file"}},
		{"new passwords and files", func(c *Config) {
			c.RequirePass = "other"
			c.Users = []User{{Name: "app", PasswordSHA256: "ab", Commands: []string{"acquire"}, Limiters: []string{"web:*"},
				Keys: []string{"web:*"}, BackendUser: &BackendUser{Name: "web"}}}
			c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = "c2", "k2", "ca2"
		}, nil},
		{"some users removed", func(c *Config) { c.Users = c.Users[1:] }, nil},
		{"require_pass removed", func(c *Config) { c.RequirePass = "" }, []string{"require_pass"}},
		{"users removed", func(c *Config) { c.Users = nil }, []string{"users"}},
		{"limiters cut off", func(c *Config) {
			a := app
			a.Limiters = nil
			c.Users = []User{ops, a}
		}, []string{"users[1] (app).limiters"}},
		{"keys cut off", func(c *Config) { c.Users[0].Keys = nil }, []string{"users[0] (app).keys"}},
		{"keys widened to all", func(c *Config) { c.Users[0].Keys = []string{"*"} }, nil}, // spelled out: meant
		{"backend_user cut off", func(c *Config) { c.Users[0].BackendUser = nil }, []string{"users[0] (app).backend_user"}},
		{"everything of a user cut off", func(c *Config) {
			c.Users[0] = User{Name: "app", Password: "pw", Commands: []string{"acquire"}}
		}, []string{"users[0] (app).limiters", "users[0] (app).keys", "users[0] (app).backend_user"}},
		{"client certificates no longer required", func(c *Config) { c.TLSClientCAFile = "" }, []string{"tls_client_ca_file"}},
	} {
		c := running
		c.Users = slices.Clone(running.Users)
		tc.edit(&c)
		if got := DroppedAuth(running, c); !slices.Equal(got, tc.want) {
			t.Errorf("%s: DroppedAuth = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := AuthChanged(running, Default()); !slices.Equal(got, authKeys) {
		t.Errorf("AuthChanged(running, Default()) = %q, want %q", got, authKeys)
	}
}

// A reload refuses a file without keys; Load (at start) takes it.
func TestReloadEmptyFile(t *testing.T) {
	clearEnv(t)
	for _, text := range []string{"", "\n", "# only a comment\n"} {
		file := writeFile(t, text)
		if _, err := Reload([]string{"--config", file}); err == nil || !strings.Contains(err.Error(), "is empty") {
			t.Errorf("Reload of %q: %v, want an empty-file error", text, err)
		}
		if _, err := Load([]string{"--config", file}, nil); err != nil {
			t.Errorf("Load of %q: %v", text, err)
		}
	}
	file := writeFile(t, "reload_may_drop_auth: true\n")
	if c, err := Reload([]string{"--config", file}); err != nil || !c.ReloadMayDropAuth {
		t.Errorf("Reload of reload_may_drop_auth: true: %+v, %v", c.ReloadMayDropAuth, err)
	}
	t.Setenv("RLPROXY_RELOAD_MAY_DROP_AUTH", "true")
	if c := mustLoad(t); c.ReloadMayDropAuth {
		t.Error("RLPROXY_RELOAD_MAY_DROP_AUTH set the key: it is the file's alone")
	}
}
