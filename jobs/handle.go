package jobs

import (
	"context"
	"fmt"

	"github.com/computeboard/computeboard/internal/luabatch"
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
	calls := make([]luabatch.Call, len(hs))
	for i, h := range hs {
		calls[i] = luabatch.Call{Keys: []string{s.keys.Job(h.JobID)}, Args: []any{h.Handle, h.Node}}
	}
	errs := make([]error, len(hs))
	for i, cmd := range luabatch.Eval(ctx, s.rdb, scriptHandle, calls) {
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
