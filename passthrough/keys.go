package passthrough

import (
	"strconv"
	"strings"
)

// keySpec is where a command's keys are: from first to last (negative:
// counted from the end, -1 the last argument) every step-th argument.
type keySpec struct{ first, last, step int }

// containers are the commands whose subcommand decides the keys.
var containers = map[string]bool{"OBJECT": true, "MEMORY": true, "XINFO": true, "XGROUP": true}

// Keys returns the keys a command names, as Redis finds them: by its key
// positions, or for the commands whose keys move with their arguments
// (EVAL's numkeys, XREAD's STREAMS, SORT's STORE, ...) by reading them.
// A command it does not know names no keys.
func Keys(args []string) []string {
	return appendKeys(nil, commandOf(args[0]), args)
}

// appendKeys appends the keys of a call of cmd to dst: with room in dst,
// a command of fixed key positions costs no allocation.
func appendKeys(dst []string, cmd *command, args []string) []string {
	if cmd.movable != nil {
		return append(dst, cmd.movable(args)...)
	}
	spec := cmd.spec
	if cmd.container { // the keys are its subcommand's
		spec = nil
		if len(args) > 1 {
			if sub, ok := keySpecs[cmd.name+"|"+strings.ToUpper(args[1])]; ok {
				spec = &sub
			}
		}
	}
	if spec == nil {
		return dst
	}
	return appendRange(dst, args, spec.first, spec.last, spec.step)
}

func keyRange(args []string, first, last, step int) []string {
	return appendRange(nil, args, first, last, step)
}

func appendRange(dst []string, args []string, first, last, step int) []string {
	if last < 0 {
		last += len(args)
	}
	for i := first; i <= last && i < len(args); i += step {
		dst = append(dst, args[i])
	}
	return dst
}

// numKeys reads "numkeys key..." at args[at]: EVAL, ZUNION, LMPOP, ...
func numKeys(at int) func([]string) []string {
	return func(args []string) []string {
		if at >= len(args) {
			return nil
		}
		n, err := strconv.Atoi(args[at])
		if err != nil || n < 1 {
			return nil
		}
		return keyRange(args, at+1, min(at+n, len(args)-1), 1)
	}
}

// withStore adds the destination after a STORE-like keyword to keys.
func withStore(keys func([]string) []string, words ...string) func([]string) []string {
	return func(args []string) []string {
		out := keys(args)
		for i := 2; i+1 < len(args); i++ {
			for _, w := range words {
				if strings.EqualFold(args[i], w) {
					out = append(out, args[i+1])
				}
			}
		}
		return out
	}
}

func first(args []string) []string { return keyRange(args, 1, 1, 1) }

// streamKeys reads XREAD/XREADGROUP's "STREAMS key... id...".
func streamKeys(args []string) []string {
	for i := 1; i < len(args); i++ {
		if strings.EqualFold(args[i], "STREAMS") {
			rest := args[i+1:]
			return rest[:len(rest)/2]
		}
	}
	return nil
}

// migrateKeys reads MIGRATE host port key|"" db timeout ... [KEYS key...].
func migrateKeys(args []string) []string {
	var keys []string
	if len(args) > 3 && args[3] != "" {
		keys = append(keys, args[3])
	}
	for i := 6; i < len(args); i++ {
		if strings.EqualFold(args[i], "KEYS") {
			return append(keys, args[i+1:]...)
		}
	}
	return keys
}

// movableKeys are the commands whose keys move with their arguments.
var movableKeys = map[string]func([]string) []string{
	"EVAL": numKeys(2), "EVALSHA": numKeys(2), "EVAL_RO": numKeys(2), "EVALSHA_RO": numKeys(2),
	"FCALL": numKeys(2), "FCALL_RO": numKeys(2),
	"ZUNION": numKeys(1), "ZINTER": numKeys(1), "ZDIFF": numKeys(1), "ZINTERCARD": numKeys(1),
	"SINTERCARD": numKeys(1), "LMPOP": numKeys(1), "ZMPOP": numKeys(1),
	"BLMPOP": numKeys(2), "BZMPOP": numKeys(2),
	"ZUNIONSTORE": withFirst(numKeys(2)), "ZINTERSTORE": withFirst(numKeys(2)), "ZDIFFSTORE": withFirst(numKeys(2)),
	"XREAD": streamKeys, "XREADGROUP": streamKeys,
	"MIGRATE": migrateKeys,
	"SORT":    withStore(first, "STORE"), "SORT_RO": first,
	"GEORADIUS":         withStore(first, "STORE", "STOREDIST"),
	"GEORADIUSBYMEMBER": withStore(first, "STORE", "STOREDIST"),
}

// withFirst adds args[1] (a destination key) before keys.
func withFirst(keys func([]string) []string) func([]string) []string {
	return func(args []string) []string { return append(first(args), keys(args)...) }
}

// SortPattern is an option of a SORT or SORT_RO call that reads keys named
// by a pattern and the sorted elements: no key check can see those keys,
// so Redis refuses the option to a user without access to every key.
type SortPattern struct {
	Option  string // "BY" (only with a '*': without one BY skips sorting) or "GET"
	Pattern string
}

// SortPatterns returns the options of a SORT or SORT_RO call that read
// keys by pattern, as Redis parses them.
func SortPatterns(args []string) []SortPattern {
	return sortPatterns(strings.ToUpper(args[0]), args)
}

// sortPatterns is SortPatterns for a call whose upper-case name the
// caller has already.
func sortPatterns(name string, args []string) []SortPattern {
	if name != "SORT" && name != "SORT_RO" {
		return nil
	}
	var out []SortPattern
	for j := 2; j < len(args)-1; j++ {
		switch opt := strings.ToUpper(args[j]); opt {
		case "BY", "GET":
			j++
			if opt == "GET" || strings.Contains(args[j], "*") {
				out = append(out, SortPattern{opt, args[j]})
			}
		case "LIMIT":
			j += 2
		case "STORE":
			j++
		}
	}
	return out
}

// Denied is Redis's refusal of the option.
func (p SortPattern) Denied() string {
	return p.Option + " option of SORT denied due to insufficient ACL permissions."
}

// mayReach reports whether a key the pattern forms (its first '*'
// replaced by an element; "->field" names a hash field after it) may
// start with prefix. Without a '*' it forms none ('#': the element).
func (p SortPattern) mayReach(prefix string) bool {
	lit, _, ok := strings.Cut(p.Pattern, "*")
	return ok && (strings.HasPrefix(lit, prefix) || strings.HasPrefix(prefix, lit))
}
