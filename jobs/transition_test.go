package jobs

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestTransition: queued → running succeeds once; the record keeps the
// timestamps, the attempt and the version; a terminal job leaves the
// active set; the job entry mirrors the record. (Moved from the broker's
// TestAcceptAndTransition, whose acceptance half stays there.)
func TestTransition(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "planner", `{"command":["echo","hi"],"priority":7,"name":"n1"}`)
	id := spec.EntryID
	j, created := bd.accept(t, s, spec)
	if !created || j.JobID != wire.JobID(id) || j.Status != wire.JobQueued || j.Request.Name != "n1" {
		t.Fatalf("job %+v created %v", j, created)
	}
	if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
		t.Errorf("request entry %s, want consumed", st)
	}
	if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobQueued || jd.Account != "planner" || jd.Priority != 7 {
		t.Errorf("job entry %+v %v", jd, ok)
	}

	// queued → running succeeds once.
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("second queued→running: %v, want ErrConflict", err)
	}
	if _, err := s.Transition(ctx, "nope", wire.JobQueued, wire.JobRunning, Update{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	active, err := s.ListActive(ctx)
	if err != nil || len(active) != 1 || active[0].Status != wire.JobRunning || active[0].Attempt != 1 {
		t.Fatalf("ListActive = %+v, %v", active, err)
	}
	code := 0
	j, err = s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobSucceeded, Update{ExitCode: &code})
	if err != nil {
		t.Fatal(err)
	}
	if j.FinishedAt == nil || j.StartedAt == nil || *j.ExitCode != 0 || j.Node != "n1" || j.Version != 2 {
		t.Errorf("final record %+v", j)
	}
	if active, _ := s.ListActive(ctx); len(active) != 0 {
		t.Errorf("terminal job still active: %+v", active)
	}
	jd, _ := bd.jobEntry(t, id)
	if string(jd.Explanation) == "null" {
		jd.Explanation = nil
	}
	want := j.JobData
	if diff := cmp.Diff(want, jd, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("job entry does not mirror the record (-want +got):\n%s", diff)
	}
	if got, err := s.Get(ctx, j.JobID); err != nil || got.Version != 2 || got.Status != wire.JobSucceeded {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an unknown job: %v, want ErrNotFound", err)
	}
	if _, err := s.Transition(ctx, j.JobID, "bogus", wire.JobRunning, Update{}); err == nil {
		t.Error("a transition from an invalid status succeeded")
	}
}

// TestTransitionExpectNode: with Update.ExpectNode the compare-and-set
// also needs the record's node: a job placed on another node is refused
// (ErrConflict) and left as it was.
func TestTransitionExpectNode(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	j, _ := bd.accept(t, s, bd.post(t, "m", okData))
	// Placed on n1 (what the scheduler's assignment writes), still queued.
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobQueued, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Get(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{ExpectNode: "n2"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("start expecting another node: %v, want ErrConflict", err)
	}
	if after, _ := s.Get(ctx, j.JobID); !cmp.Equal(before, after) {
		t.Errorf("a refused transition changed the record (-before +after):\n%s", cmp.Diff(before, after))
	}
	got, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{ExpectNode: "n1"})
	if err != nil {
		t.Fatalf("start expecting its node: %v", err)
	}
	if got.Status != wire.JobRunning || got.Node != "n1" || got.Attempt != 1 {
		t.Errorf("record %+v", got)
	}
	// A record without a node matches no expected node.
	j2, _ := bd.accept(t, s, bd.post(t, "m", okData))
	if _, err := s.Transition(ctx, j2.JobID, wire.JobQueued, wire.JobRunning, Update{ExpectNode: "n1"}); !errors.Is(err, ErrConflict) {
		t.Errorf("unplaced job: %v, want ErrConflict", err)
	}
}

