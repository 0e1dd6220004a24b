package broker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// requestState is what accepting request id wrote, with the request's and
// the job's ids replaced by REQ and JOB so that two requests' states
// compare: the record, the job entry HASH, the request entry's status, the
// index memberships and the events naming either id.
func (bd *board) requestState(t *testing.T, id string) map[string]any {
	t.Helper()
	ctx := context.Background()
	job := wire.JobID(id)
	norm := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, id, "REQ"), job, "JOB") }
	hash := func(key string) map[string]string {
		h, err := bd.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k, v := range h {
			out[norm(k)] = norm(v)
		}
		return out
	}
	st := map[string]any{
		"record":    hash(bd.keys.Job(job)),
		"job entry": hash(bd.keys.Entry(job)),
		"request":   bd.entryStatus(t, id),
	}
	for _, k := range []string{bd.keys.All(), bd.keys.Topic(wire.TopicJob), bd.keys.Source(wire.SourceModule),
		bd.keys.Prio(blackboard.Normal), bd.keys.Expiry(), bd.keys.JobsActive()} {
		_, err := bd.rdb.ZScore(ctx, k, job).Result()
		st["in "+k] = err == nil
	}
	evs, _, err := bd.store.Events(ctx, "0", "", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, ev := range evs {
		if p := string(ev.Payload); strings.Contains(p, id) || strings.Contains(p, job) {
			mine = append(mine, ev.Type+" "+norm(p))
		}
	}
	st["events"] = mine
	return st
}

