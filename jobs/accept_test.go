package jobs

import (
	"errors"
	"testing"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestAcceptBatch: one result per spec, as successive Accepts would give:
// a new key creates its job, a repeated key (in the batch or before it)
// gets the existing job, a withdrawn request or an entry key of another
// type gets no record. The records take one round trip, plus one for the
// keys that already had a job.
func TestAcceptBatch(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	old := bd.post(t, "m", `{"command":["x"],"idempotency_key":"old"}`)
	oldJob, _ := bd.accept(t, s, old) // loads the script too
	fresh := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	dupA := bd.post(t, "m", `{"command":["x"],"idempotency_key":"dup"}`)
	dupB := bd.post(t, "m", `{"command":["x"],"idempotency_key":"dup"}`)
	again := bd.post(t, "m", `{"command":["x"],"idempotency_key":"old"}`)
	retracted := bd.post(t, "m", okData)
	if err := bd.store.Retract(ctx, retracted.EntryID); err != nil {
		t.Fatal(err)
	}
	expired := bd.post(t, "m", okData)
	if err := bd.store.Expire(ctx, expired.EntryID, nil); err != nil {
		t.Fatal(err)
	}
	wrong := bd.post(t, "m", okData)
	if err := bd.rdb.Del(ctx, bd.keys.Entry(wrong.EntryID)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Set(ctx, bd.keys.Entry(wrong.EntryID), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	specs := []AcceptSpec{fresh, dupA, dupB, again, retracted, expired, wrong}
	rt := redistest.CountRoundTrips(bd.rdb)
	res := s.AcceptBatch(ctx, specs)
	if n := rt.N(); n != 2 {
		t.Errorf("AcceptBatch took %d round trips, want 2 (the scripts, the existing records)", n)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("%d: %v", i, r.Err)
		}
	}
	if r := res[0]; !r.Created || r.Job.JobID != fresh.JobID || r.Job.Status != wire.JobQueued || r.Job.Module != "m" {
		t.Errorf("new key: %+v", r)
	}
	if a, b := res[1], res[2]; !a.Created || b.Created || b.Job.JobID != dupA.JobID || b.Job.RequestEntryID != dupA.EntryID {
		t.Errorf("key repeated in the batch: %+v / %+v", a, b)
	}
	if r := res[3]; r.Created || r.Job.JobID != oldJob.JobID || r.Job.Version != oldJob.Version {
		t.Errorf("key accepted before: %+v, want job %s", r, oldJob.JobID)
	}
	if r := res[4]; r.Withdrawn != blackboard.StatusRetracted || r.Created || r.Job.JobID != "" {
		t.Errorf("retracted request: %+v", r)
	}
	if r := res[5]; r.Withdrawn != blackboard.StatusExpired || r.Created {
		t.Errorf("expired request: %+v", r)
	}
	if r := res[6]; r.WrongType != "string" || r.Created || r.Withdrawn != "" {
		t.Errorf("entry key of another type: %+v", r)
	}
	for _, spec := range []AcceptSpec{retracted, expired, wrong} {
		if ok, err := s.Exists(ctx, spec.JobID); ok || err != nil {
			t.Errorf("%s: record exists %v, %v", spec.EntryID, ok, err)
		}
	}
	if ok, err := s.Exists(ctx, fresh.JobID); !ok || err != nil {
		t.Errorf("the new job's record exists %v, %v", ok, err)
	}
	if n := bd.idemKeys(t); n != 3 {
		t.Errorf("%d idempotency keys, want 3 (old, k1, dup)", n)
	}
	if res := s.AcceptBatch(ctx, nil); len(res) != 0 {
		t.Errorf("AcceptBatch(nil) = %v", res)
	}
}

// TestAcceptNoScript: after Redis loses its script cache, Accept loads the
// script again and runs once.
func TestAcceptNoScript(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	if err := bd.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := bd.jobs.Accept(ctx, bd.post(t, "m", okData))
	if err != nil || !r.Created {
		t.Fatalf("Accept = %+v, %v", r, err)
	}
	if n := bd.idemKeys(t); n != 1 {
		t.Errorf("%d idempotency keys", n)
	}
}

// TestAcceptStepsIdempotent: each acceptance step repeated (a caller that
// crashed and tries again) creates nothing twice; the job entry exists
// once and the request is consumed.
func TestAcceptStepsIdempotent(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", okData)
	j1, c1 := bd.accept(t, s, spec)
	j2, c2 := bd.accept(t, s, spec)
	if !c1 || c2 || j1.JobID != j2.JobID || j2.Version != 0 {
		t.Fatalf("first %+v %v, second %+v %v", j1, c1, j2, c2)
	}
	if jd, ok := bd.jobEntry(t, spec.EntryID); !ok || jd.Status != wire.JobQueued {
		t.Errorf("job entry %+v %v", jd, ok)
	}
	if st := bd.entryStatus(t, spec.EntryID); st != blackboard.StatusConsumed {
		t.Errorf("request %s", st)
	}
	if id, err := s.JobForKey(ctx, "m", spec.Request.IdempotencyKey); err != nil || id != j1.JobID {
		t.Errorf("JobForKey = %q, %v", id, err)
	}
	if _, err := s.JobForKey(ctx, "m", "none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("JobForKey of an unknown key: %v, want ErrNotFound", err)
	}
}

// TestConsumeAcceptedRetracted: a request retracted between its record
// and its consumption has its queued job cancelled there, before any
// start.
func TestConsumeAcceptedRetracted(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", okData)
	r := bd.record(t, spec)
	if err := s.PublishAccepted(ctx, spec, r.Job); err != nil {
		t.Fatal(err)
	}
	if err := bd.store.Retract(ctx, spec.EntryID); err != nil {
		t.Fatal(err)
	}
	j, err := s.ConsumeAccepted(ctx, spec, r.Job)
	if err != nil || j.Status != wire.JobCancelled {
		t.Fatalf("ConsumeAccepted = %+v, %v; want cancelled", j, err)
	}
	if jd, _ := bd.jobEntry(t, spec.EntryID); jd.Status != wire.JobCancelled {
		t.Errorf("job entry %+v", jd)
	}
	if st := bd.entryStatus(t, spec.EntryID); st != blackboard.StatusRetracted {
		t.Errorf("request %s, want retracted", st)
	}
}

// TestPublishAcceptedAfterAChange: acceptance's second step rewrites a job
// entry an earlier refusal of the same request left, while the job has had
// no transition. A transition that came between the record (Accept) and
// this step (the scheduler cancelled the job, say) was mirrored first, and
// the step then wrote the job back to queued over it. The rewrite now
// applies only while the record is still at version 0.
func TestPublishAcceptedAfterAChange(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", okData)
	r := bd.record(t, spec)
	if _, err := s.Transition(ctx, r.Job.JobID, wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishAccepted(ctx, spec, r.Job); err != nil {
		t.Fatal(err)
	}
	if jd, _ := bd.jobEntry(t, spec.EntryID); jd.Status != wire.JobCancelled {
		t.Fatalf("job entry after PublishAccepted: %s; want cancelled, as the record says", jd.Status)
	}
}
