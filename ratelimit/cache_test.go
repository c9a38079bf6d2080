package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

func TestConfigCache(t *testing.T) {
	var c configCache
	if c.get("a") != nil {
		t.Fatal("empty cache returned an entry")
	}
	e := &entry{name: "a"}
	c.put("a", e)
	if c.get("a") != e {
		t.Error("put entry not returned")
	}
	t0 := time.Unix(1000, 0)
	if !c.due("a", t0, time.Second) {
		t.Error("first keepAlive not due")
	}
	if c.due("a", t0.Add(999*time.Millisecond), time.Second) {
		t.Error("keepAlive due again before its period")
	}
	if !c.due("a", t0.Add(time.Second), time.Second) {
		t.Error("keepAlive not due after its period")
	}
	c.drop("a")
	if c.get("a") != nil {
		t.Error("dropped entry still returned")
	}
	if !c.due("a", t0.Add(time.Second), time.Second) {
		t.Error("a dropped limiter's keepAlive is not due at once")
	}
}

func TestConfigCacheBound(t *testing.T) {
	var c configCache
	for i := range maxCached + 10 {
		c.put(strconv.Itoa(i), &entry{})
	}
	if n := len(c.entries); n != maxCached {
		t.Errorf("%d entries, want the bound %d", n, maxCached)
	}
}