// TestAcceptBatchOneStep: a new request's acceptance is one Lua step (one
// round trip for the batch) that leaves exactly what Accept's three steps
// leave: the record, the job entry with its indexes and events, the request
// consumed with its event, the message acknowledged and deleted, the board
// counters.
func TestAcceptBatchOneStep(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	// The default idempotency key is the entry id: REQ in every state.
	stepped := bd.post(t, "m", okData)
	feed(t, b)
	ds, err := b.NextBatch(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	if r := b.acceptSteps(ctx, ds); r[0].Err != nil || !r[0].Created {
		t.Fatalf("three steps: %+v", r[0])
	}
	posted0, _ := bd.rdb.HGet(ctx, bd.keys.Stats(), "total_posted").Int()

	var ids []string
	for range 3 {
		ids = append(ids, bd.post(t, "m", okData))
	}
	feed(t, b)
	if ds, err = b.NextBatch(ctx, 10); err != nil || len(ds) != 3 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	if err := scriptIntake.Load(ctx, bd.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	rt := redistest.CountRoundTrips(bd.rdb)
	res := b.AcceptBatch(ctx, ds)
	if n := rt.N(); n != 1 {
		t.Errorf("AcceptBatch of 3 new requests took %d round trips, want 1", n)
	}
	for i, r := range res {
		if r.Err != nil || !r.Created || r.Job.Status != wire.JobQueued || r.Job.JobID != ds[i].JobID {
			t.Fatalf("%s: %+v", ds[i].EntryID, r)
		}
		j, err := b.jobs.Get(ctx, r.Job.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(j, r.Job); diff != "" {
			t.Errorf("returned job differs from the record (-record +returned):\n%s", diff)
		}
	}
	want := bd.requestState(t, stepped)
	if evs, _ := want["events"].([]string); len(evs) != 3 {
		t.Fatalf("three steps' events: %q, want the request's added, the job entry's added, the consume", evs)
	}
	for _, id := range ids {
		got := bd.requestState(t, id)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: one step differs from three (-three steps +one step):\n%s", id, diff)
		}
	}
	if posted, _ := bd.rdb.HGet(ctx, bd.keys.Stats(), "total_posted").Int(); posted != posted0+6 {
		t.Errorf("total_posted went from %d to %d, want +6 (3 requests, 3 job entries)", posted0, posted)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
	if n := bd.idemKeys(t); n != 4 {
		t.Errorf("%d idempotency keys, want 4", n)
	}
	if b.inbox.Len() != 0 {
		t.Errorf("inbox holds %d", b.inbox.Len())
	}
}

// TestAcceptBatchOneStepFenced: the one step checks the fence: through a
// current epoch it accepts; through a stale one it writes nothing (no
// record, no job entry, the request active, its message pending) and the
// result is ErrFenced; the same request is accepted once the epoch is
// current again.
func TestAcceptBatchOneStepFenced(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	key := bd.keys.PoolEpoch()
	if err := bd.rdb.Set(ctx, key, 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	js, err := jobs.New(bd.rdb, bd.store, jobs.Config{Clock: bd.clk})
	if err != nil {
		t.Fatal(err)
	}
	b := bd.broker(t, Config{Jobs: js.Fenced(jobs.Fence{Key: key, Epoch: 7})})
	ok := bd.post(t, "m", okData)
	feed(t, b)
	ds, err := b.NextBatch(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	if r := b.AcceptBatch(ctx, ds); r[0].Err != nil || !r[0].Created {
		t.Fatalf("accept through the current epoch: %+v", r[0])
	}
	if st := bd.entryStatus(t, ok); st != blackboard.StatusConsumed {
		t.Errorf("request %s, want consumed", st)
	}

	if err := bd.rdb.Set(ctx, key, 8, 0).Err(); err != nil { // deposed
		t.Fatal(err)
	}
	id := bd.post(t, "m", okData)
	feed(t, b)
	if ds, err = b.NextBatch(ctx, 10); err != nil || len(ds) != 1 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	posted, _ := bd.rdb.HGet(ctx, bd.keys.Stats(), "total_posted").Int()
	if r := b.AcceptBatch(ctx, ds); !errors.Is(r[0].Err, jobs.ErrFenced) {
		t.Fatalf("accept through a stale epoch: %+v, want ErrFenced", r[0])
	}
	if ok, _ := js.Exists(ctx, wire.JobID(id)); ok {
		t.Error("a stale fence made a record")
	}
	if _, found := bd.jobEntry(t, id); found {
		t.Error("a stale fence posted a job entry")
	}
	if st := bd.entryStatus(t, id); st != blackboard.StatusActive {
		t.Errorf("request %s, want active", st)
	}
	if n, _ := bd.rdb.HGet(ctx, bd.keys.Stats(), "total_posted").Int(); n != posted {
		t.Errorf("total_posted %d, want %d", n, posted)
	}
	if _, p := bd.laneTotals(t); p != 1 {
		t.Errorf("%d messages pending, want 1", p)
	}
	if err := bd.rdb.Set(ctx, key, 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.AcceptBatch(ctx, ds); r[0].Err != nil || !r[0].Created || r[0].Job.Status != wire.JobQueued {
		t.Fatalf("accept once the epoch is current again: %+v", r[0])
	}
	if _, p := bd.laneTotals(t); p != 0 {
		t.Errorf("%d messages pending, want 0", p)
	}
}

// TestAcceptBatchFallback: what the one step cannot finish it leaves
// untouched, and Accept's three steps finish it: a duplicate idempotency
// key (its own job entry naming the original, listed on its record), a
// job entry left by an earlier refusal (overwritten, queued), a retracted,
// superseded or expired request (no job: cancelled or expired), all in one
// batch next to a request the one step takes.
func TestAcceptBatchFallback(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	orig := bd.post(t, "m", `{"command":["x"],"idempotency_key":"dup"}`)
	feed(t, b)
	accept(t, b, next(t, b))

	plain := bd.post(t, "m", okData)
	dup := bd.post(t, "m", `{"command":["x"],"idempotency_key":"dup"}`)
	refused := bd.post(t, "m", okData)
	retracted := bd.post(t, "m", okData)
	superseded := bd.post(t, "m", okData)
	expired := bd.post(t, "m", okData)
	feed(t, b)
	ds, err := b.NextBatch(ctx, 10)
	if err != nil || len(ds) != 6 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	// An earlier refusal's job entry (say, a dead letter replayed since).
	jd := wire.JobData{JobID: wire.JobID(refused), RequestEntryID: refused, Status: wire.JobRejected, Account: "m"}
	if _, err := b.jobs.PostJobEntry(ctx, jd); err != nil {
		t.Fatal(err)
	}
	if err := bd.store.Retract(ctx, retracted); err != nil {
		t.Fatal(err)
	}
	if _, err := bd.store.Supersede(ctx, superseded, blackboard.NewEntry("other", "m", nil)); err != nil {
		t.Fatal(err)
	}
	if err := bd.store.Expire(ctx, expired, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		created bool
		job     string
		status  wire.JobStatus
		request blackboard.Status
	}{
		plain:      {true, wire.JobID(plain), wire.JobQueued, blackboard.StatusConsumed},
		dup:        {false, wire.JobID(orig), wire.JobQueued, blackboard.StatusConsumed},
		refused:    {true, wire.JobID(refused), wire.JobQueued, blackboard.StatusConsumed},
		retracted:  {false, wire.JobID(retracted), wire.JobCancelled, blackboard.StatusRetracted},
		superseded: {false, wire.JobID(superseded), wire.JobCancelled, blackboard.StatusSuperseded},
		expired:    {false, wire.JobID(expired), wire.JobExpired, blackboard.StatusExpired},
	}
	for i, r := range b.AcceptBatch(ctx, ds) {
		id := ds[i].EntryID
		w := want[id]
		if r.Err != nil || r.Created != w.created || r.Job.JobID != w.job || r.Job.Status != w.status {
			t.Errorf("%s: %+v, want created %v job %s %s", id, r, w.created, w.job, w.status)
		}
		if st := bd.entryStatus(t, id); st != w.request {
			t.Errorf("%s: request %s, want %s", id, st, w.request)
		}
		if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != w.status {
			t.Errorf("%s: job entry %+v, want %s", id, jd, w.status)
		}
	}
	for _, id := range []string{retracted, superseded, expired, dup} {
		if ok, _ := b.jobs.Exists(ctx, wire.JobID(id)); ok {
			t.Errorf("%s: a record at its own job id", id)
		}
	}
	if n, _ := bd.rdb.HExists(ctx, bd.keys.Job(wire.JobID(orig)), "dup:"+dup).Result(); !n {
		t.Error("the duplicate is not listed on the original's record")
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
}
