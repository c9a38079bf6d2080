package proxy

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rlproxy/rlproxy/backend"
)

// metrics serves Prometheus metrics: the stats table (stats.go), which
// INFO reads too, and each backend node's backend.Stats.
type metrics struct {
	srv *http.Server
	ln  net.Listener
}

func startMetrics(addr string, pool *backend.Pool, table []stat, more ...prometheus.Collector) (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(statCollectors(table)...)
	reg.MustRegister(more...)
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
