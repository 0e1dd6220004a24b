package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// PublishAccepted is acceptance's second step: post the compute.job entry
// of j, the job spec's request was accepted into (Accept), if absent. An
// entry left by an earlier refusal of the same request (a replayed dead
// letter) is overwritten while the job has had no transition yet. A
// duplicate request (j is another request's job, with the same module and
// idempotency key) gets an entry at its own job id that mirrors j's status
// and names j in data.duplicate_of, so a poster waiting on its own job id
// finds where its work went; j's record lists the duplicate, so that
// Transition keeps that entry in step.
func (s *Store) PublishAccepted(ctx context.Context, spec AcceptSpec, j Job) error {
	if j.JobID != spec.JobID {
		return s.putDuplicateEntry(ctx, spec, j)
	}
	created, err := s.PostJobEntry(ctx, j.JobData)
	if err != nil || created || j.Version > 0 {
		return err
	}
	// Only while the record has had no transition: one that came since
	// Accept read it has mirrored itself.
	if _, err := s.mirrorJob(ctx, j.JobData, "0", false, false); err != nil && !errors.Is(err, blackboard.ErrStale) {
		return err
	}
	return nil
}

// ConsumeAccepted is the first half of acceptance's third step (the
// second, acknowledging the intake message, is the broker's): the request
// entry is marked consumed. If the poster retracted (or superseded) it
// meanwhile, the queued job this request created is cancelled before it
// can start, and returned so. An entry that is gone, or already in
// another final status, is fine.
func (s *Store) ConsumeAccepted(ctx context.Context, spec AcceptSpec, j Job) (Job, error) {
	err := s.board.Consume(ctx, spec.EntryID, nil)
	switch {
	case errors.Is(err, blackboard.ErrConflict) && j.JobID == spec.JobID && j.Status == wire.JobQueued:
		e, gerr := s.board.Get(ctx, spec.EntryID)
		if gerr == nil && (e.Status == blackboard.StatusRetracted || e.Status == blackboard.StatusSuperseded) {
			cj, terr := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobCancelled, Update{
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

// PostJobEntry posts jd's compute.job entry unless one exists (created is
// false then): the entry of a request that ends before it has a record
// (rejected, expired, cancelled), or of an accepted job.
func (s *Store) PostJobEntry(ctx context.Context, jd wire.JobData) (created bool, err error) {
	e, err := jobEntry(jd)
	if err != nil {
		return false, err
	}
	return s.board.PostIfAbsent(ctx, e)
}

// mirrorJob rewrites the job entry's data and metadata from jd, posting it
// again if it is gone (evicted), and with finish it also raises a terminal
// jd's compute.job.finished (EmitFinished), in the entry's update step
// when the entry is there (blackboard.Store.UpdateEmit: one round trip,
// and the event is never seen before the entry says how the job ended);
// with unlist that step also takes the job off P:jobs:unmirrored. It
// reports whether the update applied, with both, in that step (done);
// when it did not, the entry was gone and is posted again, with neither.
// With a version (the record's, as read with jd), the update applies only
// while the record is still at it (blackboard.Update.Guard): a mirror that
// comes after a newer change's writes nothing and fails with
// blackboard.ErrStale, since that change is listed on P:jobs:unmirrored
// until its own mirror is done.
func (s *Store) mirrorJob(ctx context.Context, jd wire.JobData, version string, finish, unlist bool) (done bool, err error) {
	e, err := jobEntry(jd)
	if err != nil {
		return false, err
	}
	u := blackboard.Update{Data: &e.Data, Metadata: &e.Metadata, Guard: s.recordAt(jd.JobID, version)}
	if unlist {
		u.Unlist = s.keys.JobsUnmirrored()
	}
	var ev *blackboard.Event
	if finish && jd.Status.Terminal() {
		if fe, err := finishedEvent(jd); err == nil { // else raised apart, where the failure is logged
			ev = &fe
		}
	}
	return s.writeEntry(ctx, e, u, ev)
}

// writeEntry applies u to entry e (with ev, UpdateEmit), or posts e when
// the entry is gone (evicted); it reports whether u applied. When another
// writer posted it first, u decides once more (its Guard, if any).
func (s *Store) writeEntry(ctx context.Context, e *blackboard.Entry, u blackboard.Update, ev *blackboard.Event) (updated bool, err error) {
	for range 2 {
		if ev != nil {
			err = s.board.UpdateEmit(ctx, e.ID, u, *ev)
		} else {
			err = s.board.Update(ctx, e.ID, u)
		}
		if !errors.Is(err, blackboard.ErrNotFound) {
			return err == nil, err
		}
		created, perr := s.board.PostIfAbsent(ctx, e)
		if perr != nil || created {
			return false, perr
		}
	}
	return false, err
}

// recordAt is the guard of a mirror of job id's record at version (nil
// for no version: the caller read no record).
func (s *Store) recordAt(id, version string) *blackboard.Guard {
	if version == "" {
		return nil
	}
	return &blackboard.Guard{Key: s.keys.Job(id), Field: "version", Value: version}
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

// putDuplicateEntry posts the job entry of duplicate request spec, whose
// idempotency key maps to job j, unless one exists, and lists spec on j's
// record so that Transition keeps the entry's status in step with j's.
func (s *Store) putDuplicateEntry(ctx context.Context, spec AcceptSpec, j Job) error {
	e, err := duplicateEntry(j.JobData, spec.EntryID, spec.Submitted)
	if err != nil {
		return err
	}
	if _, err := s.board.PostIfAbsent(ctx, e); err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.keys.Job(j.JobID), dupPrefix+spec.EntryID, formatFloat(spec.Submitted)).Err(); err != nil {
		return fmt.Errorf("jobs: list duplicate %s on job %s: %w", spec.EntryID, j.JobID, err)
	}
	// j changed since it was read: a transition in between did not see
	// the duplicate listed.
	if now, err := s.Get(ctx, j.JobID); err == nil && now.Version != j.Version {
		s.mirrorDuplicate(ctx, now.JobData, strconv.FormatInt(now.Version, 10), spec.EntryID, spec.Submitted)
	}
	return nil
}

// mirrorAll writes jd, the job of record h, onto its job entry and its
// duplicates' entries, and raises a terminal jd's compute.job.finished
// after them: with the job's own entry, in its step, unless duplicates'
// entries are to follow it first. The job then leaves P:jobs:unmirrored
// (transition.lua listed it with its change): in that same step, or
// last, once the event is raised. Only the job entry's failure is
// returned (nothing after it is done then); the others are logged, and a
// failed duplicate's entry or event keeps the job listed, for
// RepairMirrors.
//
// Each write applies only while the record is still at h's version: a
// mirror that comes late, after a newer change of the record (whose writer
// stalled between the change and its mirror), stops at the first write the
// record has moved past and returns nil. The newer change is listed until
// its own mirror, which writes every entry, is done.
func (s *Store) mirrorAll(ctx context.Context, jd wire.JobData, h map[string]string) error {
	dups := hasDuplicates(h)
	version := h["version"]
	done, err := s.mirrorJob(ctx, jd, version, !dups, !dups)
	if errors.Is(err, blackboard.ErrStale) {
		s.log.Debug("job change not mirrored: a newer one is", "job", jd.JobID, "version", version)
		return nil
	}
	if err != nil {
		return err
	}
	all := true
	if dups {
		var stale bool
		if all, stale = s.mirrorDuplicates(ctx, jd, version, h); stale {
			s.log.Debug("job change not mirrored onto its duplicates: a newer one is", "job", jd.JobID, "version", version)
			return nil
		}
	}
	if done && !dups {
		return nil
	}
	if err := s.emitFinished(ctx, jd); err == nil && all {
		s.unlist(ctx, jd.JobID, version)
	}
	return nil
}

// unlist takes a job off P:jobs:unmirrored where the mirror's own step
// could not, while its record is still at version (a newer change stays
// listed). A failure leaves the job to RepairMirrors, which mirrors it
// again (for an end, a second compute.job.finished, which readers allow).
func (s *Store) unlist(ctx context.Context, jobID, version string) {
	err := scriptUnlist.Run(ctx, s.rdb, []string{s.keys.Job(jobID), s.keys.JobsUnmirrored()}, jobID, version).Err()
	if err != nil {
		s.log.Warn("mirrored job change still listed for repair", "job", jobID, "err", err)
	}
}

// hasDuplicates reports whether record h lists a duplicate request.
func hasDuplicates(h map[string]string) bool {
	for k := range h {
		if strings.HasPrefix(k, dupPrefix) {
			return true
		}
	}
	return false
}

// mirrorDuplicates rewrites the entries of the duplicates listed in record
// h (at version) from jd. The job has changed already: failures are
// logged, and it reports whether every entry was written; it stops, stale,
// at the first the record has moved past (mirrorAll).
func (s *Store) mirrorDuplicates(ctx context.Context, jd wire.JobData, version string, h map[string]string) (all, stale bool) {
	all = true
	for k, v := range h {
		if id, ok := strings.CutPrefix(k, dupPrefix); ok {
			sub, _ := strconv.ParseFloat(v, 64)
			done, err := s.mirrorDuplicate(ctx, jd, version, id, sub)
			if errors.Is(err, blackboard.ErrStale) {
				return false, true
			}
			all = done && all
		}
	}
	return all, false
}

// mirrorDuplicate writes jd (of the record at version) onto duplicate
// request dupEntryID's job entry; it reports whether it did (a failure is
// logged, and returned). A stale mirror (mirrorJob) writes nothing.
func (s *Store) mirrorDuplicate(ctx context.Context, jd wire.JobData, version, dupEntryID string, sub float64) (bool, error) {
	e, err := duplicateEntry(jd, dupEntryID, sub)
	if err == nil {
		_, err = s.writeEntry(ctx, e, blackboard.Update{Data: &e.Data, Metadata: &e.Metadata, Guard: s.recordAt(jd.JobID, version)}, nil)
	}
	if errors.Is(err, blackboard.ErrStale) {
		return false, err
	}
	if err != nil {
		s.log.Warn("duplicate's job entry not updated", "job", jd.JobID, "entry_id", dupEntryID, "err", err)
	}
	return err == nil, err
}
