package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// Job is the durable job record P:job:<id>: the compute.job entry's data
// plus what the broker and adapter need to recover after a restart. The
// record is the source of truth; the entry mirrors it after each change.
type Job struct {
	wire.JobData
	Module          string       `json:"module"`           // the request's source_module
	AcceptedAt      float64      `json:"accepted_at"`      // epoch seconds
	UpdatedAt       float64      `json:"updated_at"`       // epoch seconds of the last change
	CancelRequested bool         `json:"cancel_requested"` // the poster retracted the request after acceptance
	Version         int64        `json:"version"`          // transitions so far
	Request         wire.Request `json:"request"`          // the decoded request
}

// JobUpdate holds the record fields a transition may set; zero values are
// left alone.
type JobUpdate struct {
	Node        string
	StdoutPath  string
	StderrPath  string
	ExitCode    *int
	Error       *wire.JobError
	ReasonCode  wire.Code
	Explanation json.RawMessage
}

// acceptRecord is Accept's step 1 (accept.lua). A request whose entry was
// retracted, superseded or expired meanwhile gets no record: the error is
// then a *withdrawn (see finishWithdrawn).
func (b *Broker) acceptRecord(ctx context.Context, d *Delivery) (Job, bool, error) {
	j, call, err := b.acceptCall(d)
	if err != nil {
		return Job{}, false, err
	}
	res, err := scriptAccept.Run(ctx, b.rdb, call.keys, call.args...).Slice()
	if err != nil {
		return Job{}, false, fmt.Errorf("create job record: %w", err)
	}
	jobID, code := acceptReply(res)
	switch code {
	case acceptCreated:
		return j, true, nil
	case acceptWithdrawn:
		return Job{}, false, &withdrawn{status: blackboard.Status(jobID)}
	case acceptWrongType:
		return Job{}, false, &withdrawn{status: blackboard.Status(wrongTypePrefix + jobID)}
	}
	j, err = b.GetJob(ctx, jobID)
	return j, false, err
}

// withdrawn is accept.lua's refusal: the request entry's status when the
// record would have been created (retracted, superseded or expired), or
// wrongTypePrefix and the type its key holds instead of a HASH.
type withdrawn struct{ status blackboard.Status }

func (w *withdrawn) Error() string { return "request entry " + string(w.status) + " before it started" }

// finishWithdrawn ends a request that accept.lua refused, as Next does when
// its status re-read finds the same: cancelled (retracted, superseded) or
// expired, job entry, entry status and ack. It returns the job as it ends:
// the job entry's data, in its final status.
func (b *Broker) finishWithdrawn(ctx context.Context, d *Delivery, st blackboard.Status) (Job, error) {
	var jd wire.JobData
	var err error
	if typ, ok := strings.CutPrefix(string(st), wrongTypePrefix); ok {
		jd, err = b.refuseWrongType(ctx, d, typ)
	} else if st == blackboard.StatusExpired {
		jd, err = b.expireJob(ctx, d)
	} else {
		jd, err = b.cancelQueuedJob(ctx, d, "request entry "+string(st)+" before it started")
	}
	if err != nil {
		return Job{}, err
	}
	return Job{JobData: jd, Module: d.Module, Request: d.Request}, nil
}

// acceptCall builds accept.lua's call for d and the record it creates.
func (b *Broker) acceptCall(d *Delivery) (Job, scriptCall, error) {
	now := epoch(b.cfg.Clock.Now())
	req, err := json.Marshal(d.Request)
	if err != nil {
		return Job{}, scriptCall{}, err
	}
	sub := d.Entry.Timestamp
	j := Job{
		JobData: wire.JobData{
			JobID: d.JobID, RequestEntryID: d.EntryID, IdempotencyKey: d.Request.IdempotencyKey,
			Account: d.Request.Account, Priority: d.Request.Priority, Status: wire.JobQueued,
			SubmittedAt: &sub,
		},
		Module: d.Module, AcceptedAt: now, UpdatedAt: now, Request: d.Request,
	}
	fields := recordPairs(j)
	fields = append(fields, "request", string(req))
	args := append([]any{d.Request.IdempotencyKey, d.JobID, formatFloat(now)}, fields...)
	return j, scriptCall{keys: []string{b.keys.JobsIdem(), b.keys.Job(d.JobID), b.keys.JobsActive(), b.keys.Entry(d.EntryID),
		b.keys.JobIdem(d.Module, d.Request.IdempotencyKey)}, args: args}, nil
}

