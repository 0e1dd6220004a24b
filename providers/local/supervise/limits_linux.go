package supervise

import (
	"syscall"
	"unsafe"
)

const (
	RlimitNOFILE = syscall.RLIMIT_NOFILE
	RlimitCORE   = syscall.RLIMIT_CORE
)

// setLimit sets one limit of process pid (0: this process) to l.Value, soft
// and hard, capped at this process's own hard limit.
func setLimit(pid int, l Rlimit) error {
	var own syscall.Rlimit
	if err := syscall.Getrlimit(l.Resource, &own); err != nil {
		return err
	}
	v := min(l.Value, own.Max)
	lim := syscall.Rlimit{Cur: v, Max: v}
	if pid == 0 {
		// syscall.Setrlimit also tells os/exec not to restore the
		// original RLIMIT_NOFILE in the children this process starts.
		return syscall.Setrlimit(l.Resource, &lim)
	}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(l.Resource), uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
