package jobs

import (
	"context"
	"fmt"
)

// HandleSet is one provider handle to store: the job, the node that
// started it, and the handle as JSON.
type HandleSet struct {
	JobID, Node, Handle string
}

// SetHandles stores provider handles on running jobs' records in one
// pipeline, without a transition (the job entry does not mirror the
// handle). errs[i] is nil when stored, ErrConflict when the job is no
// longer running on that node (or its record is gone), or a Redis error.
func (s *Store) SetHandles(ctx context.Context, hs []HandleSet) []error {
	calls := make([]scriptCall, len(hs))
	for i, h := range hs {
		calls[i] = scriptCall{keys: []string{s.keys.Job(h.JobID)}, args: []any{h.Handle, h.Node}}
	}
	errs := make([]error, len(hs))
	for i, cmd := range s.evalBatch(ctx, scriptHandle, calls) {
		n, err := cmd.Int()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("jobs: set handle %s: %w", hs[i].JobID, err)
		case n != 1:
			errs[i] = fmt.Errorf("jobs: set handle %s: %w: not running on %s", hs[i].JobID, ErrConflict, hs[i].Node)
		}
	}
	return errs
}
