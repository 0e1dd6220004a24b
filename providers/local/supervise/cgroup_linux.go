package supervise

import (
	"errors"
	"fmt"
	"io"
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

// Create makes the task's cgroup directories and sets its limits. A
// directory left from an earlier attempt is reused if it is empty.
func (cg *Cgroup) Create() error {
	for _, d := range cg.Dirs {
		if err := d.make(cg); err != nil {
			_ = cg.Dirs.Remove()
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// make makes d, or reuses it if it is there and empty, and writes cg's
// limits into it.
func (d CgroupDir) make(cg *Cgroup) error {
	err := os.Mkdir(d.Path, 0o755)
	if errors.Is(err, fs.ErrExist) && (CgroupSet{d}).Alive() {
		return fmt.Errorf("%s already holds processes", d.Path)
	} else if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return d.configure(cg, nil)
}

// configure writes cg's limits into d, for the controllers d carries. prev
// is what d carries already (a spare's), nil for a new directory: only
// what differs from it is written, and a limit d carries that cg lifts or
// changes is lifted first, as the kernel wants (a v1 memsw limit may not
// go below the memory limit, and a CFS period not be changed under a
// quota the parent would refuse).
func (d CgroupDir) configure(cg, prev *Cgroup) error {
	set := func(file, value string) error {
		if err := d.write(file, value); err != nil {
			return fmt.Errorf("set %s to %q: %w", file, value, err)
		}
		return nil
	}
	var errs []error
	// A v1 cpuset left "" holds a copy of its parent's, which an operator
	// may have changed since a spare took it: copied again.
	inherits := !d.V2 && (cg.CPUs == "" || cg.Mems == "")
	if d.Has(CtlCPUSet) && (prev == nil || prev.CPUs != cg.CPUs || prev.Mems != cg.Mems || inherits) {
		cpus, mems := cg.CPUs, cg.Mems
		if !d.V2 {
			// v1 wants both set before a process may join; "" is the parent's.
			parent := filepath.Dir(d.Path)
			if cpus == "" {
				b, err := readCtl(filepath.Join(parent, "cpuset.cpus"))
				cpus, errs = strings.TrimSpace(b), append(errs, err)
			}
			if mems == "" {
				b, err := readCtl(filepath.Join(parent, "cpuset.mems"))
				mems, errs = strings.TrimSpace(b), append(errs, err)
			}
		}
		if prev != nil && !d.V2 { // a spare: what it holds already is not written again
			if cur, err := d.read("cpuset.cpus"); err == nil && strings.TrimSpace(cur) == cpus {
				cpus = ""
			}
			if cur, err := d.read("cpuset.mems"); err == nil && strings.TrimSpace(cur) == mems {
				mems = ""
			}
		}
		if cpus != "" {
			errs = append(errs, set("cpuset.cpus", cpus))
		}
		if mems != "" {
			errs = append(errs, set("cpuset.mems", mems))
		}
	}
	// A spare's quota is written again even when it is the same: writing it
	// refills the group's CFS bandwidth for the period. Its earlier tasks'
	// run time in the current period counts against the group, so a task
	// that took a spare whose last task had spent its quota was throttled
	// at its start until the period ended (up to 100 ms), where a new
	// cgroup starts with its whole quota.
	// (Spares are v1 directories only.)
	sameCPU := prev != nil && prev.CPUQuota == cg.CPUQuota && prev.CPUPeriod == cg.CPUPeriod
	switch {
	case !d.Has(CtlCPU):
	case sameCPU && cg.CPUQuota > 0 && !d.V2:
		errs = append(errs, set("cpu.cfs_quota_us", strconv.FormatInt(cg.CPUQuota, 10)))
	case !sameCPU:
		if prev != nil && prev.CPUQuota > 0 {
			if d.V2 {
				errs = append(errs, set("cpu.max", "max"))
			} else {
				errs = append(errs, set("cpu.cfs_quota_us", "-1"))
			}
		}
		if cg.CPUQuota > 0 {
			if d.V2 {
				errs = append(errs, set("cpu.max", fmt.Sprintf("%d %d", cg.CPUQuota, cg.CPUPeriod)))
			} else {
				errs = append(errs, set("cpu.cfs_period_us", strconv.FormatInt(cg.CPUPeriod, 10)),
					set("cpu.cfs_quota_us", strconv.FormatInt(cg.CPUQuota, 10)))
			}
		}
	}
	if d.Has(CtlMemory) && (prev == nil || prev.MemoryBytes != cg.MemoryBytes) {
		memsw := !d.V2 && Exists(filepath.Join(d.Path, "memory.memsw.limit_in_bytes"))
		if prev != nil && prev.MemoryBytes > 0 {
			switch {
			case d.V2:
				errs = append(errs, set("memory.max", "max"))
			case memsw: // memsw first: it may not go below the memory limit
				errs = append(errs, set("memory.memsw.limit_in_bytes", "-1"), set("memory.limit_in_bytes", "-1"))
			default:
				errs = append(errs, set("memory.limit_in_bytes", "-1"))
			}
		}
		if cg.MemoryBytes > 0 {
			limit := strconv.FormatInt(cg.MemoryBytes, 10)
			switch {
			case d.V2:
				errs = append(errs, set("memory.max", limit))
				if Exists(filepath.Join(d.Path, "memory.swap.max")) {
					errs = append(errs, set("memory.swap.max", "0"))
				}
			default:
				// memsw (memory plus swap) may not go below the memory limit,
				// so it is set second.
				errs = append(errs, set("memory.limit_in_bytes", limit))
				if memsw {
					errs = append(errs, set("memory.memsw.limit_in_bytes", limit))
				} else {
					errs = append(errs, set("memory.swappiness", "0"))
				}
			}
		}
	}
	if prev != nil && !d.V2 && d.Has(CtlCPUAcct) {
		// The spare's count is its earlier tasks': CPUUsage is this one's.
		errs = append(errs, set("cpuacct.usage", "0"))
	}
	return errors.Join(errs...)
}

// StartIn starts cmd so that the new process is inside cg before it runs
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
// thread, before StartIn returns.
func StartIn(cmd *exec.Cmd, cg *Cgroup, started func()) error {
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
	var v1 []CgroupDir
	for _, d := range cg.Dirs {
		if !d.V2 {
			v1 = append(v1, d)
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
		tid := strconv.Itoa(syscall.Gettid())
		for _, d := range v1 {
			if err = d.write("tasks", tid); err != nil {
				err = fmt.Errorf("cgroup: enter %s: %w", d.Path, err)
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

// Pids lists the processes in the task's cgroup (zombies are not listed).
func (s CgroupSet) Pids() []int {
	var pids []int
	for _, d := range s {
		b, err := readCtl(filepath.Join(d.Path, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(b) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// Alive reports whether any process is left in the task's cgroup.
func (s CgroupSet) Alive() bool { return len(s.Pids()) > 0 }

// Signal sends sig to every process in the task's cgroup (never to this
// one, which is never in it; but a signal to ourselves would be too late
// a lesson).
func (s CgroupSet) Signal(sig syscall.Signal) {
	for _, pid := range s.Pids() {
		if pid != os.Getpid() {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// Kill SIGKILLs every process in the task's cgroup, including any it
// forks meanwhile: cgroup v2's cgroup.kill does it in the kernel; a
// freezer (v2's cgroup.freeze, v1's freezer.state) holds the processes
// still while each is sent SIGKILL; without either, each listed process
// is killed, and the caller repeats until none is left.
func (s CgroupSet) Kill() {
	if len(s) == 0 {
		return
	}
	for _, d := range s {
		if d.V2 && writeCtl(filepath.Join(d.Path, "cgroup.kill"), "1") == nil {
			return
		}
	}
	for _, d := range s {
		var file, frozen, thawed string
		switch {
		case d.V2 && Exists(filepath.Join(d.Path, "cgroup.freeze")):
			file, frozen, thawed = "cgroup.freeze", "1", "0"
		case !d.V2 && d.Has(CtlFreezer):
			file, frozen, thawed = "freezer.state", "FROZEN", "THAWED"
		default:
			continue
		}
		if writeCtl(filepath.Join(d.Path, file), frozen) != nil {
			continue
		}
		d.waitFrozen(time.Second)
		s.Signal(syscall.SIGKILL)
		_ = writeCtl(filepath.Join(d.Path, file), thawed)
		return
	}
	s.Signal(syscall.SIGKILL)
}

// waitFrozen waits, up to limit, for a freeze of d to take hold. A
// process in uninterruptible sleep may hold it up; then the kill goes
// ahead anyway, and the caller repeats it if need be.
func (d CgroupDir) waitFrozen(limit time.Duration) {
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
	b, _ := readCtl(path)
	return strings.TrimSpace(b)
}

// writeCtl writes value to the cgroup control file at path, and readCtl
// reads one, with plain system calls: an *os.File (os.WriteFile,
// os.ReadFile) first offers each descriptor to the runtime's poller,
// which cgroupfs files refuse, and a task's start and end touch a dozen
// of them (a tenth of a supervisor server's CPU time, with the rest of
// the os.File's upkeep, in the e2e bench's profile).
func writeCtl(path, value string) error {
	fd, err := openCtl(path, true)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return writeFd(fd, path, value)
}

func readCtl(path string) (string, error) {
	fd, err := openCtl(path, false)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	return readFd(fd, path)
}

// openCtl opens the control file at path, for writing or for reading.
func openCtl(path string, write bool) (int, error) {
	mode := syscall.O_RDONLY
	if write {
		mode = syscall.O_WRONLY
	}
	fd, err := retryEINTR(func() (int, error) { return syscall.Open(path, mode|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// writeFd writes value to the control file open as fd, from its start
// (a descriptor kept open, ctlFiles, is written again and again).
func writeFd(fd int, path, value string) error {
	b := []byte(value)
	for off := 0; off < len(b); {
		n, err := retryEINTR(func() (int, error) { return syscall.Pwrite(fd, b[off:], int64(off)) })
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		off += n
	}
	return nil
}

// readFd reads the whole of the control file open as fd, from its start.
func readFd(fd int, path string) (string, error) {
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := retryEINTR(func() (int, error) { return syscall.Pread(fd, buf, int64(len(out))) })
		if err != nil {
			return "", &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return string(out), nil
		}
		out = append(out, buf[:n]...)
	}
}

// read reads d's control file, through d.files when d has them (and the
// file is no process list).
func (d CgroupDir) read(file string) (string, error) {
	if fd, ok := d.files.open(d.Path, file, false); ok {
		return readFd(fd, filepath.Join(d.Path, file))
	}
	return readCtl(filepath.Join(d.Path, file))
}

// write writes value to d's control file, through d.files when d has
// them.
func (d CgroupDir) write(file, value string) error {
	if fd, ok := d.files.open(d.Path, file, true); ok {
		return writeFd(fd, filepath.Join(d.Path, file), value)
	}
	return writeCtl(filepath.Join(d.Path, file), value)
}

// open returns the descriptor of dir's control file, opened now if need
// be; false: f is nil or closed, the file is a process list for reading
// (see ctlFiles), or it cannot be opened (the caller's own open says why).
func (f *ctlFiles) open(dir, file string, write bool) (int, bool) {
	if f == nil || file == "cgroup.procs" || file == "tasks" && !write {
		return 0, false
	}
	k := ctlKey{file, write}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, false
	}
	if fd, ok := f.fds[k]; ok {
		return fd, true
	}
	fd, err := openCtl(filepath.Join(dir, file), write)
	if err != nil {
		return 0, false
	}
	if f.fds == nil {
		f.fds = make(map[ctlKey]int)
	}
	f.fds[k] = fd
	return fd, true
}

// close closes every descriptor f holds, for good.
func (f *ctlFiles) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fd := range f.fds {
		_ = syscall.Close(fd)
	}
	f.fds, f.closed = nil, true
}

// closeFiles closes the control files s's directories hold open: before
// they are removed, or when they are left behind.
func (s CgroupSet) closeFiles() {
	for _, d := range s {
		d.files.close()
	}
}

// keepFiles gives each v1 directory of s that has none a ctlFiles of its
// own (a supervisor server's: Spares.Create).
func (s CgroupSet) keepFiles() {
	for i := range s {
		if !s[i].V2 && s[i].files == nil {
			s[i].files = &ctlFiles{}
		}
	}
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// OOMKills reports how many of the task's processes the kernel's OOM
// killer killed: memory.events (v2) or memory.oom_control's oom_kill
// (v1, Linux 4.13). Older v1 kernels do not count kills; known is then
// false, and hits is memory.failcnt, how often the task hit its limit.
func (s CgroupSet) OOMKills() (kills int64, known bool, hits int64) {
	for _, d := range s {
		if !d.Has(CtlMemory) {
			continue
		}
		file := "memory.oom_control"
		if d.V2 {
			file = "memory.events"
		}
		b, _ := d.read(file)
		for line := range strings.Lines(b) {
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

// CPUUsage is the task's CPU time so far, from cgroup accounting
// (cpuacct.usage on v1, cpu.stat's usage_usec on v2); ok is false when no
// directory accounts for it.
func (s CgroupSet) CPUUsage() (used time.Duration, ok bool) {
	for _, d := range s {
		switch {
		case d.V2:
			for line := range strings.Lines(readString(filepath.Join(d.Path, "cpu.stat"))) {
				if n, found := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); found {
					us, err := strconv.ParseInt(n, 10, 64)
					return time.Duration(us) * time.Microsecond, err == nil
				}
			}
		case d.Has(CtlCPUAcct):
			b, _ := d.read("cpuacct.usage")
			ns, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
			return time.Duration(ns), err == nil
		}
	}
	return 0, false
}

// Exist reports whether any of the task's cgroup directories is there.
func (s CgroupSet) Exist() bool {
	for _, d := range s {
		if Exists(d.Path) {
			return true
		}
	}
	return false
}

// Remove deletes the task's cgroup directories, once its processes are
// gone. The kernel may still be finishing off the last of them, so a busy
// directory is retried for a while.
func (s CgroupSet) Remove() error {
	s.closeFiles()
	var errs []error
	for _, d := range s {
		// It is on the way from a task's exit to its outcome, so the
		// retries start short: the kernel is usually done within a
		// millisecond or two.
		deadline := time.Now().Add(time.Second)
		for wait := 500 * time.Microsecond; ; wait = min(2*wait, 20*time.Millisecond) {
			err := syscall.Rmdir(d.Path)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d.Path, err))
				break
			}
			time.Sleep(wait)
		}
	}
	return errors.Join(errs...)
}
