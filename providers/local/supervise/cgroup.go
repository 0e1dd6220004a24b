package supervise

import "slices"

// The controllers (and, for cgroup v2, core features) a task cgroup
// directory can carry. CgroupDir.Controllers lists these names.
const (
	CtlCPU     = "cpu"
	CtlCPUAcct = "cpuacct" // v1 accounting only: cpuacct.usage
	CtlCPUSet  = "cpuset"
	CtlMemory  = "memory"
	CtlFreezer = "freezer" // v1; v2 has cgroup.freeze and cgroup.kill in every cgroup
)

// CgroupDir is one of a task's cgroup directories: one per hierarchy the
// provider uses (one on a pure cgroup v2 machine; one per v1 controller,
// plus the v2 one, on a hybrid one).
type CgroupDir struct {
	Path        string   `json:"path"` // absolute, under the hierarchy's mount point
	V2          bool     `json:"v2,omitempty"`
	Controllers []string `json:"controllers,omitempty"` // the ones of ours this directory carries
}

// Has reports whether d carries controller ctl.
func (d CgroupDir) Has(ctl string) bool { return slices.Contains(d.Controllers, ctl) }

// CgroupSet is the directories of one task's cgroup.
type CgroupSet []CgroupDir

// Cgroup is a task's cgroup: where it is and what to set in it. The
// provider plans it in Start; whoever starts the task's process (the
// supervisor, or the provider in-process) creates it, puts the process
// in it, and removes it once the task has ended.
type Cgroup struct {
	Dirs CgroupSet `json:"dirs"`
	// CPUQuota is the run time allowed per CPUPeriod, both in
	// microseconds; 0: no limit.
	CPUQuota  int64 `json:"cpu_quota_us,omitempty"`
	CPUPeriod int64 `json:"cpu_period_us,omitempty"`
	// MemoryBytes is the memory limit; 0: none. Swap is off for the task
	// either way when a limit is set.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUs and Mems are cpuset lists ("0-3,8"); "" takes the parent's.
	CPUs string `json:"cpus,omitempty"`
	Mems string `json:"mems,omitempty"`
}
