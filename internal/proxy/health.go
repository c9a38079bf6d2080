package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
)

// errDraining is /readyz's reason once a shutdown has begun.
var errDraining = errors.New("draining: rlproxy is shutting down")

// health answers the checks of load balancers and orchestrators on the
// metrics listener: /healthz (alive: 200 while the process serves) and
// /readyz (ready for new clients: every backend node answers and holds
// the scripts, and no shutdown has begun).
type health struct {
	nodes    []*backend.Node
	scripts  []*redis.Script
	timeout  time.Duration // bounds each call of a check (backend_timeout)
	draining atomic.Bool
}

// ready checks every node at once and returns nil or the reasons, in
// one line.
func (h *health) ready(ctx context.Context) error {
	if h.draining.Load() {
		return errDraining
	}
	// Each node's calls get timeout; a cluster also finds its masters
	// first, hence the outer bound.
	ctx, cancel := context.WithTimeout(ctx, 3*h.timeout)
	defer cancel()
	errs := make([]error, len(h.nodes))
	var wg sync.WaitGroup
	for i, n := range h.nodes {
		wg.Go(func() { errs[i] = n.Check(ctx, h.timeout, h.scripts) })
	}
	wg.Wait()
	var reasons []string
	for _, err := range errs {
		if err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	if len(reasons) > 0 {
		return errors.New(strings.Join(reasons, "; "))
	}
	return nil
}

func (h *health) handle(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := h.ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
