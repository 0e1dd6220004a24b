package jobs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/computeboard/computeboard/wire"
)

// withSide adds to the record h the fields kept beside it that
// transition.lua's reply res carries after it (read_record: one per
// sideFields, nil when absent).
func withSide(h map[string]string, res []any) map[string]string {
	for i, f := range sideFields {
		if len(res) > 2+i {
			if v, ok := res[2+i].(string); ok {
				addSide(h, f, v)
			}
		}
	}
	return h
}

// addSide adds to the record h the value v of its field f kept beside it,
// unless h has f: a value in the HASH wins (lua/lib.lua's set_fields).
func addSide(h map[string]string, f, v string) {
	if _, in := h[f]; !in {
		h[f] = v
	}
}

// transition.lua's reply codes.
const (
	transFenced    = -2 // {-2, epoch}: the fence key holds another epoch
	transNotFound  = -1 // {-1}: no such job
	transConflict  = 0  // {0, status}: the job is not in the expected status
	transDone      = 1  // {1, record}
	transWithdrawn = 2  // {2, record}: a start cancelled the job instead
	transNode      = 3  // {3, node}: the record names another node than Update.ExpectNode
)

// Transition moves job jobID from status from to status to, atomically
// (compare-and-set: of two adapters moving the same job queued → running,
// one gets ErrConflict; with u.ExpectNode the record must also name that
// node), sets u's fields and the timestamps (started_at and attempt+1 when
// the job starts, that is moves to running from another status;
// finished_at on a terminal status; suspended_at with u.Suspend, cleared
// with u.Resume or when the job leaves running), then mirrors the record into the
// job's compute.job entry and its duplicates' entries, and raises
// compute.job.finished when the job ends.
//
// A start (queued → running) whose request entry is retracted or
// superseded, or whose record has cancel_requested, cancels the job in the
// same step instead and fails with ErrWithdrawn. A job that ends leaves
// P:jobs:active; its record and idempotency key expire after
// Config.Retention. ErrNotFound: no such job. ErrFenced: this Fenced
// view's writer was deposed. A refused transition changes nothing.
func (s *Store) Transition(ctx context.Context, jobID string, from, to wire.JobStatus, u Update) (Job, error) {
	j, mirror, err := s.Change(ctx, jobID, from, to, u)
	if err != nil {
		return Job{}, err
	}
	if err := mirror(ctx); err != nil {
		return j, fmt.Errorf("jobs: transition %s: record changed, entry not updated: %w", jobID, err)
	}
	return j, nil
}

// Mirror writes a changed record onto the job's entries (Change).
type Mirror func(ctx context.Context) error

// Change is Transition without the mirror: it changes the record as
// Transition does and returns the job, and the mirror for the caller to
// run when it chooses (once, and before the job's next change is
// mirrored, or the entry would go back). A node agent starts the task
// before it mirrors the start, and reports an end to the scheduler before
// it mirrors the end: the entry is for the modules, and the scheduler and
// the task need not wait a round trip for it. A start the request's
// withdrawal cancelled (ErrWithdrawn) is mirrored here, as Transition
// does. The mirror's error is the job entry's: the record has changed.
func (s *Store) Change(ctx context.Context, jobID string, from, to wire.JobStatus, u Update) (Job, Mirror, error) {
	if !from.Valid() || !to.Valid() {
		return Job{}, nil, fmt.Errorf("jobs: transition %s: invalid status %q → %q", jobID, from, to)
	}
	fkeys, fepoch, err := s.fenceKeys()
	if err != nil {
		return Job{}, nil, fmt.Errorf("jobs: transition %s: %w", jobID, err)
	}
	now := formatFloat(s.now())
	start := to == wire.JobRunning && from != wire.JobRunning
	fields := []any{"updated_at", now}
	if start {
		fields = append(fields, "started_at", now)
	}
	if to.Terminal() {
		fields = append(fields, "finished_at", now)
	}
	switch {
	case u.Suspend && to == wire.JobRunning:
		fields = append(fields, "suspended_at", now)
	case u.Resume || from == wire.JobRunning && to != wire.JobRunning:
		fields = append(fields, "suspended_at", "")
	}
	fields = append(fields, updatePairs(u)...)
	// The script builds the request entry's and the idempotency key's names
	// from the record (same board, same hash slot): a start checks the
	// request was not withdrawn, an end sets the retention of both.
	keys := append([]string{s.keys.Job(jobID), s.keys.JobsActive(), s.keys.Entry(""), s.keys.JobIdemPrefix(), s.keys.JobsUnmirrored()}, fkeys...)
	keep := "-1"
	if s.cfg.Retention >= 0 {
		keep = strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10)
	}
	args := append([]any{jobID, string(from), string(to), flag(to.Terminal()), flag(start), keep, now, fepoch, u.ExpectNode},
		fields...)
	res, err := scriptTransition.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return Job{}, nil, fmt.Errorf("jobs: transition %s: %w", jobID, err)
	}
	var v any
	if len(res) > 1 {
		v = res[1]
	}
	switch code, _ := res[0].(int64); code {
	case transFenced:
		return Job{}, nil, fmt.Errorf("jobs: transition %s %s → %s: %w", jobID, from, to, s.fencedErr(v))
	case transNotFound:
		return Job{}, nil, fmt.Errorf("jobs: transition %s: %w", jobID, ErrNotFound)
	case transConflict:
		return Job{}, nil, fmt.Errorf("jobs: transition %s %s → %s: %w: status is %v", jobID, from, to, ErrConflict, v)
	case transNode:
		return Job{}, nil, fmt.Errorf("jobs: transition %s %s → %s: %w: node is %q, not %q", jobID, from, to, ErrConflict, v, u.ExpectNode)
	case transWithdrawn:
		h := withSide(pairs(v), res)
		j, err := decodeRecord(h)
		if err == nil {
			err = s.mirrorAll(ctx, j.JobData, h)
		}
		if err != nil {
			return Job{}, nil, fmt.Errorf("jobs: transition %s: cancelled at start: %w", jobID, err)
		}
		s.stats.cancelledAtStart.Add(1)
		return Job{}, nil, fmt.Errorf("jobs: transition %s %s → %s: %w", jobID, from, to, ErrWithdrawn)
	}
	h := withSide(pairs(v), res)
	j, err := decodeRecord(h)
	if err != nil {
		return Job{}, nil, fmt.Errorf("jobs: transition %s: %w", jobID, err)
	}
	return j, func(ctx context.Context) error {
		if err := s.mirrorAll(ctx, j.JobData, h); err != nil {
			return err
		}
		if from.Terminal() { // a correction (wire.LegalCorrection)
			s.emitCorrected(ctx, j.JobData, from)
		}
		return nil
	}, nil
}
