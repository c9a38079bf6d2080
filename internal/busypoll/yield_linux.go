package busypoll

import "syscall"

// yield lets another thread that is ready on this CPU run (sched_yield;
// it never blocks, so the runtime need not know).
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
