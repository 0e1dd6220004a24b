package local

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// Cgroups configures the control group each task runs in (see the package
// documentation, "Confinement"). The zero value confines every task under
// DefaultCgroupParent wherever the machine allows it.
type Cgroups struct {
	// Disable runs every task unconfined, in the provider's own control
	// groups: no CPU, memory or CPU-set enforcement, and a stop reaches
	// only the task's process group.
	Disable bool
	// Parent is the cgroup, as a path from the root of each cgroup
	// hierarchy, under which task cgroups are made:
	// <hierarchy>/<Parent>/<provider name>/<task id>. Default
	// DefaultCgroupParent. Created if missing; it must not hold processes
	// of its own.
	Parent string
}

// DefaultCgroupParent is the default Cgroups.Parent.
const DefaultCgroupParent = "computeboard"

// Confinement says which of a task's reservations a Provider enforces
// through control groups. The adapter claims only these in its telemetry.
type Confinement struct {
	CPU    bool // Resources.CPUCores is a CFS quota (cpu.max, cpu.cfs_quota_us)
	Memory bool // Resources.MemoryBytes is a hard limit without swap; going over it is reported as OOMKilled
	CPUSet bool // Placement.CPUs (and Placement.NUMA's memory node) bound where the task runs
	// KillAll: a stop or timeout kills every process of the task, those
	// that left its process group (setsid) included, through cgroup.kill
	// or a freezer.
	KillAll bool
	// Missing says what is not enforced, and why; empty when all is.
	Missing string
}

// Names lists the enforced controls as short names ("cpu", "memory",
// "cpuset", "kill"), in that order.
func (c Confinement) Names() []string {
	var names []string
	for _, e := range []struct {
		on   bool
		name string
	}{{c.CPU, "cpu"}, {c.Memory, "memory"}, {c.CPUSet, "cpuset"}, {c.KillAll, "kill"}} {
		if e.on {
			names = append(names, e.name)
		}
	}
	return names
}

// Confinement reports which controls this provider enforces on its tasks;
// it never changes after New.
func (p *Provider) Confinement() Confinement { return p.cgroups.conf }

// cgroupHost is what New found the machine lets the provider enforce,
// and where.
type cgroupHost struct {
	hierarchies []hierarchy // empty: tasks run unconfined
	conf        Confinement
}

// hierarchy is one cgroup hierarchy the provider makes task cgroups in.
type hierarchy struct {
	base        string   // <mount point>/<Parent>/<provider name>: task cgroups go in here
	v2          bool     // the unified hierarchy
	controllers []string // the ones of ours it carries (supervise.CtlCPU, ...)
}

// cfsPeriod is the CFS bandwidth period every task gets, in microseconds.
const cfsPeriod = 100_000

// minCFSQuota is the least quota the kernel accepts, in microseconds.
const minCFSQuota = 1000

// plan returns the cgroup for task t, or nil when tasks run unconfined.
func (h *cgroupHost) plan(t providers.Task) *supervise.Cgroup {
	if h == nil || len(h.hierarchies) == 0 {
		return nil
	}
	cg := &supervise.Cgroup{}
	for _, hr := range h.hierarchies {
		cg.Dirs = append(cg.Dirs, supervise.CgroupDir{Path: filepath.Join(hr.base, t.ID), V2: hr.v2, Controllers: hr.controllers})
	}
	if h.conf.CPU && t.Resources.CPUCores > 0 {
		cg.CPUPeriod = cfsPeriod
		cg.CPUQuota = max(int64(t.Resources.CPUCores*cfsPeriod), minCFSQuota)
	}
	if h.conf.Memory && t.Resources.MemoryBytes > 0 {
		cg.MemoryBytes = t.Resources.MemoryBytes
	}
	if h.conf.CPUSet {
		cg.CPUs = cpuList(t.Placement.CPUs)
		if t.Placement.NUMA >= 0 {
			cg.Mems = strconv.Itoa(t.Placement.NUMA)
		}
	}
	return cg
}

// cpuList formats CPU IDs as a cpuset list ("0,2,5"); "" for none.
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// checkPlacement rejects a placement no machine could honour.
func checkPlacement(pl providers.Placement) error {
	for _, c := range pl.CPUs {
		if c < 0 {
			return fmt.Errorf("negative CPU ID %d in placement", c)
		}
	}
	return nil
}

// cgroupName turns a provider name into a safe directory name.
func cgroupName(name string) string {
	b := []byte(name)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || (c == '.' && i > 0)
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
