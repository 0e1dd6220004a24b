package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// take renames a spare that fits cg (the same v1 hierarchies, with the
// same parents) to cg's v1 paths, writes the limits that differ, and makes
// cg's v2 directory, if any, afresh; false, with nothing made, when there
// is no spare or this fails.
func (sp *Spares) take(cg *Cgroup) bool {
	if sp == nil {
		return false
	}
	v1, _ := byVersion(cg.Dirs)
	sp.mu.Lock()
	i := slices.IndexFunc(sp.free, func(s spare) bool { return fits(s.dirs, v1) })
	if i < 0 {
		sp.mu.Unlock()
		return false
	}
	s := sp.free[i]
	sp.free = slices.Delete(sp.free, i, i+1)
	sp.mu.Unlock()
	for j, d := range s.dirs {
		if err := syscall.Rename(d.Path, v1[j].Path); err != nil {
			// A directory of an earlier attempt at this task is there
			// (EEXIST), say: this spare goes, and Create makes the rest.
			s.dirs[:j].closeFiles() // renamed already: removed below
			_ = v1[:j].Remove()
			_ = s.dirs[j:].Remove()
			return false
		}
	}
	// The spare's open control files come along (byVersion keeps the
	// order of cg.Dirs).
	j := 0
	for i := range cg.Dirs {
		if !cg.Dirs[i].V2 {
			cg.Dirs[i].files = s.dirs[j].files
			j++
		}
	}
	for _, d := range cg.Dirs {
		var err error
		if d.V2 {
			err = d.make(cg)
		} else {
			err = d.configure(cg, &s.set)
		}
		if err != nil {
			_ = cg.Dirs.Remove()
			return false
		}
	}
	return true
}

// byVersion splits dirs into their cgroup v1 directories (the ones that
// can be renamed, so kept) and their v2 ones.
func byVersion(dirs CgroupSet) (v1, v2 CgroupSet) {
	for _, d := range dirs {
		if d.V2 {
			v2 = append(v2, d)
		} else {
			v1 = append(v1, d)
		}
	}
	return v1, v2
}

// fits reports whether a spare's directories can become want's: each of
// the same hierarchy and parent, carrying the same controllers.
func fits(have, want CgroupSet) bool {
	return len(want) > 0 && slices.EqualFunc(have, want, func(h, w CgroupDir) bool {
		return filepath.Dir(h.Path) == filepath.Dir(w.Path) && slices.Equal(h.Controllers, w.Controllers)
	})
}

// keep sets cg's v1 directories aside as a spare, once its task ended
// cleanly, if they qualify (see Spares) and there is room, and removes
// its v2 directory; false leaves them all where they are.
func (sp *Spares) keep(cg *Cgroup) bool {
	v1, v2 := byVersion(cg.Dirs)
	if sp == nil || len(v1) == 0 || !reusable(cg.Dirs) {
		return false
	}
	sp.mu.Lock()
	if sp.closed || len(sp.free) >= sp.max {
		sp.mu.Unlock()
		return false
	}
	sp.seq++
	name := sp.prefix + strconv.FormatUint(sp.seq, 10)
	sp.mu.Unlock()
	s := spare{set: *cg}
	s.set.Dirs = nil
	for _, d := range v1 {
		to := d
		to.Path = filepath.Join(filepath.Dir(d.Path), name)
		if err := syscall.Rename(d.Path, to.Path); err != nil {
			_ = s.dirs.Remove() // the caller removes the rest
			return false
		}
		s.dirs = append(s.dirs, to)
	}
	sp.mu.Lock()
	full := sp.closed || len(sp.free) >= sp.max
	if !full {
		sp.free = append(sp.free, s)
	}
	sp.mu.Unlock()
	errs := []error{v2.Remove()}
	if full {
		errs = append(errs, s.dirs.Remove())
	}
	return errors.Join(errs...) == nil
}

// reusable reports whether an ended task's empty cgroup may serve another
// task: no OOM kill (nor, where kills are not counted, a hit of the
// limit), and little memory still charged to it.
func reusable(dirs CgroupSet) bool {
	kills, known, hits := dirs.OOMKills()
	if kills > 0 || !known && hits > 0 {
		return false
	}
	for _, d := range dirs {
		if !d.Has(CtlMemory) {
			continue
		}
		file := "memory.usage_in_bytes"
		if d.V2 {
			file = "memory.current"
		}
		b, err := readCtl(filepath.Join(d.Path, file))
		if err != nil {
			return false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
		if err != nil || n > SpareMaxCharge {
			return false
		}
	}
	return true
}

// Close removes every spare, and keeps none from now on.
func (sp *Spares) Close() error {
	if sp == nil {
		return nil
	}
	sp.mu.Lock()
	free := sp.free
	sp.free, sp.closed = nil, true
	sp.mu.Unlock()
	var errs []error
	for _, s := range free {
		errs = append(errs, s.dirs.Remove())
	}
	return errors.Join(errs...)
}

// PruneSpares removes the spare cgroups in dir (a v1 hierarchy's parent of
// task cgroups) whose keeper is gone: a server killed before it could
// remove its own. It returns how many it removed.
func PruneSpares(dir string) (removed int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	var errs []error
	for _, e := range ents {
		pid, ticks, ok := SpareOwner(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if st, _, t, err := ProcStat(pid); err == nil && !Dead(st) && t == ticks {
			continue // its keeper lives, and may be taking it
		}
		if err := (CgroupSet{{Path: filepath.Join(dir, e.Name())}}).Remove(); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
