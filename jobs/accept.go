package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/luabatch"
	"github.com/computeboard/computeboard/wire"
)

// AcceptSpec is one request to make a job of: what its record is built
// from.
type AcceptSpec struct {
	JobID     string       // the job's id: wire.JobID(EntryID)
	EntryID   string       // the compute.request entry
	Module    string       // the request's source module: its idempotency key's scope
	Request   wire.Request // decoded, defaults filled
	Submitted float64      // the request entry's timestamp, epoch seconds
	// RequestData is the request entry's data as posted, when the caller
	// has it (the broker does: the intake message carries it). The record
	// then keeps it (field request_data) instead of Request encoded with
	// its defaults (field request): decodeRecord derives the defaults
	// again from the record's own fields. It must be the data Request was
	// decoded from.
	RequestData json.RawMessage
}

// AcceptResult is the outcome of accepting one AcceptSpec. At most one of
// Created, Withdrawn, WrongType and Err says what happened; with none of
// them the request's key already had a job, which Job is (this request's,
// on a redelivery, or another request's, for a duplicate key).
type AcceptResult struct {
	// Job is the job the request's idempotency key maps to; zero when
	// Withdrawn, WrongType or Err is set.
	Job Job
	// Created: the record was created by this call.
	Created bool
	// Withdrawn is the request entry's status (retracted, superseded or
	// expired) when the record would have been created: no record was
	// made, and none will be for this request.
	Withdrawn blackboard.Status
	// WrongType is the Redis type the request entry key holds instead of
	// a HASH: no record was made (nothing could read or consume it).
	WrongType string
	// Err: the step failed (ErrFenced: a Fenced view's writer was
	// deposed); nothing is known of the record.
	Err error
}

// accept.lua's reply codes.
const (
	acceptFenced    = -3 // {-3, epoch}: the fence key holds another epoch
	acceptWrongType = -2 // {-2, type}: the request entry key is not a HASH
	acceptWithdrawn = -1 // {-1, status}: the request entry is retracted, superseded or expired
	acceptExisting  = 0  // {0, job_id}: the idempotency key already has a job
	acceptCreated   = 1  // {1, job_id}: the record was created now
)

// Accept creates the job record of spec's request, once per idempotency
// key of its source module (P:job:<id>, the module's key, P:jobs:active),
// in one Lua step that also reads the request entry's status: a request
// retracted, superseded or expired meanwhile gets no record (Withdrawn),
// so a withdrawn request never becomes a job that could start. A key that
// already maps to a job creates nothing and returns that job with Created
// false. The error is the result's Err.
//
// Accept is the first of a request's three acceptance steps; the others
// are PublishAccepted (the job entry) and ConsumeAccepted (the request
// entry consumed). Each is idempotent, so a caller that crashed between
// them completes them on a second try without repeating any.
func (s *Store) Accept(ctx context.Context, spec AcceptSpec) (AcceptResult, error) {
	r := s.AcceptBatch(ctx, []AcceptSpec{spec})[0]
	return r, r.Err
}

// AcceptBatch is Accept for each of specs, result i for specs[i], in two
// round trips: one pipeline of accept.lua calls, then one of record reads
// for the keys that already had a job. Specs with the same module and
// idempotency key behave as successive Accepts: the first creates the
// job, the others get it with Created false. A failed spec does not hold
// up the others.
func (s *Store) AcceptBatch(ctx context.Context, specs []AcceptSpec) []AcceptResult {
	res := make([]AcceptResult, len(specs))
	fail := func(i int, err error) {
		res[i] = AcceptResult{Err: fmt.Errorf("jobs: accept %s: %w", specs[i].JobID, err)}
	}
	fkeys, fepoch, ferr := s.fenceKeys()
	now := s.now()
	var live []int
	var calls []luabatch.Call
	for i, spec := range specs {
		if ferr != nil {
			fail(i, ferr)
			continue
		}
		j, call, err := s.acceptCall(spec, now, fkeys, fepoch)
		if err != nil {
			fail(i, err)
			continue
		}
		res[i].Job = j
		live, calls = append(live, i), append(calls, call)
	}
	var lookup []int
	for k, cmd := range luabatch.Eval(ctx, s.rdb, scriptAccept, calls) {
		i := live[k]
		r, err := cmd.Slice()
		if err != nil {
			fail(i, fmt.Errorf("create job record: %w", err))
			continue
		}
		var code int64
		var v string
		if len(r) >= 2 {
			code, _ = r[0].(int64)
			v, _ = r[1].(string)
		}
		switch code {
		case acceptCreated:
			res[i].Created = true
		case acceptWithdrawn:
			res[i] = AcceptResult{Withdrawn: blackboard.Status(v)}
		case acceptWrongType:
			res[i] = AcceptResult{WrongType: v}
		case acceptFenced:
			fail(i, s.fencedErr(v))
		default:
			res[i].Job.JobID = v
			lookup = append(lookup, i)
		}
	}
	if len(lookup) == 0 {
		return res
	}
	hs := make([]recordCmds, len(lookup))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range lookup {
			hs[k] = s.readRecord(ctx, p, res[i].Job.JobID)
		}
		return nil
	})
	for k, i := range lookup {
		id := res[i].Job.JobID
		h, err := hs[k].hash()
		if err != nil {
			res[i] = AcceptResult{Err: fmt.Errorf("jobs: get %s: %w", id, err)}
			continue
		}
		if res[i].Job, err = jobFromHash(id, h); err != nil {
			res[i] = AcceptResult{Err: err}
		}
	}
	return res
}

// acceptCall builds accept.lua's call for spec and the record it creates.
func (s *Store) acceptCall(spec AcceptSpec, now float64, fkeys []string, fepoch string) (Job, luabatch.Call, error) {
	j := newJob(spec, now)
	args := append([]any{spec.Request.IdempotencyKey, spec.JobID, formatFloat(now), fepoch}, recordPairs(j)...)
	args, err := appendRequest(args, spec)
	if err != nil {
		return Job{}, luabatch.Call{}, err
	}
	keys := append([]string{s.keys.JobsIdem(), s.keys.Job(spec.JobID), s.keys.JobsActive(), s.keys.Entry(spec.EntryID),
		s.keys.JobIdem(spec.Module, spec.Request.IdempotencyKey)}, fkeys...)
	return j, luabatch.Call{Keys: keys, Args: args}, nil
}

// newJob is the record spec's request is accepted into at now (epoch
// seconds): queued, version 0.
func newJob(spec AcceptSpec, now float64) Job {
	sub := spec.Submitted
	return Job{
		JobData: wire.JobData{
			JobID: spec.JobID, RequestEntryID: spec.EntryID, IdempotencyKey: spec.Request.IdempotencyKey,
			Account: spec.Request.Account, Priority: spec.Request.Priority, Status: wire.JobQueued,
			SubmittedAt: &sub,
		},
		Module: spec.Module, AcceptedAt: now, UpdatedAt: now, Request: spec.Request,
	}
}

// appendRequest appends the record's copy of spec's request: the data as
// posted (request_data) when spec has it, else the decoded request with its
// defaults (request).
func appendRequest(args []any, spec AcceptSpec) ([]any, error) {
	if len(spec.RequestData) > 0 {
		return append(args, "request_data", string(spec.RequestData)), nil
	}
	req, err := json.Marshal(spec.Request)
	if err != nil {
		return nil, err
	}
	return append(args, "request", string(req)), nil
}
