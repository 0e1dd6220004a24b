// Package proctimes reads processes' CPU times from Linux's /proc, for the
// benchmarks: a process's own, its waited-for children's, and those of its
// children still alive (a supervisor server outlives a run, so its time is
// in no RUSAGE_CHILDREN until it exits).
package proctimes

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// Ticks is t clock ticks as a duration.
func Ticks(t int64) time.Duration { return time.Duration(t) * time.Second / clockTicks }

// Read is process pid's utime, stime (all its threads), cutime and cstime
// (its waited-for children), in clock ticks.
func Read(pid int) ([4]int64, error) {
	var t [4]int64
	f, err := fields(pid)
	if err != nil {
		return t, err
	}
	for i := range t {
		if t[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return t, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	return t, nil
}

// LiveChildren is the CPU time so far of pid's children that are alive
// (not yet in its cutime and cstime), with their own waited-for
// children's: the local provider's supervisor server, which reaps its
// tasks itself, and supervisors whose tasks still run. Zero without /proc.
func LiveChildren(pid int) time.Duration {
	ents, _ := os.ReadDir("/proc")
	parent := strconv.Itoa(pid)
	var sum int64
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := fields(child)
		if err != nil || f[1] != parent {
			continue
		}
		if t, err := Read(child); err == nil {
			sum += t[0] + t[1] + t[2] + t[3]
		}
	}
	return Ticks(sum)
}

// fields is /proc/<pid>/stat's fields from the third (state) on: the
// command name before them may hold spaces. f[1] is the parent's pid,
// f[11] utime (field 14).
func fields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return f, nil
}
