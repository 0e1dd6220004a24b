package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/computeboard/computeboard/providers/local/supervise"
)

// v2Controllers are the cgroup v2 controllers a task cgroup uses.
var v2Controllers = []string{supervise.CtlCPU, supervise.CtlCPUSet, supervise.CtlMemory}

// v1Controllers are the cgroup v1 controllers a task cgroup uses, each
// where cgroup v2 does not offer it.
var v1Controllers = []string{supervise.CtlCPU, supervise.CtlCPUAcct, supervise.CtlCPUSet, supervise.CtlMemory, supervise.CtlFreezer}

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
		covered[supervise.CtlFreezer] = true // cgroup.kill, or cgroup.freeze
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
		if err := makeV1Parent(m.point, rel, slices.Contains(m.controllers, supervise.CtlCPUSet)); err != nil {
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
			case c == supervise.CtlCPU && (hr.v2 || supervise.Exists(filepath.Join(hr.base, "cpu.cfs_quota_us"))):
				h.conf.CPU = true
			case c == supervise.CtlMemory:
				h.conf.Memory = true
			case c == supervise.CtlCPUSet:
				h.conf.CPUSet = true
			case c == supervise.CtlFreezer:
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
	if !supervise.Exists(filepath.Join(hr.base, "cgroup.kill")) && !supervise.Exists(filepath.Join(hr.base, "cgroup.freeze")) {
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
