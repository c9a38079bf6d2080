package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/keyslot"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsRules are the rate limits the RLS tests serve. Windows are a day
// long (aligned to 00:00 UTC), so a test never straddles two.
const rlsRules = `
domain: bench
descriptors:
  - key: user              # each user its own limit
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: tenant
    value: acme
    rate_limit: {unit: day, requests_per_unit: 5}
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: path
    value: /admin*
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: tight
    rate_limit: {unit: day, requests_per_unit: 1, name: tight}
  - key: wide
    rate_limit: {unit: day, requests_per_unit: 100, replaces: [{name: tight}]}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: never
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: org               # under a key without a value: a limiter per name, made on first use
    descriptors:
      - key: team
        value: red
        rate_limit: {unit: day, requests_per_unit: 2}
`

// startRLS starts a proxy serving rules (written to a file) on rls_listen.
func startRLSProxy(t *testing.T, srv *redistest.Server, rules string, tweaks ...func(*config.Config)) (*harness, pb.RateLimitServiceClient) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, srv, append([]func(*config.Config){func(c *config.Config) {
		if srv != nil { // else a tweak names the backend
			c.Backends = []string{srv.URL()}
		}
		c.RLSListen, c.RLSConfig = "127.0.0.1:0", file
	}}, tweaks...)...)
	return h, rlsClient(t, h.proxy.RLSAddr())
}

func rlsClient(t *testing.T, addr string) pb.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewRateLimitServiceClient(cc)
}

// desc is a descriptor of "key=value" entries.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func should(t *testing.T, c pb.RateLimitServiceClient, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return r
}

// codes of a reply: overall, then each descriptor's, with remaining.
func verdict(r *pb.RateLimitResponse) string {
	out := r.OverallCode.String()
	for _, s := range r.Statuses {
		out += " " + s.Code.String()
		if s.CurrentLimit != nil {
			out += "/" + strconv.FormatUint(uint64(s.LimitRemaining), 10)
		}
	}
	return out
}

func TestRLSDecisions(t *testing.T) {
	_, c := startRLSProxy(t, redistest.StartServer(t), rlsRules)
	steps := []struct {
		ds   []*rlv3.RateLimitDescriptor
		want string
	}{
		{[]*rlv3.RateLimitDescriptor{desc("user=42")}, "OK OK/2"},
		{[]*rlv3.RateLimitDescriptor{desc("user=42")}, "OK OK/1"},
		{[]*rlv3.RateLimitDescriptor{desc("user=7")}, "OK OK/2"}, // each value its own limit
		{[]*rlv3.RateLimitDescriptor{desc("user=42")}, "OK OK/0"},
		{[]*rlv3.RateLimitDescriptor{desc("user=42")}, "OVER_LIMIT OVER_LIMIT/0"},
		// nested: tenant=acme then user; the tenant alone is its own limit
		{[]*rlv3.RateLimitDescriptor{desc("tenant=acme", "user=1"), desc("tenant=acme")}, "OK OK/1 OK/4"},
		{[]*rlv3.RateLimitDescriptor{desc("tenant=other")}, "OK OK"},                 // no rule
		{[]*rlv3.RateLimitDescriptor{desc("tenant=acme", "user=1", "x=y")}, "OK OK"}, // longer than the config
		// wildcard
		{[]*rlv3.RateLimitDescriptor{desc("path=/admin/users")}, "OK OK/0"},
		{[]*rlv3.RateLimitDescriptor{desc("path=/admin/keys")}, "OK OK/0"}, // each value its own
		{[]*rlv3.RateLimitDescriptor{desc("path=/admin/users")}, "OVER_LIMIT OVER_LIMIT/0"},
		{[]*rlv3.RateLimitDescriptor{desc("path=/public")}, "OK OK"},
		// replaces: wide switches tight off when both apply
		{[]*rlv3.RateLimitDescriptor{desc("tight=a")}, "OK OK/0"},
		{[]*rlv3.RateLimitDescriptor{desc("tight=a"), desc("wide=a")}, "OK OK OK/99"},
		// shadow_mode: over, answered OK
		{[]*rlv3.RateLimitDescriptor{desc("dry=1")}, "OK OK/0"},
		{[]*rlv3.RateLimitDescriptor{desc("dry=1")}, "OK OK/0"},
		// unlimited, and 0 requests per unit
		{[]*rlv3.RateLimitDescriptor{desc("free=1")}, "OK OK"},
		{[]*rlv3.RateLimitDescriptor{desc("never=1")}, "OVER_LIMIT OVER_LIMIT/0"},
		// a limiter per name, made on first use
		{[]*rlv3.RateLimitDescriptor{desc("org=1", "team=red")}, "OK OK/1"},
		{[]*rlv3.RateLimitDescriptor{desc("org=1", "team=red")}, "OK OK/0"},
		{[]*rlv3.RateLimitDescriptor{desc("org=1", "team=red")}, "OVER_LIMIT OVER_LIMIT/0"},
		{[]*rlv3.RateLimitDescriptor{desc("org=2", "team=red")}, "OK OK/1"},
		{[]*rlv3.RateLimitDescriptor{desc("org=2", "team=blue")}, "OK OK"},
	}
	for i, s := range steps {
		if got := verdict(should(t, c, s.ds...)); got != s.want {
			t.Fatalf("step %d: got %q, want %q", i, got, s.want)
		}
	}
}

