package commands

import (
	"errors"
	"fmt"
	"math"
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
	Timeout time.Duration // 0: decide now
	Block   bool          // wait until granted
}

// ParseAcquire parses RL.ACQUIRE key [permits] [TIMEOUT duration | BLOCK].
func ParseAcquire(args []string) (Acquire, error) {
	if len(args) < 2 {
		return Acquire{}, ArityError(args[0])
	}
	w, err := parseWaitArgs(args[2:], acquireSyntax)
	if err != nil {
		return Acquire{}, err
	}
	return Acquire{Name: args[1], Permits: w.permits, Timeout: w.timeout, Block: w.block}, nil
}

// acquireSyntax: RL.ACQUIRE takes no TTL.
var acquireSyntax = waitSyntax{expected: "[permits] [TIMEOUT duration | BLOCK]"}