// TestTransitionHandle: Update.Handle is stored on the record (field
// "handle", Job.Handle) and not in the job entry; a running → running
// transition sets it without counting a new start.
func TestTransitionHandle(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", okData)
	j, _ := bd.accept(t, s, spec)
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	const h = `{"provider":"local","id":"t1"}`
	got, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobRunning, Update{Handle: h})
	if err != nil {
		t.Fatal(err)
	}
	if got.Handle != h || got.Attempt != 1 || got.Version != 2 {
		t.Errorf("record %+v, want handle %s, attempt 1, version 2", got, h)
	}
	if raw, _ := bd.rdb.HGet(ctx, bd.keys.Job(j.JobID), "handle").Result(); raw != h {
		t.Errorf("field handle = %q", raw)
	}
	if r, _ := s.Get(ctx, j.JobID); r.Handle != h {
		t.Errorf("Get: handle %q", r.Handle)
	}
	e, err := bd.store.Get(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatal(err)
	}
	if _, ok := data["handle"]; ok {
		t.Errorf("the job entry holds the handle: %v", data)
	}
}

// TestStartWithdrawn: a start (queued → running) of a job whose request
// was retracted, or whose record has cancel_requested, cancels the job in
// the same step: ErrWithdrawn (also an ErrConflict), the record and the
// entry cancelled, compute.job.finished raised, and Stats counts it.
func TestStartWithdrawn(t *testing.T) {
	tests := map[string]func(t *testing.T, bd *board, spec AcceptSpec){
		"request retracted": func(t *testing.T, bd *board, spec AcceptSpec) {
			if err := bd.rdb.HSet(t.Context(), bd.keys.Entry(spec.EntryID), "status", "retracted").Err(); err != nil {
				t.Fatal(err)
			}
		},
		"cancel requested": func(t *testing.T, bd *board, spec AcceptSpec) {
			if ok, err := bd.jobs.MarkCancelRequested(t.Context(), spec.JobID); err != nil || !ok {
				t.Fatalf("MarkCancelRequested = %v, %v", ok, err)
			}
		},
	}
	for name, withdraw := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bd := newBoard(t)
			s := bd.jobs
			ctx := t.Context()
			spec := bd.post(t, "m", okData)
			j, _ := bd.accept(t, s, spec)
			withdraw(t, bd, spec)
			_, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"})
			if !errors.Is(err, ErrWithdrawn) || !errors.Is(err, ErrConflict) {
				t.Fatalf("start: %v, want ErrWithdrawn", err)
			}
			rec, err := s.Get(ctx, j.JobID)
			if err != nil || rec.Status != wire.JobCancelled || rec.Error == nil || rec.Error.Code != "cancelled" || rec.FinishedAt == nil {
				t.Errorf("record %+v, %v", rec, err)
			}
			if jd, _ := bd.jobEntry(t, spec.EntryID); jd.Status != wire.JobCancelled {
				t.Errorf("job entry %+v", jd)
			}
			if p := bd.finishedEvents(t)[j.JobID]; p == nil || p["status"] != "cancelled" {
				t.Errorf("finished event %v", p)
			}
			if active, _ := s.ListActive(ctx); len(active) != 0 {
				t.Errorf("still active: %+v", active)
			}
			if n := s.Stats().CancelledAtStart; n != 1 {
				t.Errorf("Stats().CancelledAtStart = %d, want 1", n)
			}
			if ok, err := s.MarkCancelRequested(ctx, j.JobID); ok || err != nil {
				t.Errorf("MarkCancelRequested of an ended job = %v, %v", ok, err)
			}
		})
	}
}

// TestStartWithdrawnDuplicate: a job cancelled at its start (its request
// retracted) ends its duplicates' entries too, before compute.job.finished,
// as any other end does. They stayed queued for good before: a poster
// waiting on the duplicate's job id never saw it end.
func TestStartWithdrawnDuplicate(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	first := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	second := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	j, _ := bd.accept(t, s, first)
	bd.accept(t, s, second)
	if err := bd.rdb.HSet(ctx, bd.keys.Entry(first.EntryID), "status", "retracted").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); !errors.Is(err, ErrWithdrawn) {
		t.Fatalf("start: %v, want ErrWithdrawn", err)
	}
	if jd, _ := bd.jobEntry(t, second.EntryID); jd.Status != wire.JobCancelled {
		t.Errorf("duplicate's job entry after the original was cancelled at start: %+v", jd)
	}
	evs, _, err := bd.store.Events(ctx, "0", "", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, e := range evs {
		last = e.Type
	}
	if last != EventJobFinished {
		t.Errorf("last event %q, want %s after the entries' updates", last, EventJobFinished)
	}
}

