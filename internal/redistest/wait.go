package redistest

import (
	"testing"
	"time"
)

// WaitFor polls cond every millisecond until it holds, and fails the test
// if it does not within 5 s.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
