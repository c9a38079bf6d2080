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

// CheckName bounds a limiter's name: a longer one is refused before
// anything reaches a backend (a name is part of every key the limiter
// writes, on every shard).
func CheckName(name string, max int) error {
	if max > 0 && len(name) > max {
		return fmt.Errorf("limiter name is longer than %d bytes", max)
	}
	return nil
}