// TestJobFinishedOnTransition: a transition to a terminal status raises
// one compute.job.finished naming the job, its status, its request and its
// exit and error codes; other transitions raise none.
func TestJobFinishedOnTransition(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", okData)
	j, _ := bd.accept(t, s, spec)
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{}); err != nil {
		t.Fatal(err)
	}
	if got := bd.finishedEvents(t); len(got) != 0 {
		t.Fatalf("events before the end: %v", got)
	}
	three := 3
	if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, Update{ExitCode: &three,
		Error: &wire.JobError{Code: "exit_status", Message: "exit 3"}}); err != nil {
		t.Fatal(err)
	}
	got := bd.finishedEvents(t)
	if p := got[j.JobID]; p == nil || p["status"] != "failed" || p["request_entry_id"] != spec.EntryID ||
		p["exit_code"] != 3.0 || p["error_code"] != "exit_status" {
		t.Errorf("failed job's event %v", p)
	}
	if len(got) != 1 {
		t.Errorf("%d finished events, want 1: %v", len(got), got)
	}
}

// TestEngineState: the engine checkpoint is saved per name and read back;
// a name with none reads as nil without an error.
func TestEngineState(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	if b, err := s.LoadEngineState(ctx, "n1"); b != nil || err != nil {
		t.Fatalf("LoadEngineState before any save = %q, %v; want nil, nil", b, err)
	}
	for _, v := range []string{`{"version":1}`, `{"version":1,"last_now":"x"}`} {
		if err := s.SaveEngineState(ctx, "n1", []byte(v)); err != nil {
			t.Fatal(err)
		}
		if b, err := s.LoadEngineState(ctx, "n1"); string(b) != v || err != nil {
			t.Errorf("LoadEngineState = %q, %v; want %s", b, err, v)
		}
	}
	if b, err := s.LoadEngineState(ctx, "n2"); b != nil || err != nil {
		t.Errorf("another node's state = %q, %v", b, err)
	}
	if n, _ := bd.rdb.HLen(ctx, bd.keys.EngineState()).Result(); n != 1 {
		t.Errorf("%s holds %d fields, want 1", bd.keys.EngineState(), n)
	}
}

