package commands

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// Options are the server-wide settings commands depend on.
type Options struct {
	DefaultShards int   // SHARDS when not given
	ShardRate     int64 // permits/s per sub-limiter for SHARDS AUTO
	MaxAutoShards int   // cap for SHARDS AUTO
	// MaxShards is the largest SHARDS accepted (limiter.MaxShards when 0).
	MaxShards int
}

// maxTTL bounds the TTL option (about ten years).
const maxTTL = 3650 * 24 * time.Hour

// SetRate is a parsed RL.SETRATE.
type SetRate struct {
	Name   string
	Config limiter.Config
	ratelimit.SetRateOptions
}

// ParseSetRate parses RL.SETRATE key rate interval [LIMIT rate interval]...
// [ALGO name] [BURST n] [SHARDS n|AUTO] [MODE OVERALL|PER_CLIENT]
// [TTL duration] [NX|KEEPSTATE].
// args[0] is the command name.
func ParseSetRate(args []string, o Options) (SetRate, error) {
	return parseSetRate(args, o, false)
}

// errPolicyTTL refuses TTL in RL.POLICY SET.
var errPolicyTTL = errors.New("TTL does not apply to a policy: a name's state is kept only until it is full again")

// parseSetRate parses RL.SETRATE's arguments, or (policy) RL.POLICY SET's
// after the subcommand: the same but for TTL, which a policy refuses.
func parseSetRate(args []string, o Options, policy bool) (SetRate, error) {
	if len(args) < 4 {
		return SetRate{}, ArityError(args[0])
	}
	r := SetRate{Name: args[1], Config: limiter.Config{Algo: limiter.TokenBucket, Mode: limiter.Overall}}
	var err error
	if r.Config.Rate, err = parseCount("rate", args[2], limiter.MaxRate); err != nil {
		return SetRate{}, err
	}
	if r.Config.Interval, err = ParseDuration("interval", args[3], limiter.MaxInterval); err != nil {
		return SetRate{}, err
	}
	var burst int64
	auto, shards, shardsGiven := false, int64(0), false
	var seen [len(setRateOptions)]bool
	limits := 0
	for i := 4; i < len(args); i++ {
		if upperIs(args[i], "LIMIT") {
			if limits == len(r.Config.Limits) {
				return SetRate{}, fmt.Errorf("syntax error: at most %d limits (LIMIT given %d times)", limiter.MaxLimits, limits+1)
			}
			if i+2 >= len(args) {
				return SetRate{}, fmt.Errorf("syntax error: option LIMIT needs a rate and an interval")
			}
			l := &r.Config.Limits[limits]
			if l.Rate, err = parseCount("LIMIT rate", args[i+1], limiter.MaxRate); err != nil {
				return SetRate{}, err
			}
			if l.Interval, err = ParseDuration("LIMIT interval", args[i+2], limiter.MaxInterval); err != nil {
				return SetRate{}, err
			}
			limits++
			i += 2
			continue
		}
		k := optionIndex(args[i])
		if k < 0 {
			return SetRate{}, fmt.Errorf("syntax error: unknown option %s (expected LIMIT, ALGO, BURST, SHARDS, MODE, TTL, NX, KEEPSTATE or SHADOW)", quote(args[i]))
		}
		opt := setRateOptions[k]
		if seen[k] {
			return SetRate{}, fmt.Errorf("syntax error: option %s given twice", opt)
		}
		seen[k] = true
		if policy && opt == "TTL" {
			return SetRate{}, errPolicyTTL
		}
		switch opt {
		case "NX":
			r.NX = true
			continue
		case "KEEPSTATE":
			r.KeepState = true
			continue
		case "SHADOW":
			r.Config.Shadow = true
			continue
		}
		if i+1 >= len(args) {
			return SetRate{}, fmt.Errorf("syntax error: option %s needs a value", opt)
		}
		i++
		v := args[i]
		switch opt {
		case "ALGO":
			if r.Config.Algo, err = parseAlgo(v); err != nil {
				return SetRate{}, err
			}
		case "BURST":
			if burst, err = parseCount("BURST", v, limiter.MaxRate); err != nil {
				return SetRate{}, err
			}
		case "SHARDS":
			shardsGiven = true
			if strings.EqualFold(v, "AUTO") {
				auto = true
			} else if shards, err = parseCount("SHARDS", v, int64(o.maxShards())); err != nil {
				return SetRate{}, err
			}
		case "MODE":
			switch {
			case upperIs(v, string(limiter.Overall)):
				r.Config.Mode = limiter.Overall
			case upperIs(v, string(limiter.PerClient)):
				r.Config.Mode = limiter.PerClient
			default:
				return SetRate{}, fmt.Errorf("MODE must be OVERALL or PER_CLIENT, got %s", quote(v))
			}
		case "TTL":
			if r.Config.TTL, err = ParseDuration("TTL", v, maxTTL); err != nil {
				return SetRate{}, err
			}
		}
	}
	if r.NX && r.KeepState {
		return SetRate{}, fmt.Errorf("syntax error: NX and KEEPSTATE cannot be combined")
	}
	c := &r.Config
	c.Burst = c.Rate
	if burst > 0 {
		if !c.Algo.HasBurst() {
			return SetRate{}, fmt.Errorf("BURST applies to token-bucket and leaky-bucket only, not %s", c.Algo)
		}
		c.Burst = burst
	}
	smallest := min(c.Rate, c.Burst)
	for _, l := range c.Limits.List() {
		smallest = min(smallest, l.Rate)
	}
	switch {
	case auto:
		shards = min(o.autoShards(c.Rate, c.Interval), smallest)
	case !shardsGiven:
		// The configured default, within what this limiter can be split into.
		shards = max(1, min(int64(o.DefaultShards), int64(o.maxShards()), smallest))
	}
	c.Shards = int(shards)
	if int64(c.Shards) > smallest {
		return SetRate{}, fmt.Errorf("SHARDS %d is more than the limiter's %d permits: every sub-limiter needs at least one", c.Shards, smallest)
	}
	if err := c.Check(); err != nil {
		return SetRate{}, err
	}
	return r, nil
}

