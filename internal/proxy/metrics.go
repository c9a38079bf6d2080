package proxy

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/internal/busypoll"
	"github.com/rlproxy/rlproxy/server"
	"github.com/rlproxy/rlproxy/sharding"
)

// metrics serves Prometheus metrics read from the same counters as INFO.
type metrics struct {
	srv *http.Server
	ln  net.Listener
}

func startMetrics(addr string, pool *backend.Pool, l *sharding.Limiters, poller *busypoll.Poller, srv *server.Server) (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rlproxy", Name: name, Help: help}, f)
	}
	st := l.Stats()
	reg.MustRegister(
		counter("acquire_granted_total", "RL.ACQUIRE calls granted.", func() float64 { return float64(st.Granted.Load()) }),
		counter("acquire_denied_total", "RL.ACQUIRE calls denied.", func() float64 { return float64(st.Denied.Load()) }),
		counter("acquire_denied_from_cache_total", "Denials answered from the deny cache.", func() float64 { return float64(st.CachedDenials.Load()) }),
		counter("acquire_errors_total", "RL.ACQUIRE calls that failed.", func() float64 { return float64(st.Errors.Load()) }),
		counter("auth_failures_total", "AUTH and HELLO ... AUTH calls that failed.", func() float64 { return float64(srv.AuthFailures()) }),
		counter("busy_poll_reads_total", "Socket reads that polled before sleeping.", func() float64 {
			polled, _ := poller.Stats()
			return float64(polled)
		}),
		counter("busy_poll_caught_total", "Polling reads whose data came while polling.", func() float64 {
			_, caught := poller.Stats()
			return float64(caught)
		}),
	)
	for _, n := range pool.Nodes() {
		labels := prometheus.Labels{"node": n.Name()}
		stats := n.Stats
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rlproxy", Name: "backend_calls_total",
				Help: "Calls to a backend node.", ConstLabels: labels}, func() float64 { return float64(stats().Calls) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "rlproxy", Name: "backend_errors_total",
				Help: "Failed calls to a backend node.", ConstLabels: labels}, func() float64 { return float64(stats().Errors) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "rlproxy", Name: "backend_up",
				Help: "1 when the node's circuit breaker is closed.", ConstLabels: labels}, func() float64 {
				if stats().Up {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "rlproxy", Name: "backend_avg_latency_seconds",
				Help: "Average latency of calls to a backend node.", ConstLabels: labels}, func() float64 { return stats().AvgLatency.Seconds() }),
		)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metrics{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go m.srv.Serve(ln) //nolint:errcheck // returns ErrServerClosed on close

	return m, nil
}

func (m *metrics) addr() string { return m.ln.Addr().String() }

func (m *metrics) close() error {
	if m == nil {
		return nil
	}
	return m.srv.Close()
}
