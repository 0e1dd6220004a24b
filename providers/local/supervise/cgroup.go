package supervise

import (
	"slices"
	"sync"
)

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

	// files, when set, keeps the directory's control files open from one
	// use to the next (ctlFiles): a supervisor server's v1 directories,
	// which its spares carry from task to task. Copies of d share it.
	files *ctlFiles
}

// ctlFiles holds a cgroup directory's control files open, by name and
// access mode, so that a task's start and end each read or write them
// without an open and a close, nor a walk of the whole path on cgroupfs
// (about 15 of a supervisor server's 150 or so system calls per trivial
// task on a cgroup v1 host). The descriptors follow the directory when it
// is renamed (a spare taken or set aside), and fail with ENODEV once it
// is removed. Process lists (cgroup.procs, and tasks for reading) are
// never kept: cgroup v1 hands a file that stays open its first list
// again for up to a second, so they are opened afresh for every read.
// Closing is final and may be done more than once: copies of a
// CgroupDir share it.
type ctlFiles struct {
	mu     sync.Mutex
	fds    map[ctlKey]int
	closed bool
}

type ctlKey struct {
	file  string
	write bool
}

// Equal reports whether d and o name the same directory, carrying the
// same controllers: the files held open for one of them (ctlFiles) are
// not part of what it is. (go-cmp, which tests use, compares with it.)
func (d CgroupDir) Equal(o CgroupDir) bool {
	return d.Path == o.Path && d.V2 == o.V2 && slices.Equal(d.Controllers, o.Controllers)
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