// setRateOptions are RL.SETRATE's options after rate and interval, in
// any case; NX, KEEPSTATE and SHADOW take no value.
var setRateOptions = [...]string{"ALGO", "BURST", "SHARDS", "MODE", "TTL", "NX", "KEEPSTATE", "SHADOW"}

// optionIndex finds opt in setRateOptions, or returns -1.
func optionIndex(opt string) int {
	for k, name := range setRateOptions {
		if upperIs(opt, name) {
			return k
		}
	}
	return -1
}

func (o Options) maxShards() int {
	if o.MaxShards > 0 {
		return o.MaxShards
	}
	return limiter.MaxShards
}

// autoShards derives SHARDS AUTO: one sub-limiter per ShardRate permits
// per second, between 1 and MaxAutoShards.
func (o Options) autoShards(rate int64, interval time.Duration) int64 {
	perSecond := float64(rate) / interval.Seconds()
	n := int64(1)
	if o.ShardRate > 0 {
		n = int64(math.Ceil(perSecond / float64(o.ShardRate)))
	}
	return max(1, min(n, int64(o.MaxAutoShards), int64(o.maxShards()), rate))
}

func parseAlgo(s string) (limiter.Algo, error) {
	for _, a := range limiter.Algos {
		if strings.EqualFold(s, string(a)) {
			return a, nil
		}
	}
	names := make([]string, len(limiter.Algos))
	for i, a := range limiter.Algos {
		names[i] = string(a)
	}
	return "", fmt.Errorf("unknown algorithm %s (expected one of %s)", quote(s), strings.Join(names, ", "))
}

// Acquire is a parsed RL.ACQUIRE.
type Acquire struct {
	Name    string
	Permits int64
	// Also are the names after ALSO, decided with Name all or nothing
	// (nil without ALSO).
	Also    []ratelimit.NameAsk
	Timeout time.Duration // 0: decide now
	Block   bool          // wait until granted
}

// ParseAcquire parses RL.ACQUIRE key [permits] [ALSO key [permits]]...
// [TIMEOUT duration | BLOCK].
func ParseAcquire(args []string) (Acquire, error) {
	if len(args) < 2 {
		return Acquire{}, ArityError(args[0])
	}
	rest := args[2:]
	also := 0 // where the first ALSO is: after the key or after permits
	if len(rest) > 1 && isWord(rest[1], "ALSO") && !isWord(rest[0], "ALSO") && acquireSyntax.option(rest[0]) < 0 {
		also = 1
	}
	if len(rest) == 0 || !isWord(rest[also], "ALSO") {
		w, err := parseWaitArgs(rest, acquireSyntax)
		if err != nil {
			return Acquire{}, err
		}
		return Acquire{Name: args[1], Permits: w.permits, Timeout: w.timeout, Block: w.block}, nil
	}
	a := Acquire{Name: args[1], Permits: 1}
	var err error
	if also == 1 {
		if a.Permits, err = parseCount("permits", rest[0], limiter.MaxRate); err != nil {
			return Acquire{}, err
		}
	}
	rest = rest[also:]
	for len(rest) > 0 && isWord(rest[0], "ALSO") {
		if len(rest) < 2 {
			return Acquire{}, fmt.Errorf("syntax error: ALSO needs a key")
		}
		n := ratelimit.NameAsk{Name: rest[1], Permits: 1}
		rest = rest[2:]
		if len(rest) > 0 && !isWord(rest[0], "ALSO") && acquireSyntax.option(rest[0]) < 0 {
			if n.Permits, err = parseCount("permits", rest[0], limiter.MaxRate); err != nil {
				return Acquire{}, err
			}
			rest = rest[1:]
		}
		a.Also = append(a.Also, n)
		if len(a.Also) >= ratelimit.MaxNames {
			return Acquire{}, ratelimit.TooManyNamesError{}
		}
	}
	if len(rest) > 0 && acquireSyntax.option(rest[0]) < 0 {
		return Acquire{}, fmt.Errorf("syntax error near %s (expected %s)", quote(rest[0]), acquireSyntax.expected)
	}
	w, err := parseWaitArgs(rest, acquireSyntax)
	if err != nil {
		return Acquire{}, err
	}
	a.Timeout, a.Block = w.timeout, w.block
	if err := ratelimit.CheckNames(a.names()); err != nil {
		return Acquire{}, err
	}
	return a, nil
}

// names are every name of a with its permits, the key's first.
func (a Acquire) names() []ratelimit.NameAsk {
	return append([]ratelimit.NameAsk{{Name: a.Name, Permits: a.Permits}}, a.Also...)
}

// AlsoKeys returns the names after ALSO in an RL.ACQUIRE's words (nil
// when there are none, or the words do not parse: the handler answers
// the error), so that each is checked as the key is.
func AlsoKeys(args []string) []string {
	if len(args) < 4 || !slices.ContainsFunc(args[2:4], func(w string) bool { return isWord(w, "ALSO") }) {
		return nil
	}
	a, err := ParseAcquire(args)
	if err != nil {
		return nil
	}
	keys := make([]string, len(a.Also))
	for i, n := range a.Also {
		keys[i] = n.Name
	}
	return keys
}

// acquireSyntax: RL.ACQUIRE takes no TTL.
var acquireSyntax = waitSyntax{expected: "[permits] [ALSO key [permits]]... [TIMEOUT duration | BLOCK]"}
