// Package limiter holds the rate-limiting algorithms: one Lua script per
// algorithm (embedded from lua/), the config of a limiter, the names of the
// keys a script touches, and the decoding of script replies.
//
// Every script runs on one Redis node against one sub-limiter and takes its
// time from that node's clock. An acquire call carries the permits of many
// coalesced requests and decides each of them in order, so one script call
// can serve a whole batch of clients exactly.
package limiter

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Algo names a rate-limiting algorithm as users type it.
type Algo string

// The algorithms of the command contract.
const (
	TokenBucket   Algo = "token-bucket"
	SlidingLog    Algo = "sliding-log"
	SlidingWindow Algo = "sliding-window"
	FixedWindow   Algo = "fixed-window"
	LeakyBucket   Algo = "leaky-bucket"
)

// Algos lists every algorithm name in the contract, in documentation order.
var Algos = []Algo{TokenBucket, SlidingLog, SlidingWindow, FixedWindow, LeakyBucket, Concurrency}

// Mode says who shares a limiter's budget.
type Mode string

const (
	// Overall: one budget shared by every caller.
	Overall Mode = "OVERALL"
	// PerClient: one budget per client connection name.
	PerClient Mode = "PER_CLIENT"
)

// Limits on what a limiter may be configured with. They keep every value
// exact in the float64 arithmetic of Lua.
const (
	MaxRate     = 1_000_000_000
	MaxInterval = 366 * 24 * time.Hour
	MaxShards   = 1024
)

// Config is the user-visible configuration of a limiter.
type Config struct {
	Algo     Algo
	Rate     int64         // permits per Interval
	Interval time.Duration // whole milliseconds
	Burst    int64         // bucket capacity (token/leaky bucket); equals Rate otherwise
	Shards   int           // number of sub-limiters
	Mode     Mode
	TTL      time.Duration // delete after this long unused; 0 = never
	// Shadow: a dry run (RL.SETRATE ... SHADOW). The limiter decides and
	// keeps state as usual, but callers grant every request (see
	// Result.Shadowed).
	Shadow bool
	// Limits are the limits after the first (Rate per Interval), all
	// decided together: a request is granted only when every one has room
	// (RL.SETRATE ... LIMIT rate interval). Entries with Rate 0 are unused;
	// the used ones come first. Not for leaky-bucket.
	Limits Limits
}

// MaxLimits is the most limits one limiter may have (the first included).
const MaxLimits = 8

// Limit is one limit of a multi-limit limiter: Rate permits per Interval.
type Limit struct {
	Rate     int64
	Interval time.Duration // whole milliseconds
}

// Limits are a limiter's limits after the first, in an array so that a
// Config stays comparable with ==.
type Limits [MaxLimits - 1]Limit

// List returns the used limits, in order.
func (l Limits) List() []Limit {
	n := 0
	for n < len(l) && l[n].Rate > 0 {
		n++
	}
	return l[:n:n]
}

// LimitList returns every limit of c, the first (Rate per Interval) included.
func (c Config) LimitList() []Limit {
	return append([]Limit{{c.Rate, c.Interval}}, c.Limits.List()...)
}

// StringState reports whether an algorithm keeps its state in strings
// (prelude.lua's get and keep), which a policy's names may keep as fields
// of hashes; sliding-log and concurrency keep sorted sets.
func (a Algo) StringState() bool { return a != SlidingLog && a != Concurrency }

// HasBurst reports whether the algorithm has a capacity apart from its rate.
func (a Algo) HasBurst() bool { return a == TokenBucket || a == LeakyBucket }

// Sub is the share of one sub-limiter: its own rate and burst.
type Sub struct {
	Shard int
	Rate  int64
	Burst int64
	// Limits are its share of each of the config's Limits, in order (split
	// over shards like Rate, so each limit's shares sum to its rate).
	Limits [MaxLimits - 1]int64
}

// fields lists the stored config of one sub-limiter (all but the epoch),
// in a fixed order so that equal configs compare equal field by field.
// Optional fields (shadow) are written only when set, so a config stored
// before they existed compares equal to the same config now; setconf.lua
// compares them whether given or not.
func (c Config) fields(sub Sub) []any {
	f := []any{
		"algo", string(c.Algo),
		"rate", strconv.FormatInt(c.Rate, 10),
		"interval_ms", strconv.FormatInt(c.Interval.Milliseconds(), 10),
		"burst", strconv.FormatInt(c.Burst, 10),
		"shards", strconv.Itoa(c.Shards),
		"mode", string(c.Mode),
		"ttl_ms", strconv.FormatInt(c.TTL.Milliseconds(), 10),
		"shard", strconv.Itoa(sub.Shard),
		"sub_rate", strconv.FormatInt(sub.Rate, 10),
		"sub_burst", strconv.FormatInt(sub.Burst, 10),
	}
	if c.Shadow {
		f = append(f, "shadow", "1")
	}
	if extra := c.Limits.List(); len(extra) > 0 {
		all, mine := make([]string, len(extra)), make([]string, len(extra))
		for i, l := range extra {
			ms := strconv.FormatInt(l.Interval.Milliseconds(), 10)
			all[i] = strconv.FormatInt(l.Rate, 10) + ":" + ms
			mine[i] = strconv.FormatInt(sub.Limits[i], 10) + ":" + ms
		}
		f = append(f, "limits", strings.Join(all, ","), "sub_limits", strings.Join(mine, ","))
	}
	return f
}

