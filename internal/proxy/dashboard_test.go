package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/config"
)

// dashboardPath is the Grafana dashboard docs/operations.md points operators to.
const dashboardPath = "../../docs/grafana/rlproxy.json"

// metricName finds the metric names in a PromQL expression: rlproxy's
// own and the Go client's process_* and go_* ones.
var metricName = regexp.MustCompile(`\b(?:rlproxy|process|go)_[a-z0-9_]+\b`)

// Every metric name the dashboard's queries use is exported by a running
// rlproxy's /metrics, so the dashboard cannot drift from the code.
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Type    string
		Targets []struct{ Expr string }
		Panels  []panel // a collapsed row's
	}
	var dash struct{ Panels []panel }
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	used := map[string][]string{} // name -> panel titles
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				for _, name := range metricName.FindAllString(tg.Expr, -1) {
					used[name] = append(used[name], p.Title)
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if len(used) < 20 {
		t.Fatalf("the dashboard's queries name %d metrics; the pattern lost them?", len(used))
	}

	h := start(t, func(c *config.Config) { c.MetricsListen, c.Passthrough = "127.0.0.1:0", true })
	h.Do(t, "RL.SETRATE", "d", 1, "1m").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "d").Granted(0)
	// Per-policy series exist once a policy has decided something.
	h.Do(t, "RL.POLICY", "SET", "dash:*", 1, "1m").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "dash:1").Granted(0)
	h.Do(t, "RL.ACQUIRE", "dash:1").Denied(0)
	resp, err := http.Get("http://" + h.proxy.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	exported := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			exported[strings.Fields(line)[2]] = true
		}
	}
	for name, panels := range used {
		if !exported[name] {
			t.Errorf("the dashboard's panels %q query %s, which rlproxy does not export", panels, name)
		}
	}
}
