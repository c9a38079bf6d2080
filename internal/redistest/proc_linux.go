package redistest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group (so a Ctrl-C on the
// terminal goes to `go test`, not straight to the servers) and asks the kernel
// to SIGKILL it if its parent goes away. That covers the cases where the
// cleanups never run: a panic, a `go test -timeout`, a killed test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Pdeathsig fires when the OS *thread* that started the child exits, not the
// process. Go ends a thread only when a goroutine locked to it returns, so
// children are started from one goroutine that locks its thread and never
// returns: that thread lives as long as the test binary.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked, on purpose
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd, done}
	return <-done
}

// waitStopped waits until process pid is in the stopped state ('T' in
// /proc/<pid>/stat), i.e. until a SIGSTOP has actually taken effect.
func waitStopped(pid int, timeout time.Duration) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Format: "pid (comm) state ..."; comm may contain spaces or ')'.
		var state byte
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			state = b[i+2]
		}
		if state == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %v (state %q)", pid, timeout, state)
		}
		time.Sleep(time.Millisecond)
	}
}