// The state is RL.*'s: RL.AVAILABLE and RL.RESET reach what ShouldRateLimit sees.
func TestRLSSameStateAsRL(t *testing.T) {
	h, c := startRLSProxy(t, redistest.StartServer(t), rlsRules)
	r := should(t, c, desc("user=42"))
	h.Do(t, "RL.AVAILABLE", "bench:user=42").Equal(int64(r.Statuses[0].LimitRemaining))
	should(t, c, desc("tenant=acme", "user=9"))
	h.Do(t, "RL.AVAILABLE", "bench:tenant=acme:user=9").Equal(int64(1))
	should(t, c, desc("org=5", "team=red"))
	h.Do(t, "RL.AVAILABLE", "bench:org=5:team=red").Equal(int64(1))
	// A limiter made on first use and deleted since is made again, with
	// another descriptor in the same request.
	h.Do(t, "RL.DEL", "bench:org=5:team=red").Equal(int64(1))
	if got := verdict(should(t, c, desc("user=7"), desc("org=5", "team=red"))); got != "OK OK/2 OK/1" {
		t.Fatalf("after RL.DEL: %q", got)
	}
	h.Do(t, "RL.RESET", "bench:user=42").Equal(int64(1))
	if got := verdict(should(t, c, desc("user=42"))); got != "OK OK/2" {
		t.Fatalf("after RL.RESET: %q", got)
	}
}

// A request's descriptors are decided together: one over the limit, and
// none of the others is counted.
func TestRLSAllOrNothing(t *testing.T) {
	h, c := startRLSProxy(t, redistest.StartServer(t), rlsRules)
	should(t, c, desc("path=/admin/x")) // its only permit
	for range 3 {
		r := should(t, c, desc("user=5"), desc("path=/admin/x"), desc("tenant=acme"))
		if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("got %s", verdict(r))
		}
	}
	h.Do(t, "RL.AVAILABLE", "bench:user=5").Equal(int64(3))
	h.Do(t, "RL.AVAILABLE", "bench:tenant=acme").Equal(int64(5))
}

