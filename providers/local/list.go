package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

var _ providers.Lister = (*Provider)(nil)

// Tasks lists the tasks with a state record in the work directory (each
// task's directory is this node's start log: its state record is written
// before Start returns, and stays until Prune removes the directory) that
// are running or ended at or after since, with the labels each was started
// with and its status as Poll reports it. A directory without a state
// record (a start cut short) or recorded by another provider is skipped;
// an unreadable one is an error, after the others are listed.
//
// A directory last changed before since that holds an outcome is passed
// over on a stat (the outcome is published into it when the task ends), so
// a work directory of a week's tasks costs a stat each.
func (p *Provider) Tasks(ctx context.Context, since time.Time) ([]providers.TaskRecord, error) {
	ents, err := os.ReadDir(p.workDir)
	if err != nil {
		return nil, fmt.Errorf("local: tasks: %w", err)
	}
	var out []providers.TaskRecord
	var errs []error
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		id := e.Name()
		if !e.IsDir() || !validID.MatchString(id) {
			continue
		}
		dir := p.taskDir(id)
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		old := fi.ModTime().Before(since)
		if old && supervise.Exists(filepath.Join(dir, supervise.FileExit)) {
			continue
		}
		rec, err := supervise.ReadState(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		case rec.Provider != p.name || rec.TaskID != id:
			continue
		}
		h := providers.Handle{Provider: p.name, ID: id}
		st, err := p.Poll(ctx, h)
		if err != nil {
			if !errors.Is(err, providers.ErrUnknownHandle) {
				errs = append(errs, err)
			}
			continue
		}
		switch {
		case !st.State.Terminal():
		case !st.FinishedAt.IsZero() && st.FinishedAt.Before(since):
			continue
		case st.FinishedAt.IsZero() && old:
			continue // lost before since
		}
		out = append(out, providers.TaskRecord{Handle: h, Labels: rec.Labels, Note: rec.Note, Status: st})
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("local: tasks: %w", err)
	}
	return out, nil
}
