package rls

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlproxy/rlproxy/limiter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Options are the service's settings.
type Options struct {
	Headers       bool // add RateLimit-* and X-RateLimit-* to response_headers_to_add
	MaxNameLength int  // longest limiter name a descriptor may make (0: no bound)
}

// Service answers ShouldRateLimit with the rules in force.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	decide Decider
	rules  atomic.Pointer[Rules]
	opt    atomic.Pointer[Options]
	health *health.Server

	mu     sync.Mutex
	counts map[string]*Counts // by domain; only the rules' domains (bounded)
	other  Counts             // requests for a domain the rules lack
}

// Counts are one domain's requests by overall code.
type Counts struct{ OK, OverLimit, Errors atomic.Int64 }

// New makes a service deciding with d under rules.
func New(d Decider, rules *Rules, o Options) *Service {
	s := &Service{decide: d, counts: map[string]*Counts{}, health: health.NewServer()}
	s.SetRules(rules)
	s.SetOptions(o)
	return s
}

// SetRules puts rules in force (a reload).
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// Rules are the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load() }

// SetOptions changes the options live.
func (s *Service) SetOptions(o Options) { s.opt.Store(&o) }

// Register adds the service and the gRPC health service to g.
func (s *Service) Register(g *grpc.Server) {
	pb.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Draining makes the health service answer NOT_SERVING (a shutdown).
func (s *Service) Draining() { s.health.Shutdown() }

// Counts returns each domain's counts (the domain "" for unknown domains).
func (s *Service) Counts() map[string]*Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*Counts, len(s.counts)+1)
	for d, c := range s.counts {
		out[d] = c
	}
	out[""] = &s.other
	return out
}

func (s *Service) countsOf(domain string) *Counts {
	if !s.rules.Load().Has(domain) {
		return &s.other
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts[domain]
	if c == nil {
		c = new(Counts)
		s.counts[domain] = c
	}
	return c
}

// ShouldRateLimit decides a request's descriptors together (all or
// nothing) and answers as envoyproxy/ratelimit does.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	c := s.countsOf(req.GetDomain())
	resp, err := s.shouldRateLimit(ctx, req)
	switch {
	case err != nil:
		c.Errors.Add(1)
	case resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT:
		c.OverLimit.Add(1)
	default:
		c.OK.Add(1)
	}
	return resp, err
}

// descriptor is one descriptor's rule and, once decided, its status.
type descriptor struct {
	limit *Limit
	name  string
	hits  int64
	ask   int // index in asks, -1 when not asked
}

func (s *Service) shouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	rules, opt := s.rules.Load(), s.opt.Load()
	if rules == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	ds, err := s.limits(req, rules, opt)
	if err != nil {
		return nil, err
	}
	var asks []Ask
	for i := range ds {
		if d := &ds[i]; d.limit != nil && d.limit.limited() {
			d.ask = len(asks)
			asks = append(asks, Ask{Name: d.name, Permits: d.hits, Limit: d.limit})
		}
	}
	var results []limiter.Result
	if len(asks) > 0 {
		if results, err = s.decideAll(ctx, asks); err != nil {
			return nil, status.Errorf(codes.Unavailable, "rate limit backend: %v", err)
		}
	}
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(ds))}
	var least *pb.RateLimitResponse_DescriptorStatus // what the headers tell
	var leastLimit string                            // its rule's limitText
	now := time.Now()
	quota, quotaOver := 0, 0
	for i, d := range ds {
		st := descriptorStatus(d, results, now)
		resp.Statuses[i] = st
		if d.limit != nil && d.limit.QuotaMode {
			quota++
			if st.Code == pb.RateLimitResponse_OVER_LIMIT {
				quotaOver++
			}
		} else if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			least, leastLimit = st, d.limit.limitText
		} else if st.CurrentLimit != nil && (least == nil || (least.Code == pb.RateLimitResponse_OK && st.LimitRemaining < least.LimitRemaining)) {
			least, leastLimit = st, d.limit.limitText
		}
	}
	if quota > 0 && quota == quotaOver {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if opt.Headers && least != nil {
		resp.ResponseHeadersToAdd = headers(least, leastLimit)
	}
	return resp, nil
}

// decideAll decides asks together. Quota descriptors (quota_mode) over
// their limit fail the request only when every quota descriptor is over:
// when only some are, the rest are decided again without them.
func (s *Service) decideAll(ctx context.Context, asks []Ask) ([]limiter.Result, error) {
	res, err := s.decide.Decide(ctx, asks)
	if err != nil {
		return nil, err
	}
	quota, quotaOver, over := 0, 0, false
	for i, a := range asks {
		switch {
		case a.Limit.QuotaMode && !res[i].Granted:
			quota++
			quotaOver++
		case a.Limit.QuotaMode:
			quota++
		case !res[i].Granted:
			over = true
		}
	}
	if over || quotaOver == 0 || quotaOver == quota {
		return res, nil
	}
	var keep []Ask
	var at []int
	for i, a := range asks {
		if !a.Limit.QuotaMode || res[i].Granted {
			keep, at = append(keep, a), append(at, i)
		}
	}
	again, err := s.decide.Decide(ctx, keep)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		res[i] = again[j]
	}
	return res, nil
}

