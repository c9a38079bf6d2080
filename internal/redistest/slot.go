package redistest

import "github.com/rlproxy/rlproxy/internal/keyslot"

// KeySlot is the Redis Cluster slot of key, as CLUSTER KEYSLOT computes it.
func KeySlot(key string) int { return keyslot.Of(key) }

// HashTag is the part of key Redis Cluster hashes.
func HashTag(key string) string { return keyslot.HashTag(key) }
