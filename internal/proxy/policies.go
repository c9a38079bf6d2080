package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/config"
)

// policySets parses the config file's policies as RL.POLICY SET would:
// all of them, before any is applied.
func policySets(cfg config.Config, o commands.Options) ([]commands.PolicySet, error) {
	out := make([]commands.PolicySet, 0, len(cfg.Policies))
	for i, p := range cfg.Policies {
		r, err := commands.ParsePolicySet(append([]string{"RL.POLICY", "SET"}, p.Args()...), o)
		if err != nil {
			return nil, fmt.Errorf("config: policies[%d] (%s): %v", i, p.Pattern, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// applyPolicies applies the config file's policies (RL.POLICY SET each: an
// unchanged one is a no-op; one no longer in the file is left alone), then
// reads every policy in the backends, so the proxy follows them all.
func (p *Proxy) applyPolicies(ctx context.Context, sets []commands.PolicySet) error {
	for _, r := range sets {
		if _, err := p.limiters.PolicySet(ctx, r.Name, r.Config, r.SetRateOptions); err != nil {
			return fmt.Errorf("config: policies (%s): %v", r.Name, err)
		}
	}
	return p.limiters.RefreshPolicies(ctx)
}

// policyRoom checks, before anything is written, that the file's
// policies fit in max_policies together with those in the backends
// already (made by RL.POLICY SET or an earlier file).
func (p *Proxy) policyRoom(ctx context.Context, sets []commands.PolicySet, max int) error {
	have, err := p.limiters.PolicyList(ctx)
	if err != nil {
		return fmt.Errorf("config: policies: cannot count the policies in the backends, nothing written: %v", err)
	}
	added := map[string]bool{}
	for _, r := range sets {
		if _, found := slices.BinarySearch(have, r.Name); !found {
			added[r.Name] = true
		}
	}
	if n := len(have) + len(added); n > max {
		return fmt.Errorf("config: policies: %d in the backends and %d new in the file make %d, more than max_policies (%d): nothing written",
			len(have), len(added), n, max)
	}
	return nil
}

// retryPolicies applies the config file's policies (as last loaded)
// every second until it succeeds or the proxy closes: the backends were
// down at start.
func (p *Proxy) retryPolicies(log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.stopPolicies:
			return
		}
		if p.tryPolicies() == nil {
			log.Info("policies applied")
			return
		}
	}
}

// policiesLost applies the config file's policies again once the
// backend has lost the policies (OnPoliciesLost): they are the file's
// to keep in force, as at start.
func (p *Proxy) policiesLost(log *slog.Logger) {
	p.reloadMu.Lock()
	n := len(p.cfg.Policies)
	p.reloadMu.Unlock()
	if n == 0 {
		return
	}
	log.Warn("the policies are gone from the backend (restarted empty, failed over, or flushed): applying the config file's again", "policies", n)
	if err := p.tryPolicies(); err != nil {
		p.retryPolicies(log)
	}
}

func (p *Proxy) tryPolicies() error {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	sets, err := policySets(p.cfg, commandOptions(p.cfg))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.applyPolicies(ctx, sets)
}
