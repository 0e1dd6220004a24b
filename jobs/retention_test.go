package jobs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// (Moved from the broker, where records were kept before package jobs.)

// TestIdempotencyPerModule: an idempotency key is unique within its source
// module: another module's request with the same key gets its own job, so
// no module can pre-claim or shadow another's.
func TestIdempotencyPerModule(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	a1 := bd.post(t, "a", `{"command":["x"],"idempotency_key":"k1"}`)
	b1 := bd.post(t, "b", `{"command":["x"],"idempotency_key":"k1"}`)
	ja, ca := bd.accept(t, s, a1)
	jb, cb := bd.accept(t, s, b1)
	if !ca || !cb || ja.JobID == jb.JobID {
		t.Fatalf("module a: %+v %v; module b: %+v %v", ja.JobData, ca, jb.JobData, cb)
	}
	if ja.RequestEntryID != a1.EntryID || jb.RequestEntryID != b1.EntryID {
		t.Errorf("jobs of %s and %s, want %s and %s", ja.RequestEntryID, jb.RequestEntryID, a1.EntryID, b1.EntryID)
	}
}

// TestDuplicateGetsEntry: a duplicate request (same module, same key) gets
// a job entry at its own job id, mirroring the original's status and
// naming it in data.duplicate_of, so a poster waiting on its job id finds
// it.
func TestDuplicateGetsEntry(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	first := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	second := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	j1, _ := bd.accept(t, s, first)
	bd.accept(t, s, second)
	e, err := bd.store.Get(t.Context(), wire.JobID(second.EntryID))
	if err != nil {
		t.Fatalf("the duplicate's job entry: %v", err)
	}
	var data map[string]any
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data["duplicate_of"] != j1.JobID || data["status"] != string(wire.JobQueued) ||
		data["job_id"] != wire.JobID(second.EntryID) || data["request_entry_id"] != second.EntryID {
		t.Errorf("duplicate's job data %v, want duplicate_of %s (request %s)", data, j1.JobID, first.EntryID)
	}
	if e.ParentID != second.EntryID {
		t.Errorf("duplicate's job entry parent %q", e.ParentID)
	}
	// It follows the original's status to the end.
	ctx := t.Context()
	if _, err := s.Transition(ctx, j1.JobID, wire.JobQueued, wire.JobRunning, Update{}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if _, err := s.Transition(ctx, j1.JobID, wire.JobRunning, wire.JobSucceeded, Update{ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	jd, _ := bd.jobEntry(t, second.EntryID)
	if jd.Status != wire.JobSucceeded || jd.JobID != wire.JobID(second.EntryID) || jd.ExitCode == nil {
		t.Errorf("duplicate's job entry after the original succeeded: %+v", jd)
	}
}

// TestJobRetention: a terminal job's record, the fields kept beside it
// (its request, its explanation) and its idempotency key expire after
// Retention; an active job's never do.
func TestJobRetention(t *testing.T) {
	bd := newBoardWith(t, Config{Retention: time.Hour})
	s := bd.jobs
	ctx := t.Context()
	// Long enough (over 64 bytes) that the request and the explanation
	// are kept beside the record.
	data := `{"command":["x"],"idempotency_key":"k1","resource_requirements":{"cpu_cores":2,"memory":1}}`
	spec := bd.post(t, "m", data)
	spec.RequestData = []byte(data)
	j, _ := bd.accept(t, s, spec)
	idem := bd.keys.JobIdem("m", "k1")
	ttl := func(key string) time.Duration {
		t.Helper()
		d, err := bd.rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := ttl(bd.keys.Job(j.JobID)); d != -1*time.Millisecond && d != -1 {
		t.Errorf("active record TTL %v, want none", d)
	}
	if d := ttl(bd.keys.JobField(j.JobID, "request_data")); d != -1*time.Millisecond && d != -1 {
		t.Errorf("active request TTL %v, want none (present: %v)", d, d != -2*time.Millisecond)
	}
	if d := ttl(idem); d != -1*time.Millisecond && d != -1 {
		t.Errorf("active idempotency key TTL %v, want none (present: %v)", d, d != -2*time.Millisecond)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobQueued, Update{Explanation: []byte(`{"position":60,"priority":6,"level":4,"reason":"no-fit","message":"0/1 nodes: 1 cpu"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{}); err != nil {
		t.Fatal(err)
	}
	if d := ttl(bd.keys.Job(j.JobID)); d > 0 {
		t.Errorf("running record TTL %v, want none", d)
	}
	zero := 0
	if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobSucceeded, Update{ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	if d := ttl(bd.keys.Job(j.JobID)); d <= 0 || d > time.Hour+2*time.Second {
		t.Errorf("terminal record TTL %v, want about 1h", d)
	}
	for _, f := range sideFields {
		if d := ttl(bd.keys.JobField(j.JobID, f)); d <= 0 || d > time.Hour+2*time.Second {
			t.Errorf("terminal %s TTL %v, want about 1h, as the record's", f, d)
		}
	}
	if d := ttl(idem); d <= 0 || d > time.Hour || d > ttl(bd.keys.Job(j.JobID)) {
		t.Errorf("terminal idempotency key TTL %v, want about 1h and not past the record's", d)
	}
}

// TestJobRetentionForever: with a negative Retention a terminal job's
// record and key are kept.
func TestJobRetentionForever(t *testing.T) {
	bd := newBoardWith(t, Config{Retention: -1})
	s := bd.jobs
	ctx := t.Context()
	j, _ := bd.accept(t, s, bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`))
	zero := 0
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobSucceeded, Update{ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{bd.keys.Job(j.JobID), bd.keys.JobIdem("m", "k1")} {
		if d, err := bd.rdb.PTTL(ctx, key).Result(); err != nil || d != -1*time.Millisecond && d != -1 {
			t.Errorf("%s TTL %v, %v; want none", key, d, err)
		}
	}
}

// TestLegacyIdempotencyHash: a key recorded in the old P:jobs:idem HASH
// (a board from before per-module keys) still finds its job.
func TestLegacyIdempotencyHash(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	j, _ := bd.accept(t, s, bd.post(t, "m", `{"command":["x"],"idempotency_key":"old"}`))
	// Rewrite the board as an old broker left it.
	if err := bd.rdb.Del(ctx, bd.keys.JobIdem("m", "old")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.HSet(ctx, bd.keys.JobsIdem(), "old", j.JobID).Err(); err != nil {
		t.Fatal(err)
	}
	if id, err := s.JobForKey(ctx, "m", "old"); err != nil || id != j.JobID {
		t.Errorf("JobForKey of a legacy key = %q, %v; want %s", id, err, j.JobID)
	}
	j2, created := bd.accept(t, s, bd.post(t, "m", `{"command":["x"],"idempotency_key":"old"}`))
	if created || j2.JobID != j.JobID {
		t.Errorf("duplicate of a legacy key: %s created %v, want %s", j2.JobID, created, j.JobID)
	}
}

// TestResolveKeys: the batch look-up agrees with JobForKey then Get for
// every case (a per-module key, a legacy board-wide key, no key, a key
// whose record is gone) in two round trips.
func TestResolveKeys(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	j1, _ := bd.accept(t, s, bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`))
	j2, _ := bd.accept(t, s, bd.post(t, "m", `{"command":["x"],"idempotency_key":"old"}`))
	j3, _ := bd.accept(t, s, bd.post(t, "n", `{"command":["x"],"idempotency_key":"gone"}`))
	if err := bd.rdb.Del(ctx, bd.keys.JobIdem("m", "old")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.HSet(ctx, bd.keys.JobsIdem(), "old", j2.JobID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Del(ctx, bd.keys.Job(j3.JobID)).Err(); err != nil {
		t.Fatal(err)
	}
	refs := []KeyRef{{"m", "k1"}, {"m", "old"}, {"m", "none"}, {"n", "gone"}, {"n", "k1"}}
	rt := redistest.CountRoundTrips(bd.rdb)
	got, err := s.ResolveKeys(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.N(); n != 2 {
		t.Errorf("%d round trips, want 2", n)
	}
	for i, r := range refs {
		id, err := s.JobForKey(ctx, r.Module, r.Key)
		if (err == nil) != (got[i].Err == nil) || errors.Is(err, ErrNotFound) != errors.Is(got[i].Err, ErrNotFound) || id != got[i].JobID {
			t.Errorf("%v: ResolveKeys %q, %v; JobForKey %q, %v", r, got[i].JobID, got[i].Err, id, err)
			continue
		}
		if err != nil {
			continue
		}
		j, jerr := s.Get(ctx, id)
		if errors.Is(jerr, ErrNotFound) != errors.Is(got[i].JobErr, ErrNotFound) || j.JobID != got[i].Job.JobID || j.Status != got[i].Job.Status {
			t.Errorf("%v: ResolveKeys record %+v, %v; Get %+v, %v", r, got[i].Job, got[i].JobErr, j, jerr)
		}
	}
	if got[0].JobID != j1.JobID || got[1].JobID != j2.JobID || !errors.Is(got[2].Err, ErrNotFound) ||
		got[3].JobID != j3.JobID || !errors.Is(got[3].JobErr, ErrNotFound) || !errors.Is(got[4].Err, ErrNotFound) {
		t.Errorf("ResolveKeys = %+v", got)
	}
}

// TestReaccept: a record gone with Redis is recreated from its request's
// entry, with the job id and request the broker's accept gave it; a
// retracted request is not made a job again.
func TestReaccept(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", `{"command":["x"],"priority":7,"idempotency_key":"k"}`)
	j, _ := bd.accept(t, s, spec)
	// Redis loses the record and its key (the request entry is back
	// to active in a real rollback; the entry is all Reaccept reads).
	if err := bd.rdb.Del(ctx, bd.keys.Job(j.JobID), bd.keys.JobIdem("m", "k")).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := s.Reaccept(ctx, spec.EntryID)
	if err != nil || !r.Created || r.Job.JobID != j.JobID || r.Job.Status != wire.JobQueued ||
		r.Job.RequestEntryID != spec.EntryID || r.Job.Module != "m" || r.Job.Request.Priority != 7 {
		t.Fatalf("Reaccept = %+v, %v; want job %s queued, of request %s", r, err, j.JobID, spec.EntryID)
	}
	if _, err := s.Reaccept(ctx, "m:"+strings.Repeat("0", 32)); !errors.Is(err, blackboard.ErrNotFound) {
		t.Errorf("Reaccept of no entry: %v, want ErrNotFound", err)
	}
	gone := bd.post(t, "m", `{"command":["x"]}`)
	if err := bd.store.Retract(ctx, gone.EntryID); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Reaccept(ctx, gone.EntryID); err != nil || r.Withdrawn == "" {
		t.Errorf("Reaccept of a retracted request = %+v, %v; want withdrawn", r, err)
	}
}
