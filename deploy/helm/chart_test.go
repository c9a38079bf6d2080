// Package helm checks the Helm chart in deploy/helm/rlproxy: helm lint
// passes, and what helm template renders is a Deployment, Service and
// ConfigMaps rlproxy itself accepts.
package helm

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rlproxy/rlproxy/config"
)

// helmBinary finds helm: make test installs it (Makefile deps); a plain
// `go test ./...` without it skips, unless RLPROXY_REQUIRE_CLIENT_CHECKS is set (make test sets it).
func helmBinary(t *testing.T) string {
	path, err := exec.LookPath("helm")
	if err == nil {
		return path
	}
	gobin := filepath.Join(os.Getenv("HOME"), "go", "bin", "helm")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gobin = filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
	}
	if _, err := os.Stat(gobin); err == nil {
		return gobin
	}
	if os.Getenv("RLPROXY_REQUIRE_CLIENT_CHECKS") != "" {
		t.Fatal("helm is not installed (make deps installs it)")
	}
	t.Skip("helm is not installed (make deps installs it)")
	return ""
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// object is one rendered Kubernetes object, read loosely.
type object map[string]any

func (o object) get(path ...any) any {
	var v any = map[string]any(o)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			switch m := v.(type) {
			case object: // yaml.v3 decodes nested maps as the outer map's type
				v = m[k]
			case map[string]any:
				v = m[k]
			default:
				return nil
			}
		case int:
			s, _ := v.([]any)
			if k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

func render(t *testing.T, set ...string) map[string]object {
	t.Helper()
	args := []string{"template", "rl", "rlproxy"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	objects := map[string]object{}
	dec := yaml.NewDecoder(strings.NewReader(helm(t, args...)))
	for {
		var o object
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("helm template rendered bad YAML: %v", err)
		}
		kind, _ := o.get("kind").(string)
		name, _ := o.get("metadata", "name").(string)
		if kind == "" {
			continue // a document of comments only
		}
		objects[kind+"/"+name] = o
	}
	return objects
}

func TestChartLints(t *testing.T) {
	helm(t, "lint", "--strict", "rlproxy")
	helm(t, "lint", "--strict", "rlproxy", "--set", "rls.enabled=true", "--set", "secret.create=true")
}

func TestChartRendersWhatRlproxyAccepts(t *testing.T) {
	objs := render(t)
	dep, ok := objs["Deployment/rl-rlproxy"]
	if !ok {
		t.Fatalf("no Deployment rendered: %v", keys(objs))
	}
	c := dep.get("spec", "template", "spec", "containers", 0).(object)
	if got := c.get("livenessProbe", "httpGet", "path"); got != "/healthz" {
		t.Errorf("liveness probe path %v, want /healthz", got)
	}
	if got := c.get("readinessProbe", "httpGet", "path"); got != "/readyz" {
		t.Errorf("readiness probe path %v, want /readyz", got)
	}
	if got := dep.get("spec", "template", "spec", "securityContext", "runAsNonRoot"); got != true {
		t.Errorf("runAsNonRoot %v, want true", got)
	}
	if c.get("env") != nil {
		t.Errorf("env without a Secret: %v", c.get("env"))
	}
	svc := objs["Service/rl-rlproxy"]
	if got := portNames(svc); got != "resp metrics" {
		t.Errorf("service ports %q, want resp metrics", got)
	}

	// The config file the chart makes must be one rlproxy loads, listening
	// where the probes and the Service look.
	cfg := loadConfig(t, objs["ConfigMap/rl-rlproxy"].get("data", "rlproxy.yaml").(string))
	if cfg.Listen != "0.0.0.0:6380" || cfg.MetricsListen != "0.0.0.0:9121" {
		t.Errorf("listen %q metrics %q", cfg.Listen, cfg.MetricsListen)
	}
}

func TestChartWithRLSAndSecret(t *testing.T) {
	objs := render(t, "rls.enabled=true", "secret.create=true", "secret.requirePass=s3cret",
		"rls.rules.edge\\.yaml=domain: edge")
	svc := objs["Service/rl-rlproxy"]
	if got := portNames(svc); got != "resp grpc-rls metrics" {
		t.Errorf("service ports %q, want resp grpc-rls metrics", got)
	}
	if got := objs["ConfigMap/rl-rlproxy-rls"].get("data", "edge.yaml"); got != "domain: edge\n" && got != "domain: edge" {
		t.Errorf("rules file %q", got)
	}
	if got := objs["Secret/rl-rlproxy"].get("stringData", "require-pass"); got != "s3cret" {
		t.Errorf("secret require-pass %v", got)
	}
	c := objs["Deployment/rl-rlproxy"].get("spec", "template", "spec", "containers", 0).(object)
	if got := c.get("env", 0, "name"); got != "RLPROXY_REQUIRE_PASS" {
		t.Errorf("first env %v, want RLPROXY_REQUIRE_PASS from the Secret", got)
	}
	text := objs["ConfigMap/rl-rlproxy"].get("data", "rlproxy.yaml").(string)
	if !strings.Contains(text, "rls_listen: 0.0.0.0:8081") || !strings.Contains(text, "rls_config: /etc/rlproxy/rls") {
		t.Errorf("config lacks the RLS addresses:\n%s", text)
	}
	loadConfig(t, text)
}

func loadConfig(t *testing.T, text string) config.Config {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rlproxy.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatalf("rlproxy refuses the chart's config: %v\n%s", err, text)
	}
	return cfg
}

func portNames(svc object) string {
	var names []string
	ports, _ := svc.get("spec", "ports").([]any)
	for _, p := range ports {
		names = append(names, p.(object)["name"].(string))
	}
	return strings.Join(names, " ")
}

func keys(m map[string]object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
