package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// ProcStat reads a process's state letter, process group and start time
// (clock ticks after boot) from /proc/<pid>/stat.
func ProcStat(pid int) (state byte, pgrp int, startTicks uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself, so split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 20 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	pgrp, err = strconv.Atoi(f[5-3])
	if err == nil {
		startTicks, err = strconv.ParseUint(f[22-3], 10, 64)
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return f[0][0], pgrp, startTicks, nil
}

// BootID names the current boot, so records from before a reboot never
// match a live process.
func BootID() (string, error) {
	if id := bootID.Load(); id != nil {
		return *id, nil
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	bootID.Store(&id)
	return id, nil
}

// bootID is the boot ID once read: no process outlives its boot, and a
// supervisor server reads it for every task it starts.
var bootID atomic.Pointer[string]

// Dead reports whether a /proc state letter means the process has exited
// (a zombie waits only for its parent to reap it).
func Dead(state byte) bool { return state == 'Z' || state == 'X' || state == 'x' }

// GroupAlive reports whether any live (non-zombie) process is in process
// group pgid. Zombies are skipped because an orphan that exits is reaped
// by PID 1, and in containers PID 1 may never do it.
func GroupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell; the caller's grace timer bounds the wait
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pg, _, err := ProcStat(pid); err == nil && pg == pgid && !Dead(st) {
			return true
		}
	}
	return false
}
