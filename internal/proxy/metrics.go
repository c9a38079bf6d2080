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

// metrics serves Prometheus metrics — the stats table and the node table
// (stats.go), which INFO reads too — and the health checks (health.go).
type metrics struct {
	srv *http.Server
	ln  net.Listener
}

func startMetrics(addr string, pool *backend.Pool, table []stat, h *health, more ...prometheus.Collector) (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(statCollectors(table)...)
	reg.MustRegister(nodeCollectors(pool.Nodes())...)
	reg.MustRegister(more...)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	h.handle(mux)
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