// limits finds each descriptor's rule and permits, then drops the rules
// another one replaces, as envoyproxy/ratelimit does.
func (s *Service) limits(req *pb.RateLimitRequest, rules *Rules, opt *Options) ([]descriptor, error) {
	ds := make([]descriptor, len(req.GetDescriptors()))
	var replaced map[string]bool // made only when a rule replaces another
	for i, pd := range req.GetDescriptors() {
		d := &ds[i]
		d.ask = -1
		d.hits = max(1, int64(req.GetHitsAddend()))
		if h := pd.GetHitsAddend(); h != nil {
			d.hits = int64(h.GetValue()) // 0 is allowed: look, take nothing
		}
		if o := pd.GetLimit(); o != nil {
			// A limit sent by Envoy (its descriptor's limit override).
			unit := pb.RateLimitResponse_RateLimit_Unit(o.GetUnit()) // the same numbers
			if unitLength[unit] == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override has no unit", i)
			}
			d.limit = &Limit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, Algo: limiter.FixedWindow}
			d.limit.setCurrent()
			d.name = Name(req.GetDomain(), pd.GetEntries())
		} else {
			d.limit, d.name = rules.Match(req.GetDomain(), pd.GetEntries())
		}
		if d.limit == nil {
			continue
		}
		if opt.MaxNameLength > 0 && len(d.name) > opt.MaxNameLength {
			return nil, status.Errorf(codes.InvalidArgument, "limiter name is longer than %d bytes: descriptor %d", opt.MaxNameLength, i)
		}
		for _, r := range d.limit.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
	}
	for i := range ds {
		if l := ds[i].limit; l != nil && l.Name != "" && replaced[l.Name] {
			ds[i].limit = nil
		}
	}
	return ds, nil
}

// descriptorStatus is one descriptor's reply.
func descriptorStatus(d descriptor, results []limiter.Result, now time.Time) *pb.RateLimitResponse_DescriptorStatus {
	l := d.limit
	switch {
	case l == nil:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	case l.Unlimited:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: l.current,
		DurationUntilReset: durationpb.New(untilReset(l, now))}
	if d.ask < 0 {
		return st // 0 requests per unit: always over
	}
	r := results[d.ask]
	if r.Granted {
		st.Code = pb.RateLimitResponse_OK
		st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
	}
	if l.Algo != limiter.FixedWindow && r.ResetAfterMs > 0 {
		st.DurationUntilReset = durationpb.New(time.Duration(r.ResetAfterMs) * time.Millisecond)
	}
	return st
}

// untilReset is the time to the end of the window now is in, for a
// fixed window (windows aligned to the Unix epoch, a month to the 1st at
// 00:00 UTC, as the backend's are); whole seconds, as envoyproxy/ratelimit
// answers.
func untilReset(l *Limit, now time.Time) time.Duration {
	if unitLength[l.Unit] == limiter.Month {
		return time.Duration(limiter.NextMonth(now).Unix()-now.Unix()) * time.Second
	}
	unit := int64(unitLength[l.Unit] / time.Second)
	return time.Duration(unit-now.Unix()%unit) * time.Second
}

// headers are the RateLimit-* headers of the status that limits most
// (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED), in both
// spellings; limit is its rule's limitText. Every request that has a limit
// gets them, so they take few allocations: one array for the six.
func headers(st *pb.RateLimitResponse_DescriptorStatus, limit string) []*core.HeaderValue {
	remaining := strconv.FormatUint(uint64(st.LimitRemaining), 10)
	reset := strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)
	hv := new([6]core.HeaderValue)
	out := make([]*core.HeaderValue, len(hv))
	for i, kv := range [6][2]string{
		{"RateLimit-Limit", limit}, {"RateLimit-Remaining", remaining}, {"RateLimit-Reset", reset},
		{"X-RateLimit-Limit", limit}, {"X-RateLimit-Remaining", remaining}, {"X-RateLimit-Reset", reset},
	} {
		hv[i].Key, hv[i].Value = kv[0], kv[1]
		out[i] = &hv[i]
	}
	return out
}

// String describes the rules for a log line.
func (r *Rules) String() string {
	return fmt.Sprintf("%d domains, %d rate limits", len(r.domains), len(r.limits))
}
