package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// v2Controllers are the cgroup v2 controllers a task cgroup uses.
var v2Controllers = []string{ctlCPU, ctlCPUSet, ctlMemory}

// v1Controllers are the cgroup v1 controllers a task cgroup uses, each
// where cgroup v2 does not offer it.
var v1Controllers = []string{ctlCPU, ctlCPUAcct, ctlCPUSet, ctlMemory, ctlFreezer}

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	point       string   // mount point
	v2          bool     // cgroup2
	controllers []string // v1: the controllers bound to it
}

// cgroupMounts lists the cgroup hierarchies mounted in this process's
// mount namespace, the first mount of each.
func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []cgroupMount
	seen := map[string]bool{} // a hierarchy by its super options (v1) or type (v2)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 {
			continue
		}
		m := cgroupMount{point: unescapeMount(fields[4])}
		switch tail[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for _, o := range strings.Split(tail[2], ",") {
				if slices.Contains(v1Controllers, o) {
					m.controllers = append(m.controllers, o)
				}
			}
			if len(m.controllers) == 0 {
				continue // name=systemd and the like
			}
		default:
			continue
		}
		key := tail[0] + " " + strings.Join(m.controllers, ",")
		if !seen[key] {
			seen[key] = true
			mounts = append(mounts, m)
		}
	}
	return mounts, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// detectCgroups finds what this machine lets the provider enforce, makes
// the parent cgroups (<hierarchy>/<cfg.Parent>/<name>), and says what is
// missing and why.
func detectCgroups(cfg Cgroups, name string) *cgroupHost {
	h := &cgroupHost{}
	switch {
	case cfg.Disable:
		h.conf.Missing = "cgroup confinement is disabled (Config.Cgroups.Disable)"
		return h
	case os.Geteuid() != 0:
		h.conf.Missing = "the provider does not run as root, so it cannot make cgroups"
		return h
	}
	mounts, err := cgroupMounts()
	if err != nil {
		h.conf.Missing = fmt.Sprintf("cannot list cgroup mounts: %v", err)
		return h
	}
	return setupCgroups(cfg, name, mounts)
}

// setupCgroups is detectCgroups on the given hierarchies.
func setupCgroups(cfg Cgroups, name string, mounts []cgroupMount) *cgroupHost {
	h := &cgroupHost{}
	rel := filepath.Join(cfg.Parent, cgroupName(name))
	var problems, notes []string
	covered := map[string]bool{}
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		hr, err := setupV2(m.point, rel)
		if err != nil {
			notes = append(notes, fmt.Sprintf("cgroup v2 at %s unusable: %v", m.point, err))
			break
		}
		h.hierarchies = append(h.hierarchies, hr)
		for _, c := range hr.controllers {
			covered[c] = true
		}
		covered[ctlFreezer] = true // cgroup.kill, or cgroup.freeze
		h.conf.KillAll = true
		break
	}
	for _, m := range mounts {
		if m.v2 {
			continue
		}
		var ctls []string
		for _, c := range m.controllers {
			if !covered[c] {
				ctls = append(ctls, c)
			}
		}
		if len(ctls) == 0 {
			continue
		}
		base := filepath.Join(m.point, rel)
		if err := makeV1Parent(m.point, rel, slices.Contains(m.controllers, ctlCPUSet)); err != nil {
			notes = append(notes, fmt.Sprintf("cgroup v1 %s: %v", strings.Join(ctls, ","), err))
			continue
		}
		h.hierarchies = append(h.hierarchies, hierarchy{base: base, controllers: ctls})
		for _, c := range ctls {
			covered[c] = true
		}
	}
	for _, hr := range h.hierarchies {
		for _, c := range hr.controllers {
			switch {
			case c == ctlCPU && (hr.v2 || exists(filepath.Join(hr.base, "cpu.cfs_quota_us"))):
				h.conf.CPU = true
			case c == ctlMemory:
				h.conf.Memory = true
			case c == ctlCPUSet:
				h.conf.CPUSet = true
			case c == ctlFreezer:
				h.conf.KillAll = true
			}
		}
	}
	for _, e := range []struct {
		on         bool
		what, need string
	}{
		{h.conf.CPU, "CPU limits", "the cpu controller with CFS bandwidth"},
		{h.conf.Memory, "memory limits", "the memory controller"},
		{h.conf.CPUSet, "CPU sets", "the cpuset controller"},
		{h.conf.KillAll, "stops that reach processes outside the task's process group", "cgroup v2 or the v1 freezer"},
	} {
		if !e.on {
			problems = append(problems, fmt.Sprintf("%s not enforced (needs %s)", e.what, e.need))
		}
	}
	if len(problems) > 0 {
		h.conf.Missing = strings.Join(append(problems, notes...), "; ")
	}
	return h
}

