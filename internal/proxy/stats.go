package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// sections, and the server's counters that /metrics shows (INFO shows
// them in the server's own Stats section). The Backends section and the
// per-node metrics read backend.Stats, one line or one labelled set per
// node (pool.Info, startMetrics). srv is read when a figure is, so it may
// be set after the table is made.
func statTable(l *ratelimit.Limiters, leases *lease.Service, srv **server.Server, budget time.Duration, p *busypoll.Poller) []stat {
	lim := func(f func(ratelimit.Stats) int64) func() int64 { return func() int64 { return f(l.Stats()) } }
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
			lim(func(s ratelimit.Stats) int64 { return s.CachedDenials })},
		{"Policies", "policies", "policies", "Policies (RL.POLICY) in force on this proxy.", true,
			func() int64 { return int64(len(l.Policies())) }},
		{"Leases", "lease_waiting_clients", "lease_waiting_clients", "Clients waiting in RL.LEASE (TIMEOUT/BLOCK) now.", true,
			leases.Waiting},
		{"BusyPoll", "busy_poll_us", "", "", true, func() int64 { return budget.Microseconds() }},
		{"BusyPoll", "busy_poll_reads", "busy_poll_reads_total", "Socket reads that polled before sleeping.", false,
			func() int64 { polled, _ := p.Stats(); return polled }},
		{"BusyPoll", "busy_poll_caught", "busy_poll_caught_total", "Polling reads whose data came while polling.", false,
			func() int64 { _, caught := p.Stats(); return caught }},
		{"", "auth_failures", "auth_failures_total", "AUTH and HELLO ... AUTH calls that failed.", false,
			func() int64 { return (*srv).AuthFailures() }},
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
