package config

import (
	"reflect"
	"slices"
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
