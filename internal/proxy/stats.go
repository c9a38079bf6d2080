package proxy

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/rlproxy/rlproxy/lease"
	"github.com/rlproxy/rlproxy/ratelimit"
	"github.com/rlproxy/rlproxy/server"
)

// stat is one figure rlproxy reports, in one place for both outlets: its
// INFO section and field, its Prometheus metric, and how to read it.
type stat struct {
	section string // INFO section ("Limiters", "BusyPoll"; "": /metrics only)
	field   string // INFO field
	metric  string // Prometheus name after "rlproxy_" ("": INFO only)
	help    string
	gauge   bool // a level now, not a count since start
	read    func() int64
}

// statTable is every figure of the Limiters, Leases and BusyPoll
// sections, and the server's figures (INFO shows them in the server's
// own Clients and Stats sections). Each backend node's figures are in
// nodeTable. srv is read when a figure is, so it may be set after the
// table is made.
func statTable(l *ratelimit.Limiters, leases *lease.Service, srv **server.Server, budget time.Duration, p *busypoll.Poller) []stat {
	lim := func(f func(ratelimit.Stats) int64) func() int64 { return func() int64 { return f(l.Stats()) } }
	front := func(f func(server.Stats) int64) func() int64 { return func() int64 { return f((*srv).Stats()) } }
	if p == nil {
		budget = 0
	}
	return []stat{
		{"Limiters", "granted", "acquire_granted_total", "RL.ACQUIRE calls granted.", false,
			lim(func(s ratelimit.Stats) int64 { return s.Granted })},
		{"Limiters", "denied", "acquire_denied_total", "RL.ACQUIRE calls denied.", false,
			lim(func(s ratelimit.Stats) int64 { return s.Denied })},
		{"Limiters", "denied_from_cache", "acquire_denied_from_cache_total", "Denials answered from the deny cache.", false,
			lim(func(s ratelimit.Stats) int64 { return s.DeniedFromCache })},
		{"Limiters", "shadow_denied", "acquire_shadow_denied_total", "RL.ACQUIRE calls a SHADOW limiter denied and granted anyway (counted in granted too).", false,
			lim(func(s ratelimit.Stats) int64 { return s.ShadowDenied })},
		{"Limiters", "errors", "acquire_errors_total", "RL.ACQUIRE calls that failed.", false,
			lim(func(s ratelimit.Stats) int64 { return s.Errors })},
		{"Limiters", "waiting_clients", "waiting_clients", "Clients waiting in RL.ACQUIRE (TIMEOUT/BLOCK) now.", true,
			lim(func(s ratelimit.Stats) int64 { return s.WaitingClients })},
		{"Limiters", "deny_cache_entries", "deny_cache_entries", "Denials the deny cache holds now.", true,
			lim(func(s ratelimit.Stats) int64 { return s.DenyCacheEntries })},
		{"Policies", "policies", "policies", "Policies (RL.POLICY) in force on this proxy.", true,
			func() int64 { return int64(len(l.Policies())) }},
		{"Leases", "lease_waiting_clients", "lease_waiting_clients", "Clients waiting in RL.LEASE (TIMEOUT/BLOCK) now.", true,
			leases.Waiting},
		{"BusyPoll", "busy_poll_us", "", "", true, func() int64 { return budget.Microseconds() }},
		{"BusyPoll", "busy_poll_reads", "busy_poll_reads_total", "Socket reads that polled before sleeping.", false,
			func() int64 { polled, _ := p.Stats(); return polled }},
		{"BusyPoll", "busy_poll_caught", "busy_poll_caught_total", "Polling reads whose data came while polling.", false,
			func() int64 { _, caught := p.Stats(); return caught }},
		{"", "connected_clients", "connected_clients", "Client connections open now.", true,
			front(func(s server.Stats) int64 { return s.ConnectedClients })},
		{"", "total_connections_received", "connections_received_total", "Client connections accepted.", false,
			front(func(s server.Stats) int64 { return s.Connections })},
		{"", "total_commands_processed", "commands_processed_total", "Commands processed.", false,
			front(func(s server.Stats) int64 { return s.Commands })},
		{"", "rejected_connections", "rejected_connections_total", "Client connections refused: max_clients reached.", false,
			front(func(s server.Stats) int64 { return s.Rejected })},
		{"", "accept_errors_out_of_fds", "accept_errors_out_of_fds_total", "Accepts that failed for want of file descriptors.", false,
			front(func(s server.Stats) int64 { return s.AcceptErrors })},
		{"", "auth_failures", "auth_failures_total", "AUTH and HELLO ... AUTH calls that failed.", false,
			front(func(s server.Stats) int64 { return s.AuthFailures })},
		{"", "tls_handshake_failures", "tls_handshake_failures_total", "Clients' TLS handshakes that failed.", false,
			front(func(s server.Stats) int64 { return s.TLSHandshakeFailures })},
		{"", "recovered_panics", "recovered_panics_total", "Command handler panics answered as errors.", false,
			front(func(s server.Stats) int64 { return s.Panics })},
	}
}