// TestActivePage: a page of the active jobs, oldest first, filtered by
// status, with how many have that status; the page never reads more
// records than it returns.
func TestActivePage(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	var ids []string
	for i := range 5 {
		bd.clk.Advance(time.Second) // oldest first: acceptances apart
		j, _ := bd.accept(t, s, bd.post(t, "m", `{"command":["x"]}`))
		ids = append(ids, j.JobID)
		if i%2 == 0 {
			if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(st wire.JobStatus, limit, wantTotal int, want ...string) {
		t.Helper()
		page, total, err := s.ActivePage(ctx, st, limit)
		var got []string
		for _, j := range page {
			got = append(got, j.JobID)
		}
		if err != nil || total != wantTotal || !slices.Equal(got, want) {
			t.Errorf("ActivePage(%q, %d) = %v, %d, %v; want %v, %d", st, limit, got, total, err, want, wantTotal)
		}
	}
	check("", 2, 5, ids[0], ids[1])
	check("", 0, 5)
	check(wire.JobRunning, 2, 3, ids[0], ids[2])
	check(wire.JobQueued, 10, 2, ids[1], ids[3])
	check(wire.JobSucceeded, 10, 0)
}

// TestTransitionSuspended: Update.Suspend stamps suspended_at on a running
// record (the status stays running, the attempt is not counted again),
// Update.Resume clears it, and a transition out of running clears it too;
// the job entry never holds it.
func TestTransitionSuspended(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	j, _ := bd.accept(t, s, bd.post(t, "m", okData))
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobRunning, Update{Suspend: true, ExpectNode: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.SuspendedAt == nil || *got.SuspendedAt <= 0 || got.Status != wire.JobRunning || got.Attempt != 1 {
		t.Fatalf("suspended record: suspended_at %v, status %s, attempt %d; want set, running, 1", got.SuspendedAt, got.Status, got.Attempt)
	}
	if r, _ := s.Get(ctx, j.JobID); r.SuspendedAt == nil {
		t.Error("Get: suspended_at not read back")
	}
	e, err := bd.store.Get(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.Data), "suspended") {
		t.Errorf("the job entry holds suspended_at: %s", e.Data)
	}
	if got, err = s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobRunning, Update{Resume: true}); err != nil || got.SuspendedAt != nil {
		t.Fatalf("resumed record: suspended_at %v (%v), want nil", got.SuspendedAt, err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobRunning, Update{Suspend: true}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobQueued, Update{}); err != nil || got.SuspendedAt != nil {
		t.Errorf("requeued record: suspended_at %v (%v), want nil", got.SuspendedAt, err)
	}
}

// TestActiveStates: the states of the active jobs are their records'
// status, node, suspended_at and checkpoint time, oldest acceptance first,
// as ListActive's whole records say, over more than one page of records;
// a record removed by hand is left out, an ended job is not active.
func TestActiveStates(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	n := statePage + 5
	var ids []string
	for _, spec := range bd.acceptMany(t, n, okData) {
		ids = append(ids, spec.JobID)
	}
	if _, err := s.Transition(ctx, ids[0], wire.JobQueued, wire.JobRunning, Update{Node: "n1", Suspend: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, ids[1], wire.JobQueued, wire.JobRunning, Update{Node: "n2",
		Checkpoint: &Checkpoint{Seq: 3, Path: "/ck/3", At: 1700000000.25}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, ids[2], wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Del(ctx, bd.keys.Job(ids[3])).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.ActiveStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := s.ListActive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []State
	for _, j := range whole {
		st := State{JobID: j.JobID, Status: j.Status, Node: j.Node, SuspendedAt: j.SuspendedAt}
		if j.Checkpoint != nil {
			st.CheckpointAt = j.Checkpoint.At
		}
		want = append(want, st)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ActiveStates differs from the whole records (-want +got):\n%s", diff)
	}
	if len(got) != n-2 || got[0].JobID != ids[0] || got[0].SuspendedAt == nil || got[0].Node != "n1" ||
		got[1].CheckpointAt != 1700000000.25 || got[1].SuspendedAt != nil || got[2].JobID != ids[4] {
		t.Errorf("%d states, want %d; first three %+v", len(got), n-2, got[:3])
	}
}

// BenchmarkRescanRead: what the scheduler's periodic rescan reads of 2,000
// active records, per pass: their states (ActiveStates, what it reads
// now) against the whole records (ListActive, what it read before).
func BenchmarkRescanRead(b *testing.B) {
	bd := newBoard(b)
	s := bd.jobs
	bd.acceptMany(b, 2000, `{"command":["echo","hi"],"resource_requirements":{"cpu_cores":1,"memory":0.5}}`)
	b.Run("states", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if sts, err := s.ActiveStates(b.Context()); err != nil || len(sts) != 2000 {
				b.Fatal(len(sts), err)
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if js, err := s.ListActive(b.Context()); err != nil || len(js) != 2000 {
				b.Fatal(len(js), err)
			}
		}
	})
}

// TestWithdrawnRequests: over more than one page of active jobs, the
// request entries retracted or superseded (by a plain HSET of the status,
// as a module may write it) are listed, and no other; an ended job's is
// not; an entry key of the wrong type and a record without a request id
// are passed over; every active job is counted.
func TestWithdrawnRequests(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	n := withdrawnPage + 7
	var reqs []string
	for _, spec := range bd.acceptMany(t, n, okData) {
		reqs = append(reqs, spec.EntryID)
	}
	setStatus := func(i int, st blackboard.Status) {
		if err := bd.rdb.HSet(ctx, bd.keys.Entry(reqs[i]), "status", string(st)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(0, blackboard.StatusRetracted)
	setStatus(withdrawnPage, blackboard.StatusSuperseded) // the second page
	setStatus(n-1, blackboard.StatusRetracted)
	setStatus(3, blackboard.StatusRetracted)
	if _, err := s.Transition(ctx, wire.JobID(reqs[3]), wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err) // ended: no longer active
	}
	if err := bd.rdb.Del(ctx, bd.keys.Entry(reqs[5])).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Set(ctx, bd.keys.Entry(reqs[5]), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.HDel(ctx, bd.keys.Job(wire.JobID(reqs[6])), "request_entry_id").Err(); err != nil {
		t.Fatal(err)
	}
	got, scanned, err := s.WithdrawnRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{reqs[0], reqs[withdrawnPage], reqs[n-1]}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || scanned != n-1 {
		t.Errorf("WithdrawnRequests = %v, %d scanned; want %v, %d", got, scanned, want, n-1)
	}
}

// BenchmarkWithdrawnCheck: one pass of the broker's cancel check over
// 2,000 active jobs: WithdrawnRequests (the reads inside Redis, a script
// per 500 jobs) against the two pipelined HGETs per job the broker sent
// before (ZRANGE, each record's request_entry_id, each entry's status).
func BenchmarkWithdrawnCheck(b *testing.B) {
	bd := newBoard(b)
	s := bd.jobs
	bd.acceptMany(b, 2000, okData)
	b.Run("script", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, n, err := s.WithdrawnRequests(b.Context()); err != nil || n != 2000 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("commands", func(b *testing.B) {
		b.ReportAllocs()
		ctx := b.Context()
		for b.Loop() {
			ids, err := bd.rdb.ZRange(ctx, bd.keys.JobsActive(), 0, -1).Result()
			if err != nil || len(ids) != 2000 {
				b.Fatal(len(ids), err)
			}
			reqs := make([]*redis.StringCmd, len(ids))
			if _, err := bd.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, id := range ids {
					reqs[i] = p.HGet(ctx, bd.keys.Job(id), "request_entry_id")
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			sts := make([]*redis.StringCmd, len(ids))
			if _, err := bd.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, c := range reqs {
					sts[i] = p.HGet(ctx, bd.keys.Entry(c.Val()), "status")
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFinishedWithEntry: a job's end takes two round trips (the record's
// step, then the job entry's update with compute.job.finished in the same
// step; three before), and the event comes after the entries that say how
// the job ended: its own, and its duplicates' when it has some.
func TestFinishedWithEntry(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	rt := redistest.CountRoundTrips(bd.rdb)
	zero := 0
	start := func(j Job) {
		t.Helper()
		if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{}); err != nil {
			t.Fatal(err)
		}
	}
	end := func(j Job) int64 {
		t.Helper()
		n := rt.N()
		if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobSucceeded, Update{ExitCode: &zero}); err != nil {
			t.Fatal(err)
		}
		return rt.N() - n
	}
	// after returns the stream's events from cursor on: type and entry id.
	after := func(cursor string) ([]string, string) {
		t.Helper()
		evs, next, err := bd.store.Events(ctx, cursor, "", 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			var p struct {
				EntryID string `json:"entry_id"`
				JobID   string `json:"job_id"`
				Field   string `json:"field"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			out = append(out, e.Type+" "+p.EntryID+p.JobID+" "+p.Field)
		}
		return out, next
	}

	j, _ := bd.accept(t, s, bd.post(t, "m", okData))
	start(j)
	_, cursor := after("0")
	if n := end(j); n != 2 {
		t.Errorf("the end took %d round trips, want 2", n)
	}
	got, cursor := after(cursor)
	want := []string{
		blackboard.EventEntryUpdated + " " + j.JobID + " data",
		blackboard.EventEntryUpdated + " " + j.JobID + " metadata",
		EventJobFinished + " " + j.JobID + " ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events of the end (-want +got):\n%s", diff)
	}

	// With a duplicate, the event follows the duplicate's entry too.
	first := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	second := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	j1, _ := bd.accept(t, s, first)
	bd.accept(t, s, second)
	dup := wire.JobID(second.EntryID)
	start(j1)
	_, cursor = after(cursor)
	end(j1)
	got, _ = after(cursor)
	want = []string{
		blackboard.EventEntryUpdated + " " + j1.JobID + " data",
		blackboard.EventEntryUpdated + " " + j1.JobID + " metadata",
		blackboard.EventEntryUpdated + " " + dup + " data",
		blackboard.EventEntryUpdated + " " + dup + " metadata",
		EventJobFinished + " " + j1.JobID + " ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events of the end with a duplicate (-want +got):\n%s", diff)
	}
	if f := bd.finishedEvents(t); len(f) != 2 || f[j.JobID]["status"] != "succeeded" || f[j1.JobID]["status"] != "succeeded" {
		t.Errorf("finished events %v", f)
	}
}

// TestChangeMirrorsLater: Change changes the record at once and leaves
// the job entry (and a terminal job's compute.job.finished) to the
// mirror it returns, which writes them when run.
func TestChangeMirrorsLater(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", okData)
	j, _ := bd.accept(t, s, spec)

	step := func(from, to wire.JobStatus, u Update) {
		t.Helper()
		got, mirror, err := s.Change(ctx, j.JobID, from, to, u)
		if err != nil || got.Status != to {
			t.Fatalf("change %s → %s: %+v, %v", from, to, got, err)
		}
		if rec, err := s.Get(ctx, j.JobID); err != nil || rec.Status != to {
			t.Fatalf("record after the change: %s, %v; want %s", rec.Status, err, to)
		}
		if jd, _ := bd.jobEntry(t, spec.EntryID); jd.Status != from {
			t.Fatalf("job entry before the mirror: %s; want %s still", jd.Status, from)
		}
		if _, ok := bd.finishedEvents(t)[j.JobID]; ok {
			t.Fatalf("compute.job.finished raised before the mirror of %s → %s", from, to)
		}
		if err := mirror(ctx); err != nil {
			t.Fatal(err)
		}
		jd, _ := bd.jobEntry(t, spec.EntryID)
		if jd.Status != to {
			t.Fatalf("job entry after the mirror: %+v; want %s", jd, to)
		}
	}
	step(wire.JobQueued, wire.JobRunning, Update{Node: "n1"})
	code := 0
	step(wire.JobRunning, wire.JobSucceeded, Update{ExitCode: &code})
	if ev, ok := bd.finishedEvents(t)[j.JobID]; !ok || ev["status"] != string(wire.JobSucceeded) {
		t.Fatalf("compute.job.finished after the mirror: %v, %v", ev, ok)
	}
}

// TestLostMirrorRepaired: an adapter that dies between a job's end (the
// record's compare-and-set) and its mirror left the job entry saying the
// job still runs, and compute.job.finished unraised, for good: a module
// waiting on its job as wire-format.md §5 says waited forever. A start's
// lost mirror left the entry queued while the job ran. Every change is
// now listed until its mirror is done, and RepairMirrors does a mirror
// that was lost, once the change is older than its grace.
func TestLostMirrorRepaired(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	const grace = 10 * time.Second
	repair := func(want int) {
		t.Helper()
		n, err := s.RepairMirrors(ctx, grace)
		if err != nil || n != want {
			t.Fatalf("RepairMirrors: %d, %v; want %d", n, err, want)
		}
	}

	// An end whose mirror was lost (the adapter was killed after the
	// compare-and-set).
	lost := bd.post(t, "m", okData)
	lj, _ := bd.accept(t, s, lost)
	if _, err := s.Transition(ctx, lj.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	code := 0
	if _, _, err := s.Change(ctx, lj.JobID, wire.JobRunning, wire.JobSucceeded, Update{ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	// A start whose mirror was lost.
	started := bd.post(t, "m", okData)
	sj, _ := bd.accept(t, s, started)
	if _, _, err := s.Change(ctx, sj.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	// An end mirrored as usual, an explanation (queued → queued), and a
	// cancelled start (a withdrawn request: mirrored within the step):
	// nothing to repair.
	done := bd.post(t, "m", okData)
	dj, _ := bd.accept(t, s, done)
	if _, err := s.Transition(ctx, dj.JobID, wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	ex := bd.post(t, "m", okData)
	ej, _ := bd.accept(t, s, ex)
	if _, err := s.Transition(ctx, ej.JobID, wire.JobQueued, wire.JobQueued, Update{Explanation: json.RawMessage(`{"reason":"waiting"}`)}); err != nil {
		t.Fatal(err)
	}
	wd := bd.post(t, "m", okData)
	wj, _ := bd.accept(t, s, wd)
	if err := bd.store.Retract(ctx, wd.EntryID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, wj.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); !errors.Is(err, ErrWithdrawn) {
		t.Fatalf("start of a withdrawn request: %v; want ErrWithdrawn", err)
	}

	// A job with a duplicate request (the same idempotency key): its end
	// is mirrored onto both entries and the event raised after them, and
	// then it is unlisted too.
	orig := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	oj, _ := bd.accept(t, s, orig)
	dup := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	if j, created := bd.accept(t, s, dup); created || j.JobID != oj.JobID {
		t.Fatalf("duplicate accepted as %s (created %v); want job %s", j.JobID, created, oj.JobID)
	}
	if _, err := s.Transition(ctx, oj.JobID, wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	if jd, _ := bd.jobEntry(t, dup.EntryID); jd.Status != wire.JobCancelled {
		t.Fatalf("duplicate's job entry after the end: %s; want cancelled", jd.Status)
	}

	repair(0) // within the grace: its own mirror may still be on its way
	if jd, _ := bd.jobEntry(t, lost.EntryID); jd.Status != wire.JobRunning {
		t.Fatalf("job entry before the repair: %s; want running still", jd.Status)
	}
	bd.clk.Advance(grace + time.Second)
	repair(2)
	if jd, _ := bd.jobEntry(t, started.EntryID); jd.Status != wire.JobRunning || jd.Node != "n2" {
		t.Fatalf("started job's entry after the repair: %+v; want running on n2", jd)
	}
	if _, ok := bd.finishedEvents(t)[sj.JobID]; ok {
		t.Fatal("compute.job.finished raised for a job that runs")
	}
	jd, _ := bd.jobEntry(t, lost.EntryID)
	if jd.Status != wire.JobSucceeded || jd.ExitCode == nil || *jd.ExitCode != 0 {
		t.Fatalf("job entry after the repair: %+v; want succeeded, exit 0", jd)
	}
	if ev, ok := bd.finishedEvents(t)[lj.JobID]; !ok || ev["status"] != string(wire.JobSucceeded) {
		t.Fatalf("compute.job.finished after the repair: %v, %v", ev, ok)
	}
	repair(0) // done once

	// The same for a job with a duplicate whose end's mirror was lost:
	// both entries get it.
	orig2 := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k2"}`)
	oj2, _ := bd.accept(t, s, orig2)
	dup2 := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k2"}`)
	bd.accept(t, s, dup2)
	if _, _, err := s.Change(ctx, oj2.JobID, wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	// A correction whose mirror was lost, of a job ended lost and
	// mirrored.
	corr := bd.post(t, "m", okData)
	cj, _ := bd.accept(t, s, corr)
	if _, err := s.Transition(ctx, cj.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, cj.JobID, wire.JobRunning, wire.JobFailed, Update{
		Error: &wire.JobError{Code: "lost", Message: "node silent"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Change(ctx, cj.JobID, wire.JobFailed, wire.JobSucceeded, Update{ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	// An end whose record is gone (its retention ran out) before the
	// repair: nothing to mirror, and it is not listed any more.
	gone := bd.post(t, "m", okData)
	gj, _ := bd.accept(t, s, gone)
	if _, _, err := s.Change(ctx, gj.JobID, wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Del(ctx, bd.keys.Job(gj.JobID)).Err(); err != nil {
		t.Fatal(err)
	}
	bd.clk.Advance(grace + time.Second)
	repair(2)
	for _, e := range []AcceptSpec{orig2, dup2} {
		if jd, _ := bd.jobEntry(t, e.EntryID); jd.Status != wire.JobCancelled {
			t.Errorf("job entry of %s after the repair: %s; want cancelled", e.EntryID, jd.Status)
		}
	}
	if _, ok := bd.finishedEvents(t)[oj2.JobID]; !ok {
		t.Error("no compute.job.finished for the job with a duplicate after the repair")
	}
	if jd, _ := bd.jobEntry(t, corr.EntryID); jd.Status != wire.JobSucceeded || jd.Error != nil {
		t.Fatalf("corrected job's entry after the repair: %+v; want succeeded without error", jd)
	}
	repair(0)
}

// TestFailedDuplicateMirrorRepaired: a duplicate request's job entry that
// the end's mirror could not write keeps the job listed, so that
// RepairMirrors writes it once it can.
func TestFailedDuplicateMirrorRepaired(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	orig := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	oj, _ := bd.accept(t, s, orig)
	dup := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	bd.accept(t, s, dup)
	// The duplicate's entry key holds something else: its update fails
	// (WRONGTYPE), and so would posting it again.
	dupKey := bd.keys.Entry(wire.JobID(dup.EntryID))
	if err := bd.rdb.Rename(ctx, dupKey, dupKey+":saved").Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Set(ctx, dupKey, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, oj.JobID, wire.JobQueued, wire.JobCancelled, Update{}); err != nil {
		t.Fatal(err)
	}
	bd.clk.Advance(11 * time.Second)
	if n, err := s.RepairMirrors(ctx, 10*time.Second); err != nil || n != 1 {
		t.Fatalf("RepairMirrors while the duplicate's entry cannot be written: %d, %v; want 1 (tried), nil", n, err)
	}
	if err := bd.rdb.Rename(ctx, dupKey+":saved", dupKey).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RepairMirrors(ctx, 10*time.Second); err != nil || n != 1 {
		t.Fatalf("RepairMirrors once it can be written: %d, %v; want 1", n, err)
	}
	if jd, _ := bd.jobEntry(t, dup.EntryID); jd.Status != wire.JobCancelled {
		t.Fatalf("duplicate's job entry after the repair: %s; want cancelled", jd.Status)
	}
	if n, err := s.RepairMirrors(ctx, 10*time.Second); err != nil || n != 0 {
		t.Fatalf("RepairMirrors after: %d, %v; want 0", n, err)
	}
}

// TestStaleMirrorSkipped: a writer that stalled between a change of a
// record and its mirror (Change, then the Mirror later) wrote the older
// change onto the job entry after a newer change had been mirrored: the
// entry went back (say, running on a node the job had left, or the lost
// end the node's agent had since corrected) and stayed so until the job's
// next change, with a second compute.job.finished for an outcome that no
// longer held. A mirror now applies only while the record is at the
// version it mirrors; a stale one writes nothing, and leaves nothing to
// repair.
func TestStaleMirrorSkipped(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	j, _ := bd.accept(t, s, spec)
	dup := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	bd.accept(t, s, dup)
	entries := func(want wire.JobStatus, node, when string) {
		t.Helper()
		for _, id := range []string{spec.EntryID, dup.EntryID} {
			if jd, _ := bd.jobEntry(t, id); jd.Status != want || jd.Node != node {
				t.Fatalf("job entry of %s %s: %s on %q; want %s on %q, as the record says", id, when, jd.Status, jd.Node, want, node)
			}
		}
	}

	// A start held, then the scheduler's requeue of the job, mirrored.
	_, lateStart, err := s.Change(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobQueued, Update{Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	if err := lateStart(ctx); err != nil {
		t.Fatalf("a stale mirror: %v; want nil (nothing to do)", err)
	}
	entries(wire.JobQueued, "n2", "after the late start mirror")

	// Started on n2 and mirrored; the scheduler's lost end held, then the
	// agent's correction to the true outcome, mirrored.
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n2", ExpectNode: "n2"}); err != nil {
		t.Fatal(err)
	}
	_, lateLost, err := s.Change(ctx, j.JobID, wire.JobRunning, wire.JobFailed, Update{
		Error: &wire.JobError{Code: wire.JobErrorLost, Message: "node n2 silent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	if _, err := s.Transition(ctx, j.JobID, wire.JobFailed, wire.JobSucceeded, Update{ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	if err := lateLost(ctx); err != nil {
		t.Fatalf("a stale end's mirror: %v; want nil", err)
	}
	entries(wire.JobSucceeded, "n2", "after the late lost end's mirror")
	evs, _, err := bd.store.Events(ctx, "0", EventJobFinished, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		var p map[string]any
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p["job_id"] == j.JobID && p["status"] != string(wire.JobSucceeded) {
			t.Fatalf("compute.job.finished %v raised by a stale mirror", p)
		}
	}

	bd.clk.Advance(11 * time.Second)
	if n, err := s.RepairMirrors(ctx, 10*time.Second); err != nil || n != 0 {
		t.Fatalf("RepairMirrors: %d, %v; want 0 (every change mirrored in order)", n, err)
	}
}
