package server

import (
	"fmt"
	"regexp"
	"strings"
)

// The embedded backend's Lua (gopher-lua in miniredis) has cjson and
// redis.sha1hex but not Redis's cmsgpack, struct and bit libraries nor
// redis.REPL_*. A script that uses one is refused before it runs, with
// the way out, instead of failing inside with a Lua error about a nil
// global (BullMQ's scripts use cmsgpack, for one).
var embeddedMissing = []struct {
	lib string
	use *regexp.Regexp
}{
	{"cmsgpack", regexp.MustCompile(`\bcmsgpack\s*\.`)},
	{"struct", regexp.MustCompile(`\bstruct\s*\.`)},
	{"bit", regexp.MustCompile(`\bbit\s*\.`)},
	{"redis.REPL_*", regexp.MustCompile(`\bredis\s*\.\s*(REPL_[A-Z]+|set_repl)\b`)},
}

// embeddedLacks answers a script that uses a library the embedded
// backend's Lua lacks (EVAL, EVAL_RO, SCRIPT LOAD, FUNCTION LOAD).
func embeddedLacks(args []string) error {
	body := scriptBody(args)
	if body == "" {
		return nil
	}
	for _, m := range embeddedMissing {
		if m.use.MatchString(body) {
			return fmt.Errorf("ERR the embedded backend's Lua lacks '%s': run rlproxy with --backend redis://...", m.lib)
		}
	}
	return nil
}

// scriptBody is the Lua source a command carries, or "".
func scriptBody(args []string) string {
	name := strings.ToUpper(args[0])
	switch {
	case (name == "EVAL" || name == "EVAL_RO") && len(args) > 1:
		return args[1]
	case (name == "SCRIPT" || name == "FUNCTION") && len(args) > 2 && strings.EqualFold(args[1], "LOAD"):
		return args[len(args)-1] // FUNCTION LOAD [REPLACE] code
	}
	return ""
}