// idemJob returns the job id d's module's idempotency key maps to (a key
// of an old board: in the P:jobs:idem HASH), or redis.Nil when none.
func (b *Broker) idemJob(ctx context.Context, d *Delivery) (string, error) {
	id, err := b.rdb.Get(ctx, b.keys.JobIdem(d.Module, d.Request.IdempotencyKey)).Result()
	if errors.Is(err, redis.Nil) {
		return b.rdb.HGet(ctx, b.keys.JobsIdem(), d.Request.IdempotencyKey).Result()
	}
	return id, err
}

// accept.lua's reply codes.
const (
	acceptWrongType = -2 // {-2, type}: the request entry key is not a HASH
	acceptWithdrawn = -1 // {-1, status}: the request entry is retracted, superseded or expired
	acceptExisting  = 0  // {0, job_id}: the idempotency key already has a job
	acceptCreated   = 1  // {1, job_id}: the record was created now
)

// acceptReply reads accept.lua's {code, job_id or status}.
func acceptReply(res []any) (s string, code int64) {
	if len(res) < 2 {
		return "", acceptExisting
	}
	code, _ = res[0].(int64)
	s, _ = res[1].(string)
	return s, code
}

// publishJob is Accept's step 2: post the job's compute.job entry if
// absent. An entry left by an earlier refusal of the same request (a
// replayed dead letter) is overwritten while the job has had no
// transition yet. A duplicate request (job of another request with the
// same module and idempotency key) gets an entry at its own job id that
// mirrors the original's status when it was accepted and names the
// original in data.duplicate_of, so a poster waiting on its own job id
// finds where its work went.
func (b *Broker) publishJob(ctx context.Context, d *Delivery, j Job) error {
	if j.JobID != d.JobID {
		return b.putDuplicateEntry(ctx, d, j)
	}
	created, err := b.putJobEntry(ctx, j.JobData)
	if err != nil || created || j.Version > 0 {
		return err
	}
	return b.updateJobEntry(ctx, j.JobData)
}

// finishAccept is Accept's step 3: consume the request entry and ack the
// message. If the poster retracted the request meanwhile, a job this
// request created is cancelled before it can start.
func (b *Broker) finishAccept(ctx context.Context, d *Delivery, j Job) (Job, error) {
	j, err := b.consumeAccepted(ctx, d, j)
	if err != nil {
		return Job{}, err
	}
	return j, b.ack(ctx, d, nil)
}

// consumeAccepted is the first half of step 3: the request entry marked
// consumed (or, retracted meanwhile, the queued job it created cancelled).
func (b *Broker) consumeAccepted(ctx context.Context, d *Delivery, j Job) (Job, error) {
	err := b.store.Consume(ctx, d.EntryID, nil)
	switch {
	case errors.Is(err, blackboard.ErrConflict) && j.JobID == d.JobID && j.Status == wire.JobQueued:
		e, gerr := b.store.Get(ctx, d.EntryID)
		if gerr == nil && (e.Status == blackboard.StatusRetracted || e.Status == blackboard.StatusSuperseded) {
			cj, terr := b.Transition(ctx, j.JobID, wire.JobQueued, wire.JobCancelled, JobUpdate{
				Error: &wire.JobError{Code: "cancelled", Message: "request entry " + string(e.Status) + " before it started"},
			})
			if terr == nil {
				j = cj
			} else if !errors.Is(terr, ErrConflict) {
				return Job{}, terr
			}
		}
	case err != nil && !errors.Is(err, blackboard.ErrNotFound) && !errors.Is(err, blackboard.ErrConflict):
		return Job{}, err
	}
	return j, nil
}

// GetJob reads one job record; ErrNotFound if there is none.
func (b *Broker) GetJob(ctx context.Context, jobID string) (Job, error) {
	h, err := b.rdb.HGetAll(ctx, b.keys.Job(jobID)).Result()
	if err != nil {
		return Job{}, fmt.Errorf("broker: get job %s: %w", jobID, err)
	}
	return jobFromHash(jobID, h)
}

// jobFromHash decodes the record HASH h of jobID, as GetJob returns it.
func jobFromHash(jobID string, h map[string]string) (Job, error) {
	if len(h) == 0 {
		return Job{}, fmt.Errorf("broker: get job %s: %w", jobID, ErrNotFound)
	}
	j, err := decodeRecord(h)
	if err != nil {
		return Job{}, fmt.Errorf("broker: get job %s: %w", jobID, err)
	}
	return j, nil
}

