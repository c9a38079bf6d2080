package proxy

import (
	"testing"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/limiter"
)

// config imports nothing of rlproxy's, so it writes the shard bound out;
// it must be the limiter's.
func TestConfigShardBoundIsTheLimiters(t *testing.T) {
	if config.MaxShards != limiter.MaxShards {
		t.Fatalf("config.MaxShards = %d, limiter.MaxShards = %d", config.MaxShards, limiter.MaxShards)
	}
}
