//go:build unix && !linux

package redistest

import (
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group. Unlike on Linux,
// there is no parent-death signal: servers are only killed by t.Cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped cannot observe the process state portably; give the SIGSTOP a
// moment to take effect.
func waitStopped(pid int, timeout time.Duration) error {
	time.Sleep(50 * time.Millisecond)
	return nil
}
