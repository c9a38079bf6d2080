//go:build !linux

package busypoll

import "runtime"

// yield lets other goroutines run; other systems poll without giving up
// the thread.
func yield() { runtime.Gosched() }
