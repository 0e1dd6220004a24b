package supervise

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Spares keeps the cgroups of tasks that ended cleanly, emptied and
// renamed aside, for later tasks to take instead of making their own: a
// supervisor server's, for its tasks' cgroup v1 directories. On cgroup
// v1 a task's cgroup is a directory in each controller's hierarchy (on
// the machine this was measured on: cpu, cpuacct, cpuset and memory, with
// a v2 directory for kills), and making, configuring and removing them
// took a third of the server's CPU time per trivial task (the e2e bench's
// profile). Renaming a spare in and out costs about 40% of a mkdir and an
// rmdir, and the limits a spare already carries are not written again.
//
// A task's cgroup keeps its own path (<parent>/<task id>) while the task
// runs, so a stale reference to an ended task (a restarted adapter's
// Prune, a stop that comes late) finds nothing there, never a later task
// in a reused cgroup. Cgroup v2 cannot rename a cgroup, so a task's v2
// directory (all of it on a v2 host; on a hybrid one, the unified
// directory that kills and freezes) is made and removed with the task,
// as before.
//
// A cgroup becomes a spare only if its task ended on its own (whatever
// its exit code) and left nothing running, so nothing was signalled or
// frozen; the kernel killed none of its processes for memory (and, where
// it does not count kills, it never hit its limit); and under
// SpareMaxCharge of memory is still charged to it (page cache, or files
// the task left in a tmpfs, would count against the next task's limit).
// A spare is named SparePrefix<pid>-<start ticks>-<n>, after the process
// that keeps it, in its task cgroups' parent directory. Taking one
// renames it to the new task's paths, writes only the limits that differ
// (lifting a changed limit first, in the order the kernel requires; a
// cpuset left to the parent's is compared with the parent's as it is
// now) and clears its CPU accounting (cpuacct.usage); any failure removes
// it, and the task's cgroup is made afresh.
//
// At most max spares are kept; Close removes them (a server does when it
// exits), and PruneSpares removes those of a keeper that died. While a
// spare exists it holds its cpuset, so a parent's cpuset.cpus cannot
// shrink below it (v1): an operator who changes the parent's cpuset
// waits for the server to go idle, or stops it.
type Spares struct {
	prefix string
	max    int

	mu     sync.Mutex
	free   []spare
	seq    uint64
	closed bool
}

// spare is one kept cgroup: its directories at their spare names, and the
// limits last written into them.
type spare struct {
	dirs CgroupSet
	set  Cgroup // Dirs unused
}

// SparePrefix begins the name of every spare cgroup directory.
const SparePrefix = ".spare-"

// SpareMaxCharge is the most memory still charged to an ended task's
// cgroup for it to become a spare: a trivial task leaves about 160 KiB
// of kernel objects and cache.
const SpareMaxCharge = 1 << 20

// NewSpares returns an empty set of spares, kept by the process owner,
// holding at most max.
func NewSpares(owner ProcIdentity, max int) *Spares {
	return &Spares{prefix: fmt.Sprintf("%s%d-%d-", SparePrefix, owner.PID, owner.StartTicks), max: max}
}

// SpareOwner parses the name of a spare cgroup directory: the pid and
// start time (in clock ticks) of the process that keeps it.
func SpareOwner(name string) (pid int, startTicks uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, SparePrefix)
	if !ok {
		return 0, 0, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 3 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	startTicks, err2 := strconv.ParseUint(f[1], 10, 64)
	_, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, startTicks, true
}

// Create takes a spare for cg when one fits, else makes cg's directories
// (Cgroup.Create). A nil sp makes them. The v1 directories keep their
// control files open (ctlFiles) for as long as they exist, taken along
// when they become a spare: so a spare's second task opens none of the
// files its first did.
func (sp *Spares) Create(cg *Cgroup) error {
	if sp.take(cg) {
		return nil
	}
	if sp != nil {
		cg.Dirs.keepFiles()
	}
	return cg.Create()
}

// Release removes the cgroup of a task whose processes are all gone, or,
// when the task ended cleanly (on its own, leaving nothing running), sets
// it aside as a spare if it qualifies. A nil sp removes it.
func (sp *Spares) Release(cg *Cgroup, clean bool) error {
	if clean && sp.keep(cg) {
		return nil
	}
	return cg.Dirs.Remove()
}