// ListActive returns every job not yet in a terminal status, oldest
// acceptance first: what an adapter reloads after a restart.
func (b *Broker) ListActive(ctx context.Context) ([]Job, error) {
	ids, err := b.rdb.ZRange(ctx, b.keys.JobsActive(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("broker: list active jobs: %w", err)
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, b.keys.Job(id))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("broker: list active jobs: %w", err)
	}
	out := make([]Job, 0, len(ids))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue // removed by hand
		}
		j, err := decodeRecord(c.Val())
		if err != nil {
			return nil, fmt.Errorf("broker: list active jobs: %s: %w", ids[i], err)
		}
		out = append(out, j)
	}
	return out, nil
}

// Transition moves job jobID from status from to status to, atomically
// (compare-and-set: of two adapters moving the same job queued → running,
// one gets ErrConflict), sets u's fields and the timestamps (started_at and
// attempt+1 on running, finished_at on a terminal status), then mirrors the
// record into the job's compute.job entry. ErrNotFound: no such job.
func (b *Broker) Transition(ctx context.Context, jobID string, from, to wire.JobStatus, u JobUpdate) (Job, error) {
	if !from.Valid() || !to.Valid() {
		return Job{}, fmt.Errorf("broker: transition %s: invalid status %q → %q", jobID, from, to)
	}
	now := formatFloat(epoch(b.cfg.Clock.Now()))
	fields := []any{"updated_at", now}
	if to == wire.JobRunning {
		fields = append(fields, "started_at", now)
	}
	if to.Terminal() {
		fields = append(fields, "finished_at", now)
	}
	fields = append(fields, updatePairs(u)...)
	// The script builds the request entry's and the idempotency key's names
	// from the record (same board, same hash slot): a start checks the
	// request was not withdrawn, an end sets the retention of both.
	keys := []string{b.keys.Job(jobID), b.keys.JobsActive(), b.keys.Entry(""), b.keys.JobIdemPrefix()}
	keep := "-1"
	if b.cfg.JobRetention >= 0 {
		keep = strconv.FormatInt(b.cfg.JobRetention.Milliseconds(), 10)
	}
	args := append([]any{jobID, string(from), string(to), flag(to.Terminal()), flag(to == wire.JobRunning), keep}, fields...)
	res, err := scriptTransition.Run(ctx, b.rdb, keys, args...).Slice()
	if err != nil {
		return Job{}, fmt.Errorf("broker: transition %s: %w", jobID, err)
	}
	switch code, _ := res[0].(int64); code {
	case -1:
		return Job{}, fmt.Errorf("broker: transition %s: %w", jobID, ErrNotFound)
	case 0:
		return Job{}, fmt.Errorf("broker: transition %s %s → %s: %w: status is %v", jobID, from, to, ErrConflict, res[1])
	case 2: // a start found the request withdrawn: the job is cancelled instead
		j, err := decodeRecord(pairs(res[1]))
		if err == nil {
			err = b.updateJobEntry(ctx, j.JobData)
		}
		if err != nil {
			return Job{}, fmt.Errorf("broker: transition %s: cancelled at start: %w", jobID, err)
		}
		b.emitFinished(ctx, j.JobData)
		b.m.cancelled.Add(1)
		return Job{}, fmt.Errorf("broker: transition %s %s → %s: %w", jobID, from, to, ErrWithdrawn)
	}
	h := pairs(res[1])
	j, err := decodeRecord(h)
	if err != nil {
		return Job{}, fmt.Errorf("broker: transition %s: %w", jobID, err)
	}
	if err := b.updateJobEntry(ctx, j.JobData); err != nil {
		return j, fmt.Errorf("broker: transition %s: record changed, entry not updated: %w", jobID, err)
	}
	b.mirrorDuplicates(ctx, j.JobData, h)
	b.emitFinished(ctx, j.JobData)
	return j, nil
}