// setupV2 makes the parent cgroups on the cgroup v2 hierarchy mounted at
// point, enabling our controllers on the way down where the kernel offers
// them, and checks that a process can be started straight into a cgroup
// (CLONE_INTO_CGROUP, Linux 5.7).
func setupV2(point, rel string) (hierarchy, error) {
	hr := hierarchy{base: filepath.Join(point, rel), v2: true}
	levels := []string{point}
	for d := point; d != hr.base; {
		next, _, _ := strings.Cut(strings.TrimPrefix(hr.base, d+"/"), "/")
		d = filepath.Join(d, next)
		levels = append(levels, d)
	}
	for i, d := range levels {
		if i > 0 {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return hr, err
			}
		}
		// Each level passes the controllers down to the next, the base to
		// the task cgroups. The root may hold processes; levels we made do
		// not, so the kernel lets us enable controllers in them.
		avail := readFields(filepath.Join(d, "cgroup.controllers"))
		on := readFields(filepath.Join(d, "cgroup.subtree_control"))
		for _, c := range v2Controllers {
			if slices.Contains(avail, c) && !slices.Contains(on, c) {
				_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+"+c), 0)
			}
		}
	}
	on := readFields(filepath.Join(hr.base, "cgroup.subtree_control"))
	for _, c := range v2Controllers {
		if slices.Contains(on, c) {
			hr.controllers = append(hr.controllers, c)
		}
	}
	if !exists(filepath.Join(hr.base, "cgroup.kill")) && !exists(filepath.Join(hr.base, "cgroup.freeze")) {
		return hr, errors.New("neither cgroup.kill nor cgroup.freeze (Linux 5.2)")
	}
	if err := probeCloneIntoCgroup(hr.base); err != nil {
		return hr, fmt.Errorf("cannot start a process into a cgroup (CLONE_INTO_CGROUP, Linux 5.7): %w", err)
	}
	return hr, nil
}

// probeCloneIntoCgroup forks a child into a fresh cgroup under base and
// has it exec a program that cannot exist: ENOENT from exec means the
// clone worked.
func probeCloneIntoCgroup(base string) error {
	dir := filepath.Join(base, ".probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	defer os.Remove(dir)
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	// The cgroup file system holds no programs.
	_, err = syscall.ForkExec(filepath.Join(dir, "no-such-program"), nil, &syscall.ProcAttr{
		Env: []string{}, Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())},
	})
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err == nil {
		return errors.New("a program ran from the cgroup file system")
	}
	return err
}

// makeV1Parent makes the parent cgroups <point>/<rel> on a v1 hierarchy.
// A new cpuset cgroup starts with no CPUs and no memory nodes, and no
// process may join it until both are set: each level copies its parent's.
func makeV1Parent(point, rel string, cpuset bool) error {
	d := point
	for _, part := range strings.Split(rel, "/") {
		d = filepath.Join(d, part)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if !cpuset {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if err := inheritCpuset(d, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// inheritCpuset copies file (cpuset.cpus or cpuset.mems) from dir's parent
// when dir's is empty.
func inheritCpuset(dir, file string) error {
	cur, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(cur)) > 0 {
		return nil
	}
	parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), file))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, file), bytes.TrimSpace(parent), 0)
}