// More descriptors than one RL.ACQUIRE ... ALSO takes (8) are decided in
// chunks, still all or nothing: a denial in the second chunk gives back
// what the first took; the same descriptor twice asks for the sum.
func TestRLSManyDescriptors(t *testing.T) {
	h, c := startRLSProxy(t, redistest.StartServer(t), rlsRules)
	should(t, c, desc("path=/admin/x")) // its only permit
	var ds []*rlv3.RateLimitDescriptor
	for i := range 10 {
		ds = append(ds, desc("user=m"+strconv.Itoa(i)))
	}
	r := should(t, c, append(ds, desc("path=/admin/x"))...)
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[10].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("past the limit: got %s", verdict(r))
	}
	for i := range 10 {
		h.Do(t, "RL.AVAILABLE", "bench:user=m"+strconv.Itoa(i)).Equal(int64(3))
	}
	if got := verdict(should(t, c, ds...)); got != "OK"+strings.Repeat(" OK/2", 10) {
		t.Fatalf("ten fresh users: got %q", got)
	}
	if got := verdict(should(t, c, desc("user=m0"), desc("user=m0"))); got != "OK OK/0 OK/0" {
		t.Fatalf("one user twice: got %q", got)
	}
}

// unit: month is a calendar month in UTC: the window ends on the 1st of
// next month at 00:00 UTC, as ShouldRateLimit (the proxy's clock) and
// RL.ACQUIRE on the same limiter (Redis's clock, the script's date math)
// both say.
func TestRLSCalendarMonth(t *testing.T) {
	rules := "domain: bench\ndescriptors:\n  - key: plan\n    rate_limit: {unit: month, requests_per_unit: 5}\n"
	h, c := startRLSProxy(t, redistest.StartServer(t), rules)
	before := time.Now()
	r := should(t, c, desc("plan=p"))
	g := h.Do(t, "RL.ACQUIRE", "bench:plan=p").Granted(3)
	after := time.Now()
	if verdict(r) != "OK OK/4" {
		t.Fatalf("got %s", verdict(r))
	}
	// Until the month's end, give or take the test's own duration.
	within := func(what string, d time.Duration) {
		t.Helper()
		lo, hi := limiter.NextMonth(after).Sub(after)-time.Second, limiter.NextMonth(before).Sub(before)+time.Second
		if d < lo || d > hi {
			t.Errorf("%s: %v, want %v..%v (until %s)", what, d, lo, hi, limiter.NextMonth(before))
		}
	}
	within("duration_until_reset", r.Statuses[0].DurationUntilReset.AsDuration())
	within("RL.ACQUIRE reset_after_ms", g.ResetAfter)
}

func TestRLSHeadersAndHitsAddend(t *testing.T) {
	_, c := startRLSProxy(t, redistest.StartServer(t), rlsRules, func(c *config.Config) { c.RLSResponseHeaders = true })
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", HitsAddend: 2,
		Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("user=3")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := verdict(r); got != "OK OK/3 OK/1" {
		t.Fatalf("got %q", got)
	}
	hdr := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		hdr[h.Key] = h.Value
	}
	for _, p := range []string{"RateLimit-", "X-RateLimit-"} {
		if hdr[p+"Limit"] != "3" || hdr[p+"Remaining"] != "1" || hdr[p+"Reset"] == "" || hdr[p+"Reset"] == "0" {
			t.Fatalf("headers %v", hdr)
		}
	}
	// A descriptor's own hits_addend, 0 included (look, take nothing).
	r, err = c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("user=3").Entries, HitsAddend: wrapperspb.UInt64(0)}}})
	if err != nil || verdict(r) != "OK OK/1" {
		t.Fatalf("hits_addend 0: %v %v", err, r)
	}
}

func TestRLSBadRequests(t *testing.T) {
	_, c := startRLSProxy(t, redistest.StartServer(t), rlsRules, func(c *config.Config) { c.MaxNameLength = 64 })
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, tc := range []struct {
		req  *pb.RateLimitRequest
		want string
	}{
		{&pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("user=1")}}, "rate limit domain must not be empty"},
		{&pb.RateLimitRequest{Domain: "bench"}, "rate limit descriptor list must not be empty"},
		{&pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=" + strings.Repeat("x", 100))}}, "limiter name is longer than 64 bytes"},
	} {
		_, err := c.ShouldRateLimit(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want InvalidArgument %q", err, tc.want)
		}
	}
	// An unknown domain has no limits.
	r, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "nope", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=1")}})
	if err != nil || verdict(r) != "OK OK" {
		t.Fatalf("unknown domain: %v %v", err, r)
	}
}

