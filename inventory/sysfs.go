package inventory

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
)

// This file reads the Linux text formats discovery needs: NUMA nodes from
// sysfs (node*/cpulist, node*/meminfo) and the process's allowed CPUs from
// /proc/self/status. Every path is under a root the caller chooses, so the
// tests can lay out a fake tree.

// readNUMA lists the NUMA domains under root/sys/devices/system/node that
// have at least one CPU in allowed (nil = every CPU allowed), with their CPU
// lists cut to allowed. A missing node directory (no NUMA support, or no
// sysfs in a container) is no domains and no error.
func readNUMA(root string, allowed []int) ([]NUMADomain, error) {
	dir := filepath.Join(root, "sys", "devices", "system", "node")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inventory: numa: %w", err)
	}
	var out []NUMADomain
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), "node")
		n, err := strconv.Atoi(id)
		if !ok || err != nil || n < 0 {
			continue // has_cpu, online, possible, power, …
		}
		nodeDir := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(nodeDir, "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("inventory: numa node %d: %w", n, err)
		}
		cpus, err := parseCPUList(string(b))
		if err != nil {
			return nil, fmt.Errorf("inventory: numa node %d: cpulist: %w", n, err)
		}
		if allowed != nil {
			cpus = slices.DeleteFunc(cpus, func(c int) bool { _, found := slices.BinarySearch(allowed, c); return !found })
		}
		if len(cpus) == 0 {
			continue // memory-only, or none of its CPUs are ours
		}
		b, err = os.ReadFile(filepath.Join(nodeDir, "meminfo"))
		if err != nil {
			return nil, fmt.Errorf("inventory: numa node %d: %w", n, err)
		}
		kb, err := parseNodeMemTotal(b)
		if err != nil {
			return nil, fmt.Errorf("inventory: numa node %d: meminfo: %w", n, err)
		}
		out = append(out, NUMADomain{ID: n, CPUs: cpus, MemoryMiB: kb / 1024})
	}
	slices.SortFunc(out, func(a, b NUMADomain) int { return a.ID - b.ID })
	return out, nil
}

// readAllowedCPUs returns the CPUs this process may run on, from
// Cpus_allowed_list in root/proc/self/status; nil, nil when the file is not
// there (not Linux, or no /proc).
func readAllowedCPUs(root string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc", "self", "status"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inventory: allowed cpus: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			cpus, err := parseCPUList(v)
			if err != nil {
				return nil, fmt.Errorf("inventory: allowed cpus: %w", err)
			}
			return cpus, nil
		}
	}
	return nil, nil
}

// maxCPUs bounds a CPU number (the kernel's NR_CPUS is at most 8192), so a
// corrupt list cannot make a huge slice.
const maxCPUs = 1 << 16

// parseCPUList parses the kernel's cpulist format ("0-3,8,10-11", possibly
// empty, with a trailing newline) into ascending CPU numbers.
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad cpu %q in %q", lo, s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad range %q in %q", part, s)
			}
		}
		if b >= maxCPUs {
			return nil, fmt.Errorf("cpu %d in %q is past the kernel's limit", b, s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// parseNodeMemTotal reads "Node 0 MemTotal:  16318600 kB" from a node's
// meminfo and returns the kB.
func parseNodeMemTotal(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Node <n> MemTotal: <value> kB
		if len(f) == 5 && f[0] == "Node" && f[2] == "MemTotal:" && f[4] == "kB" {
			kb, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil || kb < 0 {
				return 0, fmt.Errorf("bad MemTotal %q", f[3])
			}
			return kb, nil
		}
	}
	return 0, errors.New("no MemTotal line")
}
