package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/internal/redistest"
)

// checkConfig runs the binary with --check-config and returns its
// output and exit code.
func checkConfig(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--check-config"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RLPROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// --check-config FILE checks a file without starting: "ok" and exit 0,
// or one line per problem, each naming its key, and exit 1 — TLS files
// that exist but do not parse included.
func TestBinaryCheckConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := redistest.MakeCA(t, dir)
	port := freePort(t)
	good := writeFile(t, dir, "good.yaml", fmt.Sprintf(`listen: 127.0.0.1:%s
tls_listen: 127.0.0.1:0
tls_cert_file: %s
tls_key_file: %s
tls_client_ca_file: %s
users:
  - name: app
    password: s3cret
    commands: [acquire]
    limiters: ["api:*"]
`, port, ca.ServerCert, ca.ServerKey, ca.CA))
	out, code := checkConfig(t, good)
	if code != 0 || out != "ok\n" {
		t.Errorf("--check-config of a good file: exit %d, output %q; want 0 and ok", code, out)
	}

	junk := writeFile(t, dir, "junk.pem", "not a certificate\n")
	bad := writeFile(t, dir, "bad.yaml", fmt.Sprintf(`listen: 127.0.0.1:%s
max_clients: 0
shutdown_ready_delay: 10s
tls_listen: 127.0.0.1:0
tls_cert_file: %s
tls_key_file: %s
tls_client_ca_file: %s
users:
  - name: app
    commands: [acquire]
`, port, junk, ca.ServerKey, junk))
	out, code = checkConfig(t, bad)
	if code != 1 {
		t.Errorf("--check-config of a bad file: exit %d, want 1:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, key := range []string{"max_clients", "shutdown_ready_delay", "users[0] (app)", "tls_cert_file", "tls_client_ca_file"} {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, key) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("--check-config: %d lines begin with %s, want 1:\n%s", n, key, out)
		}
	}
	if len(lines) != 5 {
		t.Errorf("--check-config: %d lines, want 5 (one per problem):\n%s", len(lines), out)
	}

	for _, tc := range []struct {
		file, want string
	}{
		{writeFile(t, dir, "typo.yaml", "max_clients: 10\nmax_client: 10\n"), `unknown key "max_client"`},
		{writeFile(t, dir, "type.yaml", "max_clients: many\n"), "max_clients: invalid value"},
		{filepath.Join(dir, "missing.yaml"), "missing.yaml"},
	} {
		out, code := checkConfig(t, tc.file)
		if code != 1 || strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("--check-config %s: exit %d, output %q; want 1 and one line with %q", filepath.Base(tc.file), code, out, tc.want)
		}
	}
}

// The start-up line says what the process serves: listeners, backends
// (addresses, never passwords), auth and users, metrics.
func TestBinaryStartupLine(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t), redistest.StartServer(t, redistest.WithPassword("hunter2"))
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	file := writeFile(t, dir, "rlproxy.yaml", fmt.Sprintf(`listen: 127.0.0.1:%s
metrics_listen: 127.0.0.1:%s
backends: [%q, %q]
users:
  - {name: app, password: s3cret, commands: [acquire]}
  - {name: ops, password: s3cret, commands: [admin]}
`, port, mport, a.URL(), b.URL()))
	p := startBinary(t, nil, "--config", file)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.log(), "rlproxy serving") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(t)
	var line string
	for _, l := range strings.Split(p.log(), "\n") {
		if strings.Contains(l, "rlproxy serving") {
			line = l
		}
	}
	for _, want := range []string{
		"listen=127.0.0.1:" + port, "tls_listen=off",
		fmt.Sprintf(`backends="2 standalone redis://%s,redis://%s"`, a.Addr(), b.Addr()),
		"auth=on", "users=2", "passthrough=off", "policies=0", "metrics=127.0.0.1:" + mport,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("start-up line lacks %s:\n%s", want, p.log())
		}
	}
	if strings.Contains(p.log(), "hunter2") {
		t.Errorf("the log shows a backend's password:\n%s", p.log())
	}
}

// --check-config loads rls_config too: a bad rate limit config is one
// problem line with its file, line and reason, and exit 1.
func TestBinaryCheckConfigRLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	main := writeFile(t, dir, "rlproxy.yaml", fmt.Sprintf("rls_listen: 127.0.0.1:0\nrls_config: %s\n", rules))
	if out, code := checkConfig(t, main); code != 0 || out != "ok\n" {
		t.Errorf("good rls_config: exit %d, output %q; want 0 and ok", code, out)
	}
	for _, tc := range []struct{ rules, want string }{
		{"domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 10\n",
			"rls_config: " + rules + ":5: invalid rate limit unit 'fortnight'"},
		{"domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: month, requests_per_unit: 10, algo: sliding-window}\n",
			"rls_config: " + rules + ":4: unit 'month' is a calendar month, which only algo fixed-window counts"},
		{"domain: edge\ndescriptors:\n  - key: user\n   value: x\n", "rls_config: " + rules + ":2: bad YAML"},
	} {
		writeFile(t, dir, "rules.yaml", tc.rules)
		out, code := checkConfig(t, main)
		if code != 1 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, tc.want) {
			t.Errorf("bad rls_config: exit %d, output %q; want 1 and one line beginning %q", code, out, tc.want)
		}
	}
	// A missing file, and problems of the main file beside it: one line each.
	bad := writeFile(t, dir, "bad.yaml", fmt.Sprintf("max_clients: 0\nrls_listen: 127.0.0.1:0\nrls_config: %s\n", filepath.Join(dir, "none.yaml")))
	out, code := checkConfig(t, bad)
	if code != 1 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "max_clients") || !strings.Contains(out, "rls_config: stat "+filepath.Join(dir, "none.yaml")) {
		t.Errorf("missing rls_config: exit %d, output %q", code, out)
	}
}