// markCancelRequested flags an accepted, unfinished job whose request was
// retracted; false if there is no such job.
func (b *Broker) markCancelRequested(ctx context.Context, jobID string) (bool, error) {
	j, err := b.GetJob(ctx, jobID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if j.Status.Terminal() {
		return false, nil
	}
	if err := b.rdb.HSet(ctx, b.keys.Job(jobID), "cancel_requested", "1").Err(); err != nil {
		return false, fmt.Errorf("broker: mark cancel %s: %w", jobID, err)
	}
	return true, nil
}

// jobEntry builds the compute.job entry for jd.
func jobEntry(jd wire.JobData) (*blackboard.Entry, error) {
	data, err := json.Marshal(jd)
	if err != nil {
		return nil, err
	}
	e := blackboard.NewEntry(wire.TopicJob, wire.SourceModule, data)
	e.ID, e.ParentID = jd.JobID, jd.RequestEntryID
	e.Tags = []string{"compute", "job"}
	e.Metadata = map[string]any{"status": string(jd.Status)}
	return e, nil
}

// duplicateData is the job data of a duplicate request's own job entry:
// the original job's data with this request's ids, and the original named.
type duplicateData struct {
	wire.JobData
	DuplicateOf string `json:"duplicate_of"`
}

// dupPrefix starts the job record fields that list the job's duplicate
// requests: "dup:<request entry id>" -> the request's submitted_at.
// Transition mirrors the job into their entries.
const dupPrefix = "dup:"

// duplicateEntry is the job entry of duplicate request dupEntryID
// (submitted at sub) of job jd: jd's data with the duplicate's ids, and
// duplicate_of naming jd's job.
func duplicateEntry(jd wire.JobData, dupEntryID string, sub float64) (*blackboard.Entry, error) {
	dd := duplicateData{JobData: jd, DuplicateOf: jd.JobID}
	dd.JobID, dd.RequestEntryID, dd.SubmittedAt = wire.JobID(dupEntryID), dupEntryID, &sub
	data, err := json.Marshal(dd)
	if err != nil {
		return nil, err
	}
	e := blackboard.NewEntry(wire.TopicJob, wire.SourceModule, data)
	e.ID, e.ParentID = dd.JobID, dupEntryID
	e.Tags = []string{"compute", "job"}
	e.Metadata = map[string]any{"status": string(jd.Status), "duplicate_of": jd.JobID}
	return e, nil
}

// putDuplicateEntry posts the job entry of duplicate request d, whose
// idempotency key maps to job j, unless one exists, and lists d on j's
// record so that Transition keeps the entry's status in step with j's.
func (b *Broker) putDuplicateEntry(ctx context.Context, d *Delivery, j Job) error {
	e, err := duplicateEntry(j.JobData, d.EntryID, d.Entry.Timestamp)
	if err != nil {
		return err
	}
	if _, err := b.store.PostIfAbsent(ctx, e); err != nil {
		return err
	}
	if err := b.rdb.HSet(ctx, b.keys.Job(j.JobID), dupPrefix+d.EntryID, formatFloat(d.Entry.Timestamp)).Err(); err != nil {
		return fmt.Errorf("list duplicate on job %s: %w", j.JobID, err)
	}
	// j changed since it was read: a transition in between did not see
	// the duplicate listed.
	if now, err := b.GetJob(ctx, j.JobID); err == nil && now.Version != j.Version {
		b.mirrorDuplicate(ctx, now.JobData, d.EntryID, d.Entry.Timestamp)
	}
	return nil
}

// mirrorDuplicates rewrites the entries of the duplicates listed in record
// h from jd. The job has changed already: failures are logged.
func (b *Broker) mirrorDuplicates(ctx context.Context, jd wire.JobData, h map[string]string) {
	for k, v := range h {
		if id, ok := strings.CutPrefix(k, dupPrefix); ok {
			sub, _ := strconv.ParseFloat(v, 64)
			b.mirrorDuplicate(ctx, jd, id, sub)
		}
	}
}

func (b *Broker) mirrorDuplicate(ctx context.Context, jd wire.JobData, dupEntryID string, sub float64) {
	e, err := duplicateEntry(jd, dupEntryID, sub)
	if err == nil {
		err = b.store.Update(ctx, e.ID, blackboard.Update{Data: &e.Data, Metadata: &e.Metadata})
		if errors.Is(err, blackboard.ErrNotFound) {
			_, err = b.store.PostIfAbsent(ctx, e)
		}
	}
	if err != nil {
		b.log.Warn("duplicate's job entry not updated", "job", jd.JobID, "entry_id", dupEntryID, "err", err)
	}
}

// putJobEntry posts jd's compute.job entry unless one exists.
func (b *Broker) putJobEntry(ctx context.Context, jd wire.JobData) (bool, error) {
	e, err := jobEntry(jd)
	if err != nil {
		return false, err
	}
	return b.store.PostIfAbsent(ctx, e)
}

// updateJobEntry rewrites the job entry's data and metadata from jd,
// posting it again if it is gone (evicted).
func (b *Broker) updateJobEntry(ctx context.Context, jd wire.JobData) error {
	e, err := jobEntry(jd)
	if err != nil {
		return err
	}
	err = b.store.Update(ctx, jd.JobID, blackboard.Update{Data: &e.Data, Metadata: &e.Metadata})
	if errors.Is(err, blackboard.ErrNotFound) {
		_, err = b.store.PostIfAbsent(ctx, e)
	}
	return err
}

// recordPairs encodes the record fields of j (all but request) as HASH
// field/value pairs; null values are omitted.
func recordPairs(j Job) []any {
	p := []any{
		"job_id", j.JobID, "request_entry_id", j.RequestEntryID, "idempotency_key", j.IdempotencyKey,
		"account", j.Account, "module", j.Module, "priority", strconv.Itoa(j.Priority),
		"status", string(j.Status), "attempt", strconv.Itoa(j.Attempt), "version", strconv.FormatInt(j.Version, 10),
		"accepted_at", formatFloat(j.AcceptedAt), "updated_at", formatFloat(j.UpdatedAt),
	}
	if j.SubmittedAt != nil {
		p = append(p, "submitted_at", formatFloat(*j.SubmittedAt))
	}
	return p
}

func updatePairs(u JobUpdate) []any {
	var p []any
	for _, f := range []struct{ k, v string }{
		{"node", u.Node}, {"stdout_path", u.StdoutPath}, {"stderr_path", u.StderrPath}, {"reason_code", string(u.ReasonCode)},
	} {
		if f.v != "" {
			p = append(p, f.k, f.v)
		}
	}
	if u.ExitCode != nil {
		p = append(p, "exit_code", strconv.Itoa(*u.ExitCode))
	}
	if u.Error != nil {
		b, _ := json.Marshal(u.Error)
		p = append(p, "error", string(b))
	}
	if len(u.Explanation) > 0 {
		p = append(p, "explanation", string(u.Explanation))
	}
	return p
}

// decodeRecord reads a job record HASH.
func decodeRecord(h map[string]string) (Job, error) {
	var j Job
	var errs []error
	num := func(k string, dst *int) {
		if s, ok := h[k]; ok {
			n, err := strconv.Atoi(s)
			errs = append(errs, err)
			*dst = n
		}
	}
	flt := func(k string) *float64 {
		s, ok := h[k]
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(s, 64)
		errs = append(errs, err)
		return &f
	}
	j.JobID, j.RequestEntryID, j.IdempotencyKey = h["job_id"], h["request_entry_id"], h["idempotency_key"]
	j.Account, j.Module, j.Status = h["account"], h["module"], wire.JobStatus(h["status"])
	j.Node, j.StdoutPath, j.StderrPath, j.ReasonCode = h["node"], h["stdout_path"], h["stderr_path"], wire.Code(h["reason_code"])
	num("priority", &j.Priority)
	num("attempt", &j.Attempt)
	var v int
	num("version", &v)
	j.Version = int64(v)
	if _, ok := h["exit_code"]; ok {
		var c int
		num("exit_code", &c)
		j.ExitCode = &c
	}
	j.SubmittedAt, j.StartedAt, j.FinishedAt = flt("submitted_at"), flt("started_at"), flt("finished_at")
	if f := flt("accepted_at"); f != nil {
		j.AcceptedAt = *f
	}
	if f := flt("updated_at"); f != nil {
		j.UpdatedAt = *f
	}
	if s, ok := h["error"]; ok {
		j.Error = new(wire.JobError)
		errs = append(errs, json.Unmarshal([]byte(s), j.Error))
	}
	if s, ok := h["explanation"]; ok {
		j.Explanation = json.RawMessage(s)
	}
	if s, ok := h["request"]; ok {
		errs = append(errs, json.Unmarshal([]byte(s), &j.Request))
	}
	j.CancelRequested = h["cancel_requested"] == "1"
	if j.JobID == "" || !j.Status.Valid() {
		errs = append(errs, fmt.Errorf("job record without id or valid status"))
	}
	if err := errors.Join(errs...); err != nil {
		return Job{}, fmt.Errorf("decode job record: %w", err)
	}
	return j, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
