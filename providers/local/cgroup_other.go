//go:build !linux

package local

import (
	"os/exec"
	"syscall"
	"time"
)

// Control groups are Linux's: elsewhere every task runs unconfined.
func detectCgroups(cfg Cgroups, _ string) *cgroupHost {
	if cfg.Disable {
		return &cgroupHost{conf: Confinement{Missing: "cgroup confinement is disabled (Config.Cgroups.Disable)"}}
	}
	return &cgroupHost{conf: Confinement{Missing: "cgroups need Linux: tasks run unconfined"}}
}

func (cg *taskCgroup) create() error                { return nil }
func (s cgroupSet) pids() []int                     { return nil }
func (s cgroupSet) alive() bool                     { return false }
func (s cgroupSet) signal(syscall.Signal)           {}
func (s cgroupSet) kill()                           {}
func (s cgroupSet) oomKills() (int64, bool, int64)  { return 0, true, 0 }
func (s cgroupSet) cpuUsage() (time.Duration, bool) { return 0, false }
func (s cgroupSet) exist() bool                     { return false }
func (s cgroupSet) remove() error                   { return nil }

// startIn starts cmd, then runs started (if not nil).
func startIn(cmd *exec.Cmd, _ *taskCgroup, started func()) error {
	err := cmd.Start()
	if err == nil && started != nil {
		started()
	}
	return err
}
