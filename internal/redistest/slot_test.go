package redistest

import "testing"

func TestKeySlot(t *testing.T) {
	// Answers of CLUSTER KEYSLOT on redis-server 7.0 (the first two are in
	// the Redis documentation).
	for key, want := range map[string]int{
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"123456789":     12739,
		"foo":           12182,
		"{a%7Db:0}:c":   6947,
		"":              0,
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
}