func TestRLSHealthInfoMetrics(t *testing.T) {
	h, c := startRLSProxy(t, redistest.StartServer(t), rlsRules)
	cc, err := grpc.NewClient(h.proxy.RLSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	hr, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}
	should(t, c, desc("never=1"))
	should(t, c, desc("free=1"))
	info := h.Do(t, "INFO", "rls").String()
	for _, want := range []string{"# RLS", "rls_requests_ok:1", "rls_requests_over_limit:1", "rls_domains:1", "rls_rate_limits:10"} {
		if !strings.Contains(info, want) {
			t.Fatalf("INFO rls lacks %q:\n%s", want, info)
		}
	}
}

// A SIGHUP reload re-reads the rules; a bad file is refused with its
// line and the running rules stay.
func TestRLSReload(t *testing.T) {
	h, c := startRLSProxy(t, redistest.StartServer(t), rlsRules)
	bad := "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
	if err := os.WriteFile(h.cfg.RLSConfig, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := h.proxy.Reload(h.cfg)
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:4: invalid rate limit unit 'fortnight'") {
		t.Fatalf("bad file: %v", err)
	}
	if got := verdict(should(t, c, desc("user=1"))); got != "OK OK/2" {
		t.Fatalf("running rules after a refused reload: %q", got)
	}
	good := "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 10}\n"
	if err := os.WriteFile(h.cfg.RLSConfig, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.proxy.Reload(h.cfg); err != nil {
		t.Fatal(err)
	}
	// The permit already taken is kept (KEEPSTATE): 10 - 2.
	if got := verdict(should(t, c, desc("user=1"))); got != "OK OK/8" {
		t.Fatalf("after the reload: %q", got)
	}
}

// Four proxies on one Redis, many callers each: no descriptor is ever
// granted past its limit, and a denied request keeps nothing.
func TestRLSNoOverAdmissionFourProxies(t *testing.T) {
	srv := redistest.StartServer(t)
	rlsNoOverAdmission(t, "u0", "u1", func(c *config.Config) { c.Backends = []string{srv.URL()} })
}

// The same on a Redis Cluster of 3 masters, the three limiters of a
// request on three masters: a request's names are decided per slot,
// granted ones given back when a later slot denies.
func TestRLSNoOverAdmissionCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	slot := func(name string) int { return keyslot.Of("{" + name + ":0}") }
	master := func(name string) string {
		a, err := cluster.SlotMaster(context.Background(), 0, slot(name))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Two users whose limiters live on masters other than all=x's and each other's.
	seen := map[string]bool{master("bench:all=x"): true}
	var users []string
	for i := 0; len(users) < 2 && i < 1000; i++ {
		if m := master("bench:user=u" + strconv.Itoa(i)); !seen[m] {
			seen[m] = true
			users = append(users, "u"+strconv.Itoa(i))
		}
	}
	if len(users) < 2 {
		t.Fatalf("no users on other masters: %v", seen)
	}
	rlsNoOverAdmission(t, users[0], users[1], func(c *config.Config) { c.Cluster = cluster.URLs() })
}

// rlsNoOverAdmission runs 40 callers through 4 proxies on the backend
// the tweak sets: 400 requests of user u0 or u1 (50 a day each) and
// all=x (70 a day over both).
func rlsNoOverAdmission(t *testing.T, u0, u1 string, backend func(*config.Config)) {
	const rules = "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 50}\n  - key: all\n    value: x\n    rate_limit: {unit: day, requests_per_unit: 70}\n"
	hs, clients := fourRLSProxies(t, rules, backend)
	users := []string{u0, u1}
	g := rlsRace(t, clients, 10, func(i int) []*rlv3.RateLimitDescriptor {
		return []*rlv3.RateLimitDescriptor{desc("user=" + users[i%2]), desc("all=x")}
	})
	used := func(name string) int64 {
		limit := int64(50)
		if name == "bench:all=x" {
			limit = 70
		}
		return limit - hs[0].Do(t, "RL.AVAILABLE", name).Int()
	}
	t.Logf("granted %d of 400 (limit 70)", g)
	if g > 70 {
		t.Fatalf("over-admission: %d granted, limit 70", g)
	}
	if all, us := used("bench:all=x"), used("bench:user="+u0)+used("bench:user="+u1); all != g || us != g {
		t.Fatalf("granted %d but all=x used %d and the users %d: a denied request kept permits", g, all, us)
	}
}

// fourRLSProxies starts 4 proxies serving rules on the backend the tweak sets.
func fourRLSProxies(t *testing.T, rules string, backend func(*config.Config)) ([]*harness, []pb.RateLimitServiceClient) {
	var hs []*harness
	var clients []pb.RateLimitServiceClient
	for range 4 {
		// A slow shared machine must not open the breaker: these tests are about races.
		h, c := startRLSProxy(t, nil, rules, backend, func(c *config.Config) { c.BackendTimeout = 10 * time.Second })
		hs, clients = append(hs, h), append(clients, c)
	}
	return hs, clients
}

// rlsRace runs 40 callers over clients, each sending n requests of the
// descriptors ds gives caller i, and returns how many were granted.
func rlsRace(t *testing.T, clients []pb.RateLimitServiceClient, n int, ds func(i int) []*rlv3.RateLimitDescriptor) int64 {
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if should(t, clients[i%len(clients)], ds(i)...).OverallCode == pb.RateLimitResponse_OK {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return granted.Load()
}

// A request of one descriptor (most are) takes RL.ACQUIRE's own path:
// 40 callers through 4 proxies never over-admit it, and the limiter's
// use equals the grants; once it is exhausted, a proxy answers it from
// the deny cache without asking Redis again.
func TestRLSLoneDescriptor(t *testing.T) {
	srv := redistest.StartServer(t)
	const rules = "domain: bench\ndescriptors:\n  - key: all\n    value: x\n    rate_limit: {unit: day, requests_per_unit: 70}\n"
	hs, clients := fourRLSProxies(t, rules, func(c *config.Config) { c.Backends = []string{srv.URL()} })
	g := rlsRace(t, clients, 5, func(int) []*rlv3.RateLimitDescriptor { return []*rlv3.RateLimitDescriptor{desc("all=x")} })
	if used := 70 - hs[0].Do(t, "RL.AVAILABLE", "bench:all=x").Int(); g > 70 || used != g {
		t.Fatalf("granted %d of 200 (limit 70), the limiter used %d", g, used)
	}
	fromCache := func() int {
		n, _ := strconv.Atoi(infoField(t, hs[0], "Limiters", "denied_from_cache"))
		return n
	}
	before := fromCache()
	for range 5 {
		if r := should(t, clients[0], desc("all=x")); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("exhausted, got %s", verdict(r))
		}
	}
	// The first denial may come from Redis (another proxy's denials are
	// not known here); the rest are remembered.
	if after := fromCache(); after-before < 4 {
		t.Fatalf("denied_from_cache %d -> %d: the deny cache did not answer", before, after)
	}
}

// With tls_listen set, the service is TLS with the same certificates,
// client certificates required when tls_client_ca_file is set.
func TestRLSTLS(t *testing.T) {
	ca := redistest.MakeCA(t, t.TempDir())
	h, _ := startRLSProxy(t, redistest.StartServer(t), rlsRules, func(c *config.Config) {
		c.TLSListen, c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = "127.0.0.1:0", ca.ServerCert, ca.ServerKey, ca.CA
	})
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CA)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CA: %v", err)
	}
	call := func(cfg *tls.Config) error {
		cc, err := grpc.NewClient(h.proxy.RLSAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=1")}})
		return err
	}
	if err := call(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}); err == nil {
		t.Fatal("a client without a certificate was answered")
	}
	cert, err := tls.LoadX509KeyPair(ca.ClientCert, ca.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := call(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}}); err != nil {
		t.Fatalf("a client with a certificate: %v", err)
	}
	cc, err := grpc.NewClient(h.proxy.RLSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=1")}}); err == nil {
		t.Fatal("a plaintext client was answered")
	}
}

