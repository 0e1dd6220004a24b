package jobs

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/computeboard/computeboard/blackboard"
)

// Accepting in one step: Accept, PublishAccepted and ConsumeAccepted are
// three round trips per request, each idempotent. For the common case (a
// new request, a new job) IntakeStep gives them as one part of a composed
// Lua script instead: LuaIntake's intake_job. Package broker owns that
// script (it acknowledges the intake message in the same step); this
// package owns the record, the job entry it posts and the consume, and the
// layout of its KEYS and ARGV (lua/intake.lua's header). A request the one
// step cannot finish (a duplicate key, a withdrawn or wrong-typed request
// entry, a job entry left by an earlier refusal) gets nothing written and
// takes the three steps.

//go:embed lua/intake.lua
var luaIntake string

// LuaIntake returns the Lua a script calling intake_job starts with:
// blackboard's lib, this package's lib and intake_job (locals only).
func LuaIntake() string { return blackboard.LuaLib() + luaLib + luaIntake }

// IntakeStep returns the job spec's request would be accepted into, and
// appends intake_job's KEYS and ARGV for it to keys and args (the variable
// part, the record's fields, last). now is the Clock's time when the step
// is built.
func (s *Store) IntakeStep(keys []string, args []any, spec AcceptSpec, now time.Time) (Job, []string, []any, error) {
	fkey, fepoch := s.keys.Job(spec.JobID), ""
	if s.fence.Key != "" {
		fk, fe, err := s.fenceKeys()
		if err != nil {
			return Job{}, keys, args, err
		}
		fkey, fepoch = fk[0], fe
	}
	acc := epoch(now)
	j := newJob(spec, acc)
	e, err := jobEntry(j.JobData)
	if err != nil {
		return Job{}, keys, args, err
	}
	keys = append(keys, s.keys.JobsIdem(), s.keys.Job(spec.JobID), s.keys.JobsActive(), s.keys.Entry(spec.EntryID),
		s.keys.JobIdem(spec.Module, spec.Request.IdempotencyKey), fkey)
	args = append(args, spec.Request.IdempotencyKey, spec.JobID, formatFloat(acc), fepoch, spec.EntryID)
	if keys, args, err = s.board.PostStep(keys, args, e, now); err != nil {
		return Job{}, keys, args, err
	}
	args = appendRecordPairs(args, j)
	if args, err = appendRequest(args, spec); err != nil {
		return Job{}, keys, args, err
	}
	return j, keys, args, nil
}

// IntakeKeys and IntakeArgs are about how many KEYS and ARGV IntakeStep
// appends (ARGV: more with a long record), for callers sizing their slices.
const (
	IntakeKeys = 6 + blackboard.PostStepKeys
	IntakeArgs = 5 + blackboard.PostStepArgs + 28
)

// IntakeReply is what intake_job's reply says.
type IntakeReply struct {
	// Done: the record was created, the job entry posted and the request
	// entry consumed. Count is then the board's entry count after the post
	// (for blackboard.Store.Posted).
	Done  bool
	Count int64
	// Err is ErrFenced (nothing written), or a malformed reply.
	Err error
	// Otherwise nothing was written: the caller takes the three steps.
}

// ParseIntake reads intake_job's reply r.
func (s *Store) ParseIntake(r []any) IntakeReply {
	if len(r) < 2 {
		return IntakeReply{Err: fmt.Errorf("jobs: intake: unexpected reply %v", r)}
	}
	code, _ := r[0].(int64)
	switch code {
	case 1:
		n := int64(0)
		if len(r) > 2 {
			n, _ = r[2].(int64)
		}
		return IntakeReply{Done: true, Count: n}
	case acceptFenced:
		return IntakeReply{Err: s.fencedErr(r[1])}
	}
	return IntakeReply{}
}