// Stored is a config as read back from a backend, with its epoch: the
// version of its state. A new epoch means fresh state.
type Stored struct {
	Config
	Epoch string
	// Gen is the generation of the config: shard 0 gives every new config
	// a higher one, and a follower shard takes only a newer one ("" when
	// written by an rlproxy without generations).
	Gen string
}

// ParseStored reads a config hash (HGETALL of a config key). It returns an
// error naming the field when the hash is not one rlproxy wrote.
func ParseStored(h map[string]string) (Stored, error) {
	var s Stored
	var err error
	num := func(field string) int64 {
		if err != nil {
			return 0
		}
		v, e := strconv.ParseInt(h[field], 10, 64)
		if e != nil {
			err = fmt.Errorf("stored limiter config: bad field %q: %q", field, h[field])
		}
		return v
	}
	s.Epoch = h["epoch"]
	s.Gen = h["gen"]
	s.Algo = Algo(h["algo"])
	s.Mode = Mode(h["mode"])
	s.Rate = num("rate")
	s.Interval = time.Duration(num("interval_ms")) * time.Millisecond
	s.Burst = num("burst")
	s.Shards = int(num("shards"))
	s.TTL = time.Duration(num("ttl_ms")) * time.Millisecond
	s.Shadow = h["shadow"] == "1"
	if v := h["limits"]; v != "" && err == nil {
		for i, pair := range strings.Split(v, ",") {
			r, iv, ok := strings.Cut(pair, ":")
			rate, e1 := strconv.ParseInt(r, 10, 64)
			ms, e2 := strconv.ParseInt(iv, 10, 64)
			if !ok || e1 != nil || e2 != nil || rate <= 0 || ms <= 0 || i >= len(s.Limits) {
				err = fmt.Errorf("stored limiter config: bad field \"limits\": %q", v)
				break
			}
			s.Limits[i] = Limit{Rate: rate, Interval: time.Duration(ms) * time.Millisecond}
		}
	}
	if err != nil {
		return Stored{}, err
	}
	if s.Epoch == "" {
		return Stored{}, fmt.Errorf("stored limiter config: no epoch")
	}
	return s, nil
}

// SetConfOptions are the flags of one RL.SETRATE call.
type SetConfOptions struct {
	NX        bool   // only create
	KeepState bool   // carry used permits over to the new rate
	Epoch     string // epoch for a newly written config
	// Gen, when set, writes a follower shard (not shard 0) with shard 0's
	// generation: only when the follower holds an older one, so a writer
	// that lost a race never overwrites the winner's config.
	Gen string
	// Replace, with Gen, writes the follower whatever it holds (repair
	// after shard 0 lost its data).
	Replace bool
	// Feed, when set, is the change feed's channel that a changed config
	// is announced on (shard 0's write), for the limiter Name.
	Feed, Name string
}

// SetConfArgs builds the ARGV of setconf.lua for one sub-limiter.
func SetConfArgs(c Config, sub Sub, o SetConfOptions) []any {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	mode := flag(o.NX)
	switch {
	case o.Gen != "" && o.Replace:
		mode = "R"
	case o.Gen != "":
		mode = "F"
	}
	args := []any{mode, flag(o.KeepState), o.Epoch, c.TTL.Milliseconds(), o.Feed, o.Name}
	args = append(args, c.fields(sub)...)
	if o.Gen != "" {
		args = append(args, "gen", o.Gen)
	}
	return args
}

// DropFollowerArgs builds the ARGV of setconf.lua that deletes a follower
// shard's config unless it holds gen or a newer one.
func DropFollowerArgs(gen string) []any {
	return []any{"D", "0", "", 0, "", "", "gen", gen}
}

// Capacity is the most permits one request may ask for: the burst of a
// bucket, the rate of a window. When sharded, the smallest sub-limiter's
// share bounds it.
func (c Config) Capacity() int64 {
	capacity := c.Rate
	if c.Algo.HasBurst() {
		capacity = c.Burst
	}
	for _, l := range c.Limits.List() {
		capacity = min(capacity, l.Rate)
	}
	if c.Shards > 1 {
		capacity /= int64(c.Shards)
	}
	return capacity
}

// Reserves reports whether the algorithm's script can book permits ahead
// for a caller willing to wait (so waiters are served in order across
// proxies).
func (a Algo) Reserves() bool { return a == TokenBucket || a == LeakyBucket }