// A rule removed from rls_config (then a reload) decides nothing more,
// and its limiters are deleted from the backend: the explicit limiter
// and the policy of the rules before, and the limiters made per name.
// An explicit limiter left behind would outrank the new rules' policy
// for its name (path=/a below).
func TestRLSRemovedRuleDeleted(t *testing.T) {
	srv := redistest.StartServer(t)
	h, c := startRLSProxy(t, srv, `
domain: bench
descriptors:
  - key: tenant            # an explicit limiter
    value: acme
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: user              # a policy
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: org               # a limiter per name, made on first use
    descriptors:
      - key: team
        value: red
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: path              # an explicit limiter, then a policy's name
    value: /a
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: keep
    rate_limit: {unit: day, requests_per_unit: 4}
  - key: grp               # per name; its limit changes
    descriptors:
      - key: sub
        value: x
        rate_limit: {unit: day, requests_per_unit: 2}
`)
	if got := verdict(should(t, c, desc("tenant=acme"), desc("user=42"), desc("org=5", "team=red"), desc("path=/a"), desc("keep=1"), desc("grp=1", "sub=x"))); got != "OK OK/4 OK/2 OK/1 OK/0 OK/3 OK/1" {
		t.Fatalf("before: %q", got)
	}
	removed := []string{"bench:tenant=acme", "bench:user=42", "bench:org=5:team=red"}
	for _, name := range removed {
		h.Do(t, "RL.AVAILABLE", name).Int()
	}
	next := "domain: bench\ndescriptors:\n  - key: path\n    rate_limit: {unit: day, requests_per_unit: 10}\n  - key: keep\n    rate_limit: {unit: day, requests_per_unit: 4}\n" +
		"  - key: grp\n    descriptors:\n      - key: sub\n        value: x\n        rate_limit: {unit: day, requests_per_unit: 5}\n"
	if err := os.WriteFile(h.cfg.RLSConfig, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.proxy.Reload(h.cfg); err != nil {
		t.Fatal(err)
	}
	// No limit for the removed rules; path=/a under the new policy; the
	// state of the rules kept is kept, grp's under its new limit.
	if got := verdict(should(t, c, desc("tenant=acme"), desc("user=42"), desc("org=5", "team=red"), desc("path=/a"), desc("keep=1"), desc("grp=1", "sub=x"))); got != "OK OK OK OK OK/9 OK/2 OK/3" {
		t.Fatalf("after the reload: %q", got)
	}
	for _, name := range removed {
		h.Do(t, "RL.AVAILABLE", name).ErrContains("no such limiter")
	}
	// Nothing of them is left in Redis without a TTL.
	rc := srv.Client(t)
	var policies []string
	keys, err := rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		ttl, err := rc.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, gone := range []string{"tenant=acme", "user", "org=5"} {
			if strings.Contains(k, gone) && ttl < 0 {
				t.Errorf("key %s of a removed rule lingers without a TTL", k)
			}
		}
		if strings.HasSuffix(k, "{policies}:p") { // the policies (their names' states are beside, with TTLs)
			policies, _ = rc.HKeys(context.Background(), k).Result()
		}
	}
	if !slices.Contains(policies, "bench:path=*") || slices.ContainsFunc(policies, func(s string) bool { return strings.Contains(s, "user") }) {
		t.Errorf("policies after the reload: %v; want bench:path=* and no bench:user=*", policies)
	}
}
