//go:build !linux

package supervise

import (
	"os/exec"
	"syscall"
	"time"
)

// Control groups are Linux's: elsewhere every task runs unconfined.

func (cg *Cgroup) Create() error                    { return nil }
func (s CgroupSet) Pids() []int                     { return nil }
func (s CgroupSet) Alive() bool                     { return false }
func (s CgroupSet) Signal(syscall.Signal)           {}
func (s CgroupSet) Kill()                           {}
func (s CgroupSet) OOMKills() (int64, bool, int64)  { return 0, true, 0 }
func (s CgroupSet) CPUUsage() (time.Duration, bool) { return 0, false }
func (s CgroupSet) Exist() bool                     { return false }
func (s CgroupSet) Remove() error                   { return nil }

// StartIn starts cmd, then runs started (if not nil).
func StartIn(cmd *exec.Cmd, _ *Cgroup, started func()) error {
	err := cmd.Start()
	if err == nil && started != nil {
		started()
	}
	return err
}

func (s CgroupSet) closeFiles() {}
func (s CgroupSet) keepFiles()  {}