func readFields(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

// create makes the task's cgroup directories and sets its limits. A
// directory left from an earlier attempt is reused if it is empty.
func (cg *taskCgroup) create() error {
	for _, d := range cg.Dirs {
		err := os.Mkdir(d.Path, 0o755)
		if errors.Is(err, fs.ErrExist) && (cgroupSet{d}).alive() {
			err = fmt.Errorf("%s already holds processes", d.Path)
		} else if errors.Is(err, fs.ErrExist) {
			err = nil
		}
		if err == nil {
			err = d.configure(cg)
		}
		if err != nil {
			_ = cg.Dirs.remove()
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// configure writes cg's limits into d, for the controllers d carries.
func (d cgroupDir) configure(cg *taskCgroup) error {
	set := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(d.Path, file), []byte(value), 0); err != nil {
			return fmt.Errorf("set %s to %q: %w", file, value, err)
		}
		return nil
	}
	var errs []error
	if d.has(ctlCPUSet) {
		cpus, mems := cg.CPUs, cg.Mems
		if !d.V2 {
			// v1 wants both set before a process may join; "" is the parent's.
			parent := filepath.Dir(d.Path)
			if cpus == "" {
				b, err := os.ReadFile(filepath.Join(parent, "cpuset.cpus"))
				cpus, errs = strings.TrimSpace(string(b)), append(errs, err)
			}
			if mems == "" {
				b, err := os.ReadFile(filepath.Join(parent, "cpuset.mems"))
				mems, errs = strings.TrimSpace(string(b)), append(errs, err)
			}
		}
		if cpus != "" {
			errs = append(errs, set("cpuset.cpus", cpus))
		}
		if mems != "" {
			errs = append(errs, set("cpuset.mems", mems))
		}
	}
	if d.has(ctlCPU) && cg.CPUQuota > 0 {
		if d.V2 {
			errs = append(errs, set("cpu.max", fmt.Sprintf("%d %d", cg.CPUQuota, cg.CPUPeriod)))
		} else {
			errs = append(errs, set("cpu.cfs_period_us", strconv.FormatInt(cg.CPUPeriod, 10)),
				set("cpu.cfs_quota_us", strconv.FormatInt(cg.CPUQuota, 10)))
		}
	}
	if d.has(ctlMemory) && cg.MemoryBytes > 0 {
		limit := strconv.FormatInt(cg.MemoryBytes, 10)
		switch {
		case d.V2:
			errs = append(errs, set("memory.max", limit))
			if exists(filepath.Join(d.Path, "memory.swap.max")) {
				errs = append(errs, set("memory.swap.max", "0"))
			}
		default:
			// memsw (memory plus swap) may not go below the memory limit,
			// so it is set second.
			errs = append(errs, set("memory.limit_in_bytes", limit))
			if exists(filepath.Join(d.Path, "memory.memsw.limit_in_bytes")) {
				errs = append(errs, set("memory.memsw.limit_in_bytes", limit))
			} else {
				errs = append(errs, set("memory.swappiness", "0"))
			}
		}
	}
	return errors.Join(errs...)
}

// startIn starts cmd so that the new process is inside cg before it runs
// a single instruction of the task, and this process never is.
//
//   - cgroup v2: clone3(CLONE_INTO_CGROUP) (SysProcAttr.UseCgroupFD)
//     creates the process directly in its cgroup.
//   - cgroup v1 has no such flag, but a process is forked into the cgroups
//     of the thread that forks it. So a goroutine locks itself to an OS
//     thread, moves that one thread into the task's v1 cgroups (its TID
//     into each "tasks" file), and forks the task from it; the goroutine
//     then exits without unlocking, and the Go runtime discards the thread
//     rather than reuse it. The rest of this process (the supervisor, or
//     the adapter) stays in its own cgroups throughout, so it survives the
//     task's OOM kill and a kill of its cgroup, and the runtime starts new
//     threads from a template thread, never from a locked one.
//
// There is no window in which the task (or anything it forks) runs
// outside its cgroup, unlike writing its pid to cgroup.procs after the
// fact.
//
// started, if not nil, runs right after a successful start, on the same
// thread, before startIn returns.
func startIn(cmd *exec.Cmd, cg *taskCgroup, started func()) error {
	start := func() error {
		err := cmd.Start()
		if err == nil && started != nil {
			started()
		}
		return err
	}
	if cg == nil {
		return start()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	var v1 []string
	for _, d := range cg.Dirs {
		if !d.V2 {
			v1 = append(v1, d.Path)
			continue
		}
		f, err := os.Open(d.Path)
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		defer f.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
	}
	if len(v1) == 0 {
		return start()
	}
	var err error
	onThrowawayThread(func() {
		tid := []byte(strconv.Itoa(syscall.Gettid()))
		for _, dir := range v1 {
			if err = os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
				err = fmt.Errorf("cgroup: enter %s: %w", dir, err)
				return
			}
		}
		err = start()
	})
	return err
}

// onThrowawayThread runs f on an OS thread of its own, which ends with f:
// f may leave it in any state. The main thread cannot end before the
// process does (the Go runtime parks a goroutine that exits locked to it
// for ever, keeping whatever state f left it in), so if the goroutine
// lands on it, it holds the main thread and runs f from another goroutine,
// which then cannot land there.
func onThrowawayThread(f func()) {
	done := make(chan struct{})
	go func() { // ends after f; its thread with it
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if syscall.Gettid() != os.Getpid() {
			defer close(done)
			f()
			return
		}
		inner := make(chan struct{})
		go func() { // not on the main thread: this goroutine holds it
			runtime.LockOSThread() // never unlocked
			defer close(inner)
			f()
		}()
		<-inner
		runtime.UnlockOSThread() // the main thread, untouched
		close(done)
	}()
	<-done
}

// pids lists the processes in the task's cgroup (zombies are not listed).
func (s cgroupSet) pids() []int {
	var pids []int
	for _, d := range s {
		b, err := os.ReadFile(filepath.Join(d.Path, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// alive reports whether any process is left in the task's cgroup.
func (s cgroupSet) alive() bool { return len(s.pids()) > 0 }

// signal sends sig to every process in the task's cgroup (never to this
// one, which is never in it; but a signal to ourselves would be too late
// a lesson).
func (s cgroupSet) signal(sig syscall.Signal) {
	for _, pid := range s.pids() {
		if pid != os.Getpid() {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// kill SIGKILLs every process in the task's cgroup, including any it
// forks meanwhile: cgroup v2's cgroup.kill does it in the kernel; a
// freezer (v2's cgroup.freeze, v1's freezer.state) holds the processes
// still while each is sent SIGKILL; without either, each listed process
// is killed, and the caller repeats until none is left.
func (s cgroupSet) kill() {
	if len(s) == 0 {
		return
	}
	for _, d := range s {
		if d.V2 && os.WriteFile(filepath.Join(d.Path, "cgroup.kill"), []byte("1"), 0) == nil {
			return
		}
	}
	for _, d := range s {
		var file, frozen, thawed string
		switch {
		case d.V2 && exists(filepath.Join(d.Path, "cgroup.freeze")):
			file, frozen, thawed = "cgroup.freeze", "1", "0"
		case !d.V2 && d.has(ctlFreezer):
			file, frozen, thawed = "freezer.state", "FROZEN", "THAWED"
		default:
			continue
		}
		if os.WriteFile(filepath.Join(d.Path, file), []byte(frozen), 0) != nil {
			continue
		}
		d.waitFrozen(time.Second)
		s.signal(syscall.SIGKILL)
		_ = os.WriteFile(filepath.Join(d.Path, file), []byte(thawed), 0)
		return
	}
	s.signal(syscall.SIGKILL)
}

// waitFrozen waits, up to limit, for a freeze of d to take hold. A
// process in uninterruptible sleep may hold it up; then the kill goes
// ahead anyway, and the caller repeats it if need be.
func (d cgroupDir) waitFrozen(limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if d.V2 {
			if slices.Contains(strings.Split(readString(filepath.Join(d.Path, "cgroup.events")), "\n"), "frozen 1") {
				return
			}
		} else if readString(filepath.Join(d.Path, "freezer.state")) == "FROZEN" {
			return
		}
	}
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// oomKills reports how many of the task's processes the kernel's OOM
// killer killed: memory.events (v2) or memory.oom_control's oom_kill
// (v1, Linux 4.13). Older v1 kernels do not count kills; known is then
// false, and hits is memory.failcnt, how often the task hit its limit.
func (s cgroupSet) oomKills() (kills int64, known bool, hits int64) {
	for _, d := range s {
		if !d.has(ctlMemory) {
			continue
		}
		file := "memory.oom_control"
		if d.V2 {
			file = "memory.events"
		}
		for line := range strings.Lines(readString(filepath.Join(d.Path, file))) {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
				kills, _ = strconv.ParseInt(n, 10, 64)
				return kills, true, 0
			}
		}
		if !d.V2 {
			hits, _ = strconv.ParseInt(readString(filepath.Join(d.Path, "memory.failcnt")), 10, 64)
		}
		return 0, false, hits
	}
	return 0, true, 0
}

// cpuUsage is the task's CPU time so far, from cgroup accounting
// (cpuacct.usage on v1, cpu.stat's usage_usec on v2); ok is false when no
// directory accounts for it.
func (s cgroupSet) cpuUsage() (used time.Duration, ok bool) {
	for _, d := range s {
		switch {
		case d.V2:
			for line := range strings.Lines(readString(filepath.Join(d.Path, "cpu.stat"))) {
				if n, found := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); found {
					us, err := strconv.ParseInt(n, 10, 64)
					return time.Duration(us) * time.Microsecond, err == nil
				}
			}
		case d.has(ctlCPUAcct):
			ns, err := strconv.ParseInt(readString(filepath.Join(d.Path, "cpuacct.usage")), 10, 64)
			return time.Duration(ns), err == nil
		}
	}
	return 0, false
}

// exist reports whether any of the task's cgroup directories is there.
func (s cgroupSet) exist() bool {
	for _, d := range s {
		if exists(d.Path) {
			return true
		}
	}
	return false
}

// remove deletes the task's cgroup directories, once its processes are
// gone. The kernel may still be finishing off the last of them, so a busy
// directory is retried for a while.
func (s cgroupSet) remove() error {
	var errs []error
	for _, d := range s {
		for try := 0; ; try++ {
			err := syscall.Rmdir(d.Path)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || try == 50 {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d.Path, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
