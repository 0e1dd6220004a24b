package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/computeboard/computeboard/providers/local/supervise"
)

// Prune removes the directories of tasks that ended before olderThan, and
// returns how many it removed. The adapter calls it periodically with its
// retention (say, now minus 7 days); a pruned task's handle is unknown
// afterwards (Poll returns providers.ErrUnknownHandle).
//
// A task directory goes when its exit record says the task finished
// before olderThan. One without an exit record goes only if the
// directory itself was last changed before olderThan and no process of
// the task lives: it never started, or it is lost (its supervisor, or the
// adapter watching it, died without recording an outcome). Prune never
// touches a task this instance is starting or running, a running task of
// another instance, nor a directory whose state record names another
// provider. Other entries in WorkDir are left alone.
//
// The cgroup of every task that has ended or is lost (or is pruned) is
// removed too, with whatever processes are left in it, if its supervisor
// could not remove it; and so are the spare cgroups (supervise.Spares) of
// a supervisor server that died without removing them.
//
// Errors removing one directory do not stop the others; they are returned
// together, after the count.
func (p *Provider) Prune(ctx context.Context, olderThan time.Time) (removed int, err error) {
	ents, err := os.ReadDir(p.workDir)
	if err != nil {
		return 0, fmt.Errorf("local: prune: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			errs = append(errs, context.Cause(ctx))
			break
		}
		id := e.Name()
		if !e.IsDir() || !validID.MatchString(id) {
			continue
		}
		p.mu.Lock()
		busy := p.tasks[id] != nil || p.starting[id]
		p.mu.Unlock()
		if busy {
			continue
		}
		dir := p.taskDir(id)
		if !p.expired(dir, olderThan) {
			if p.ended(dir) {
				// A cgroup its supervisor could not remove goes now.
				if err := clearCgroup(dir); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		// The directory holds the only record of the task's cgroup, so it
		// stays until the cgroup is gone.
		if err := clearCgroup(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if p.cgroups != nil {
		for _, h := range p.cgroups.hierarchies {
			if _, err := supervise.PruneSpares(h.base); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("local: prune: %w", err)
	}
	return removed, nil
}

// expired reports whether the task directory dir may be pruned at cutoff
// olderThan (see Prune).
func (p *Provider) expired(dir string, olderThan time.Time) bool {
	if ex, err := supervise.ReadExit(dir); err == nil {
		finished := ex.FinishedAt
		if finished.IsZero() {
			fi, err := os.Stat(filepath.Join(dir, supervise.FileExit))
			if err != nil {
				return false
			}
			finished = fi.ModTime()
		}
		return finished.Before(olderThan)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.ModTime().Before(olderThan) {
		return false
	}
	rec, err := supervise.ReadState(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true // never started
	case err != nil:
		return false // unreadable: someone should look at it
	case rec.Provider != p.name:
		return false
	}
	live := identify(rec)
	if live.leader != 0 || live.supervisor {
		return false
	}
	// The outcome may have been published since we first looked.
	_, err = supervise.ReadExit(dir)
	return errors.Is(err, fs.ErrNotExist)
}

// ended reports whether the task in dir has ended: it has an outcome, or
// it is lost (none of its processes the state record names lives).
func (p *Provider) ended(dir string) bool {
	if supervise.Exists(filepath.Join(dir, supervise.FileExit)) {
		return true
	}
	rec, err := supervise.ReadState(dir)
	if err != nil || rec.Provider != p.name || len(rec.Cgroups) == 0 || rec.StartTicks == 0 || rec.BootID == "" {
		return false // only a task whose identity can be checked is known to be lost
	}
	live := identify(rec)
	return live.leader == 0 && !live.supervisor
}

// clearCgroup removes the cgroup recorded in the state record of task
// directory dir, killing whatever is left in it. The caller has made sure
// the task has ended: anything still in its cgroup is left over.
func clearCgroup(dir string) error {
	rec, err := supervise.ReadState(dir)
	if err != nil || !rec.Cgroups.Exist() {
		return nil
	}
	if rec.Cgroups.Alive() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = supervise.Drain(ctx, supervise.TaskProcs{Cgroup: rec.Cgroups}, 0)
	}
	return rec.Cgroups.Remove()
}
