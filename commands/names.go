package commands

import "fmt"

// Key returns the limiter name a call of c names (its argument at
// KeyPos), if c takes one and the call has it.
func (c *Command) Key(args []string) (string, bool) {
	if c.KeyPos <= 0 || c.KeyPos >= len(args) {
		return "", false
	}
	return args[c.KeyPos], true
}

// Pattern returns the policy pattern a call of c names (its argument at
// PatternPos), if c takes one and the call has it.
func (c *Command) Pattern(args []string) (string, bool) {
	if c.PatternPos <= 0 || c.PatternPos >= len(args) {
		return "", false
	}
	return args[c.PatternPos], true
}

// CheckPattern bounds a policy pattern as CheckName bounds a name: its
// prefix (all but the final '*') may be as long as a name, no longer.
func CheckPattern(pattern string, max int) error {
	if max > 0 && len(pattern) > max+1 {
		return fmt.Errorf("policy pattern is longer than %d bytes: no name could match it (max_name_length is %d)", max+1, max)
	}
	return nil
}

// CheckName bounds a limiter's name: a longer one is refused before
// anything reaches a backend (a name is part of every key the limiter
// writes, on every shard).
func CheckName(name string, max int) error {
	if max > 0 && len(name) > max {
		return fmt.Errorf("limiter name is longer than %d bytes", max)
	}
	return nil
}