// infoSections turns the table into INFO sections, in the table's order.
func infoSections(table []stat) []server.InfoSection {
	var out []server.InfoSection
	for _, st := range table {
		if st.section != "" && (len(out) == 0 || out[len(out)-1].Name != st.section) {
			out = append(out, server.InfoSection{Name: st.section})
		}
	}
	for i := range out {
		var rows []stat
		for _, st := range table {
			if st.section == out[i].Name {
				rows = append(rows, st)
			}
		}
		out[i].Lines = func() []string {
			lines := make([]string, len(rows))
			for j, st := range rows {
				lines[j] = st.field + ":" + strconv.FormatInt(st.read(), 10)
			}
			return lines
		}
	}
	return out
}

// statCollectors turns the table into Prometheus collectors.
func statCollectors(table []stat) []prometheus.Collector {
	var out []prometheus.Collector
	for _, st := range table {
		if st.metric == "" {
			continue
		}
		read := func() float64 { return float64(st.read()) }
		if st.gauge {
			out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "rlproxy", Name: st.metric, Help: st.help}, read))
		} else {
			out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rlproxy", Name: st.metric, Help: st.help}, read))
		}
	}
	return out
}

// nodeStat is one figure of each backend node (backend.Stats), in one
// place for both outlets: its key in the node's line of INFO's Backends
// section and its Prometheus metric, labelled node="<address>".
type nodeStat struct {
	field  string // key in the node's INFO line
	metric string // Prometheus name after "rlproxy_"
	help   string
	gauge  bool
	read   func(backend.Stats) int64
	show   func(int64) string // the INFO value (nil: the number)
	scale  float64            // the metric's value per unit read (0: 1)
}

// nodeTable is every figure of a backend node.
var nodeTable = []nodeStat{
	{field: "state", metric: "backend_up", help: "1 when the node's circuit breaker is closed.", gauge: true,
		read: func(s backend.Stats) int64 {
			if s.Up {
				return 1
			}
			return 0
		},
		show: func(up int64) string {
			if up == 1 {
				return "up"
			}
			return "down"
		}},
	{field: "calls", metric: "backend_calls_total", help: "Calls to a backend node.",
		read: func(s backend.Stats) int64 { return s.Calls }},
	{field: "errors", metric: "backend_errors_total", help: "Failed calls to a backend node.",
		read: func(s backend.Stats) int64 { return s.Errors }},
	{field: "avg_latency_us", metric: "backend_avg_latency_seconds", help: "Average latency of calls to a backend node.", gauge: true,
		read: func(s backend.Stats) int64 { return s.AvgLatency.Nanoseconds() }, scale: 1e-9,
		show: func(ns int64) string { return strconv.FormatInt(ns/1000, 10) }},
	// The mean since start times the calls: the time spent, which rate()
	// over a window divides by the calls' rate, so a dashboard shows the
	// mean latency of that window. Not in INFO (avg_latency_us is).
	{metric: "backend_call_seconds_total", help: "Time spent in calls to a backend node (script calls and their pipelines).",
		read: func(s backend.Stats) int64 { return s.AvgLatency.Nanoseconds() * s.Calls }, scale: 1e-9},
}

// backendInfo is INFO's Backends section: a line per node, its address
// and then the table's figures (read from one backend.Stats).
func backendInfo(nodes []*backend.Node) func() []string {
	return func() []string {
		lines := make([]string, len(nodes))
		for i, n := range nodes {
			s := n.Stats()
			line := "node" + strconv.Itoa(i) + ":addr=" + strings.ReplaceAll(n.Name(), " ", "_")
			for _, st := range nodeTable {
				if st.field == "" {
					continue
				}
				v := st.read(s)
				if st.show != nil {
					line += "," + st.field + "=" + st.show(v)
				} else {
					line += "," + st.field + "=" + strconv.FormatInt(v, 10)
				}
			}
			lines[i] = line
		}
		return lines
	}
}

// nodeCollectors turns the table into Prometheus collectors, a set per node.
func nodeCollectors(nodes []*backend.Node) []prometheus.Collector {
	var out []prometheus.Collector
	for _, n := range nodes {
		for _, st := range nodeTable {
			scale := st.scale
			if scale == 0 {
				scale = 1
			}
			read := func() float64 { return float64(st.read(n.Stats())) * scale }
			labels := prometheus.Labels{"node": n.Name()}
			if st.gauge {
				out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "rlproxy", Name: st.metric, Help: st.help, ConstLabels: labels}, read))
			} else {
				out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rlproxy", Name: st.metric, Help: st.help, ConstLabels: labels}, read))
			}
		}
	}
	return out
}

// policyCollector is /metrics' per-policy counts: the policies come and
// go (RL.POLICY), at most max_policies of them.
type policyCollector struct{ l *ratelimit.Limiters }

var (
	policyGranted = prometheus.NewDesc("rlproxy_policy_granted_total", "RL.ACQUIRE calls granted on names a policy governs.", []string{"policy"}, nil)
	policyDenied  = prometheus.NewDesc("rlproxy_policy_denied_total", "RL.ACQUIRE calls denied on names a policy governs.", []string{"policy"}, nil)
)

func (c policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- policyGranted
	ch <- policyDenied
}

func (c policyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.l.Policies() {
		ch <- prometheus.MustNewConstMetric(policyGranted, prometheus.CounterValue, float64(p.Granted), p.Pattern)
		ch <- prometheus.MustNewConstMetric(policyDenied, prometheus.CounterValue, float64(p.Denied), p.Pattern)
	}
}
