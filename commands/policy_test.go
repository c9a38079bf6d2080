package commands

import (
	"strings"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
)

var policySeeds = []string{
	"user:* 100 1m",
	"* 1 1s",
	"tenant:acme:* 10 1s LIMIT 1000 1d ALGO sliding-window SHARDS 2",
	"user:* 5 10s ALGO concurrency",
	"user:* 5 10s ALGO concurrency SHADOW",
	"user:* 10 1s MODE PER_CLIENT NX",
	"user:* 10 1s KEEPSTATE SHADOW",
	"user:* 10 1s TTL 1h",
	"user:* 10 1s TTL",
	"user:* 10 1s NX KEEPSTATE",
	"user 10 1s",
	"user:** 10 1s",
	"*user:* 10 1s",
	"u*r:* 10 1s",
	" 10 1s",
	"user:* 0 1s",
	"user:* 10 1s SHARDS AUTO",
	"user:* 10 1s BURST 20 ALGO leaky-bucket",
	"user:* 10 1s FOO",
}

// FuzzParsePolicy: RL.POLICY SET's parser answers every input with a
// clean error or a policy the backend can store (a pattern of the right
// shape, RL.SETRATE's checks, no TTL).
func FuzzParsePolicy(f *testing.F) {
	for _, s := range policySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"RL.POLICY", "SET"}, strings.Split(line, " ")...)
		for _, o := range []Options{opts, {DefaultShards: 3, ShardRate: 1, MaxAutoShards: 1024, MaxShards: 16}} {
			r, err := ParsePolicySet(args, o)
			if err != nil {
				checkErrText(t, err)
				continue
			}
			p := r.Name
			if !strings.HasSuffix(p, "*") || strings.Count(p, "*") != 1 {
				t.Fatalf("%q: pattern %q accepted", args, p)
			}
			if r.Config.TTL != 0 {
				t.Fatalf("%q: a policy with a TTL", args)
			}
			checkSetRate(t, args[1:], o, r)
		}
	})
}

func TestParsePolicyErrors(t *testing.T) {
	for line, want := range map[string]string{
		"user 10 1s":            "policy pattern must be a prefix followed by '*' (like user:*)",
		"a*b* 10 1s":            "policy pattern must be a prefix followed by '*' (like user:*)",
		"user:* 10 1s TTL 1h":   "TTL does not apply to a policy: a name's state is kept only until it is full again",
		"user:* 10 1s TTL":      "TTL does not apply to a policy: a name's state is kept only until it is full again",
		"user:* 10":             "wrong number of arguments for 'rl.policy|set' command",
		"user:* 10 1s ALGO gcr": "",
	} {
		_, err := ParsePolicySet(append([]string{"RL.POLICY", "SET"}, strings.Split(line, " ")...), opts)
		if err == nil || (want != "" && err.Error() != want) {
			t.Errorf("RL.POLICY SET %s: %v, want %q", line, err, want)
		}
	}
	r, err := ParsePolicySet(strings.Split("RL.POLICY SET user:* 5 10s ALGO concurrency", " "), opts)
	if err != nil || r.Config.Algo != limiter.Concurrency || r.Name != "user:*" {
		t.Errorf("ALGO concurrency policy: %+v %v", r, err)
	}
}

// RL.POLICY is documented like the other commands: every subcommand.
func TestPolicyCommandDocumented(t *testing.T) {
	tab := NewTable(Policies(nil, opts))
	c := tab.Lookup("rl.policy")
	if c == nil || c.Summary == "" {
		t.Fatal("no RL.POLICY")
	}
	for _, name := range []string{"SET", "GET", "DEL", "LIST", "MATCH", "HELP"} {
		s := c.SubCommand(name)
		if s == nil || s.Handler == nil || s.Summary == "" {
			t.Errorf("RL.POLICY %s: missing or incomplete", name)
			continue
		}
		checkArgs(t, "RL.POLICY "+name, s.Args)
	}
}
