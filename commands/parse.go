package commands

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rlproxy/rlproxy/limiter"
)

// parseCount reads a positive integer argument no larger than max.
func parseCount(what, s string, max int64) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && !isRange(err) {
		return 0, fmt.Errorf("%s must be a positive integer, got %s", what, quote(s))
	}
	if n <= 0 { // also -99999999999999999999
		return 0, fmt.Errorf("%s must be a positive integer, got %s", what, quote(s))
	}
	if err != nil || n > max {
		return 0, fmt.Errorf("%s is out of range, got %s (at most %d)", what, quote(s), max)
	}
	return n, nil
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

var durationUnits = []struct {
	suffix string
	unit   time.Duration
}{
	// "ms" before "m" and "s": the longest suffix must match first.
	{"ms", time.Millisecond},
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
	{"d", 24 * time.Hour},
}

// ParseDuration reads a duration as the contract spells it: a positive
// integer of milliseconds, or a number with a unit suffix (ms, s, m, h, d),
// such as 500ms, 1s, 1.5m, 10m. The result is whole milliseconds, at least
// 1 and at most max.
func ParseDuration(what, s string, max time.Duration) (time.Duration, error) {
	// The errors are built only when returned: this runs on every request.
	bad := func() error {
		return fmt.Errorf("invalid %s %s: use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)", what, quote(s))
	}
	outOfRange := func() error {
		return fmt.Errorf("%s %s is out of range (at most %s)", what, quote(s), formatDuration(max))
	}
	notWhole := func() error {
		return fmt.Errorf("%s %s must be a whole number of milliseconds, at least 1", what, quote(s))
	}
	num, unit := s, time.Millisecond
	for _, u := range durationUnits {
		if hasSuffixFold(s, u.suffix) {
			num, unit = s[:len(s)-len(u.suffix)], u.unit
			break
		}
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	// Plain digits only: no signs, exponents, hex, "inf" or "nan".
	if !digits(whole) || (hasFrac && !digits(frac)) {
		return 0, bad()
	}
	// Exact decimal arithmetic (float64 would turn 1.001s into 1000.9999ms).
	unitMs, maxMs := int64(unit/time.Millisecond), int64(max/time.Millisecond)
	whole = strings.TrimLeft(whole, "0")
	frac = strings.TrimRight(frac, "0")
	if len(whole) > 18 {
		return 0, outOfRange()
	}
	w := decimal(whole)
	if w > maxMs/unitMs {
		return 0, outOfRange()
	}
	// A fraction of more than 10 significant digits is never whole
	// milliseconds: unitMs (at most a day) has no more than ten 2s or 5s.
	if len(frac) > 10 {
		return 0, notWhole()
	}
	f := decimal(frac)
	scale := int64(math.Pow10(len(frac)))
	if f*unitMs%scale != 0 {
		return 0, notWhole()
	}
	ms := w*unitMs + f*unitMs/scale
	if ms > maxMs {
		return 0, outOfRange()
	}
	if ms < 1 {
		return 0, notWhole()
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// hasSuffixFold reports whether s ends with suffix, a lower-case ASCII
// word, in any case of ASCII letters ("1S" ends with "s", "1ſ" does not).
func hasSuffixFold(s, suffix string) bool {
	if len(s) < len(suffix) {
		return false
	}
	tail := s[len(s)-len(suffix):]
	for i := 0; i < len(suffix); i++ {
		if tail[i]|0x20 != suffix[i] { // 'S'|0x20 == 's'
			return false
		}
	}
	return true
}

// decimal reads at most 18 digits ("" is 0) that digits has checked.
func decimal(s string) int64 {
	var n int64
	for i := 0; i < len(s); i++ {
		n = n*10 + int64(s[i]-'0')
	}
	return n
}

// formatDuration writes d in the largest unit of the contract that
// divides it (366d, not 8784h0m0s).
func formatDuration(d time.Duration) string {
	for i := len(durationUnits) - 1; i >= 0; i-- {
		if u := durationUnits[i]; d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.suffix
		}
	}
	return d.String()
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// upperIs reports whether strings.ToUpper(s) == upper, an upper-case ASCII
// word, without building the upper-cased copy. Unlike strings.EqualFold,
// it accepts "ı" as I and rejects the Kelvin sign as K, as ToUpper does.
func upperIs(s, upper string) bool {
	i := 0
	for _, r := range s {
		if i == len(upper) || unicode.ToUpper(r) != rune(upper[i]) {
			return false
		}
		i++
	}
	return i == len(upper)
}

// waitArgs are the words after the key that RL.ACQUIRE and RL.LEASE share.
type waitArgs struct {
	permits int64
	ttl     time.Duration // RL.LEASE's only
	timeout time.Duration
	block   bool
}

// waitSyntax is one command's spelling of waitArgs.
type waitSyntax struct {
	ttl      bool   // TTL duration is an option
	expected string // the words after the key, for "syntax error near"
}

// waitOptions are the options after permits, in any order and case, each
// at most once; BLOCK takes no value, and only RL.LEASE takes TTL (last).
var waitOptions = [...]string{"TIMEOUT", "BLOCK", "TTL"}

const (
	optTimeout = iota
	optBlock
	optTTL
)

// option finds word among s's options, or returns -1.
func (s waitSyntax) option(word string) int {
	n := len(waitOptions)
	if !s.ttl {
		n = optTTL
	}
	for k, name := range waitOptions[:n] {
		if isWord(word, name) {
			return k
		}
	}
	return -1
}

// isWord reports whether word is name, an upper-case ASCII word, in any
// case. RL.ACQUIRE matched its words with strings.EqualFold and RL.LEASE
// with strings.ToUpper (upperIs): both take every word either one took.
// They differ only beyond ASCII, where a letter that matches an ASCII one
// (ı, ſ, the Kelvin sign) takes more than one byte.
func isWord(word, name string) bool {
	if len(word) != len(name) {
		return len(word) > len(name) && (upperIs(word, name) || strings.EqualFold(word, name))
	}
	for i := 0; i < len(word); i++ {
		if word[i]&^0x20 != name[i] { // 'b'&^0x20 == 'B'; name has letters only
			return false
		}
	}
	return true
}

// parseWaitArgs parses [permits] and then s's options: the one parser of
// RL.ACQUIRE and RL.LEASE, so that the same mistake gets the same error.
func parseWaitArgs(rest []string, s waitSyntax) (waitArgs, error) {
	w := waitArgs{permits: 1}
	var seen [len(waitOptions)]bool
	for first := true; len(rest) > 0; first = false {
		k := s.option(rest[0])
		if k < 0 && first {
			var err error
			if w.permits, err = parseCount("permits", rest[0], limiter.MaxRate); err != nil {
				return waitArgs{}, err
			}
			rest = rest[1:]
			continue
		}
		if k < 0 {
			return waitArgs{}, fmt.Errorf("syntax error near %s (expected %s)", quote(rest[0]), s.expected)
		}
		opt := waitOptions[k]
		switch {
		case seen[k]:
			return waitArgs{}, fmt.Errorf("syntax error: option %s given twice", opt)
		case k == optTimeout && seen[optBlock], k == optBlock && seen[optTimeout]:
			return waitArgs{}, errTimeoutBlock
		}
		seen[k] = true
		if k == optBlock {
			w.block = true
			rest = rest[1:]
			continue
		}
		if len(rest) < 2 {
			return waitArgs{}, fmt.Errorf("syntax error: option %s needs a value", opt)
		}
		d, err := ParseDuration(opt, rest[1], maxTTL)
		if err != nil {
			return waitArgs{}, err
		}
		if k == optTTL {
			w.ttl = d
		} else {
			w.timeout = d
		}
		rest = rest[2:]
	}
	return w, nil
}

// errTimeoutBlock: TIMEOUT d waits up to d, BLOCK without end; not both.
var errTimeoutBlock = errors.New("syntax error: TIMEOUT and BLOCK cannot be combined")
