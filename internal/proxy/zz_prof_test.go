package proxy

import (
	"os"
	"os/exec"
	"testing"
)

func TestZZProfPolicy(t *testing.T) {
	if os.Getenv("POLPROF") == "" {
		t.Skip()
	}
	h := start(t)
	h.Do(t, "RL.POLICY", "SET", "bench:*", "1000000000", "1s").OK()
	out, err := exec.Command("/tmp/gwb/rlbench", "--addr", h.proxy.Addr(), "--conns", "50", "--pipeline", os.Getenv("POLPROF"), "--keys", "10000", "--setup=false", "--duration", "5s").CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	t.Logf("%s", out)
}
