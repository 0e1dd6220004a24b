package broker

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// forge appends a message with the given fields to intake lane key, as any
// poster with write access to the lane can.
func (bd *board) forge(t testing.TB, lane string, fields ...any) {
	t.Helper()
	if err := bd.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: lane, Values: fields}).Err(); err != nil {
		t.Fatal(err)
	}
}

// requestJSON is the canonical JSON of a fresh compute.request entry of
// module with id, not stored anywhere.
func requestJSON(t testing.TB, id, module, data string) string {
	t.Helper()
	e := blackboard.NewEntry(blackboard.RequestTopic, module, json.RawMessage(data))
	e.ID, e.Timestamp = id, 1767225600
	b, err := e.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// forgeEvent appends a blackboard.entry.updated event saying entry id was
// retracted, as any poster with write access to the events stream can.
func (bd *board) forgeRetracted(t testing.TB, id string) {
	t.Helper()
	payload := `{"entry_id":"` + id + `","topic":"compute.request","field":"status","old":"active","new":"retracted"}`
	if err := bd.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: bd.keys.Events(), Values: []any{
		"event_id", blackboard.NewID(), "event_type", blackboard.EventEntryUpdated, "source", "blackboard",
		"timestamp", "1767225600", "payload", payload}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// A poster-written replayed=1 does not skip the admission limits: only an
// operator replay (which records the message id where posters cannot
// write) does.
func TestForgedReplayedIsIgnored(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{ModuleRate: 0.001, ModuleBurst: 1})
	bd.post(t, "noisy", okData)
	feed(t, b) // takes the only token
	forged := blackboard.NewID()
	bd.forge(t, bd.keys.Inbox(4), "v", "1", "entry_id", forged, "replayed", "1",
		"entry", requestJSON(t, forged, "noisy", okData))
	feed(t, b)
	if n := b.inbox.ModuleLen("noisy"); n != 1 {
		t.Errorf("inbox holds %d requests of noisy, want 1 (the forged replay must be rate limited)", n)
	}
	if jd, ok := bd.jobEntry(t, forged); !ok || jd.ReasonCode != wire.CodeRateLimited {
		t.Errorf("forged replay's job entry %+v %v, want rejected rate_limited", jd, ok)
	}
}

// An operator replay still skips the limits (the replayed request was
// admitted, or refused, once already).
func TestOperatorReplaySkipsLimits(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{ModuleRate: 0.001, ModuleBurst: 1})
	bd.post(t, "noisy", okData)
	second := bd.post(t, "noisy", okData)
	feed(t, b)
	dls := bd.deadLetters(t)
	if len(dls) != 1 || dls[0].EntryID != second {
		t.Fatalf("dead letters %+v", dls)
	}
	if _, err := b.Inspector().DLQReplay(t.Context(), dls[0].ID); err != nil {
		t.Fatal(err)
	}
	feed(t, b)
	if n := b.inbox.ModuleLen("noisy"); n != 2 {
		t.Errorf("inbox holds %d requests of noisy, want 2 (an operator replay skips the limits)", n)
	}
}

// A forged retracted event cancels nothing: the broker re-reads the
// request entry's own status first.
func TestForgedRetractedEventCancelsNothing(t *testing.T) {
	bd := newBoard(t)
	var got []Cancel
	b := bd.broker(t, Config{OnCancel: func(c Cancel) { got = append(got, c) }})
	ctx := t.Context()
	if _, _, err := b.eventsStep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	running := bd.post(t, "victim", okData)
	feed(t, b)
	j, _ := accept(t, b, next(t, b))
	if _, err := b.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{}); err != nil {
		t.Fatal(err)
	}
	waiting := bd.post(t, "victim", okData)
	feed(t, b)
	bd.forgeRetracted(t, running)
	bd.forgeRetracted(t, waiting)
	if _, _, err := b.eventsStep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("OnCancel called %+v for a forged event", got)
	}
	if j, _ := b.jobs.Get(ctx, j.JobID); j.CancelRequested || j.Status != wire.JobRunning {
		t.Errorf("running job %s cancel_requested %v after a forged event", j.Status, j.CancelRequested)
	}
	if _, ok := b.inbox.Get(waiting); !ok {
		t.Error("waiting request was removed from the inbox by a forged event")
	}
	if jd, ok := bd.jobEntry(t, waiting); ok {
		t.Errorf("waiting request got a job entry %+v", jd)
	}
}

// A message whose entry_id differs from its entry's, or a malformed message
// naming another request, is dead-lettered as itself: the request it names
// and that request's job are left alone.
func TestForgedMessageLeavesNamedRequestAlone(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	queued := bd.post(t, "victim", okData)
	feed(t, b)
	j, _ := accept(t, b, next(t, b))
	waiting := bd.post(t, "victim", okData)
	feed(t, b)

	other := blackboard.NewID()
	// Malformed, naming the accepted request (replayed=1 so that a
	// first delivery counts as a redelivery).
	bd.forge(t, bd.keys.Inbox(4), "v", "1", "entry_id", queued, "replayed", "1", "entry", "{bad")
	// entry_id of the waiting request, entry JSON of another id.
	bd.forge(t, bd.keys.Inbox(4), "v", "1", "entry_id", waiting, "entry", requestJSON(t, other, "victim", okData))
	// entry_id of another id, entry JSON of the accepted request.
	bd.forge(t, bd.keys.Inbox(4), "v", "1", "entry_id", other, "replayed", "1",
		"entry", requestJSON(t, queued, "victim", okData))
	feed(t, b)

	if got, _ := b.jobs.Get(ctx, j.JobID); got.Status != wire.JobQueued {
		t.Errorf("accepted job is %s after forged messages, want queued", got.Status)
	}
	if jd, _ := bd.jobEntry(t, queued); jd.Status != wire.JobQueued {
		t.Errorf("accepted job entry is %s, want queued", jd.Status)
	}
	if st := bd.entryStatus(t, waiting); st != blackboard.StatusActive {
		t.Errorf("waiting request entry is %s, want active", st)
	}
	for _, id := range []string{waiting, other} {
		if jd, ok := bd.jobEntry(t, id); ok {
			t.Errorf("request %s got a job entry %+v from a forged message", id, jd)
		}
	}
	if _, ok := b.inbox.Get(waiting); !ok {
		t.Error("waiting request left the inbox")
	}
	if n := len(bd.deadLetters(t)); n != 3 {
		t.Errorf("%d dead letters, want 3", n)
	}
}

// A retraction at any moment around acceptance ends the job cancelled (or
// marked cancel_requested, when it already ran): never a job that runs on
// while its request says retracted. A plain status write is enough (no
// event), and so is the event.
func TestRetractionAtAnyMoment(t *testing.T) {
	bd := newBoard(t)
	var mu sync.Mutex
	cancels := map[string]bool{}
	b := bd.broker(t, Config{OnCancel: func(c Cancel) { mu.Lock(); cancels[c.JobID] = true; mu.Unlock() }})
	ctx := t.Context()
	if _, _, err := b.eventsStep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	const tries = 300
	for i := range tries {
		id := bd.post(t, "m", okData)
		feed(t, b)
		ds, err := b.NextBatch(ctx, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("NextBatch: %v, %d", err, len(ds))
		}
		plain := i%2 == 0 // half by a plain HSET, half through the store (with the event)
		retract := func() {
			if plain {
				bd.rdb.HSet(ctx, bd.keys.Entry(id), "status", "retracted")
			} else if err := bd.store.Retract(ctx, id); err != nil {
				t.Error(err)
			}
		}
		// The retraction lands at one of the steps of the adapter's
		// handling: before accepting, during it, before starting, after.
		at := rng.IntN(5)
		var wg sync.WaitGroup
		if at == 1 {
			wg.Go(retract)
		}
		if at == 0 {
			retract()
		}
		rs := b.AcceptBatch(ctx, ds)
		wg.Wait()
		if at == 2 {
			retract()
		}
		if _, _, err := b.eventsStep(ctx, 0); err != nil {
			t.Fatal(err)
		}
		job := wire.JobID(id)
		started := false
		if rs[0].Err == nil && rs[0].Job.Status == wire.JobQueued {
			if at == 3 {
				retract()
			}
			_, err := b.jobs.Transition(ctx, job, wire.JobQueued, wire.JobRunning, jobs.Update{})
			started = err == nil
			if err != nil && !errors.Is(err, jobs.ErrConflict) {
				t.Fatal(err)
			}
		}
		if at == 4 {
			retract()
		}
		if _, _, err := b.eventsStep(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := b.cancelStep(ctx); err != nil {
			t.Fatal(err)
		}
		rec, err := b.jobs.Get(ctx, job)
		mu.Lock()
		signalled := cancels[job]
		mu.Unlock()
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobCancelled {
				t.Errorf("try %d (at %d): no record, job entry %s, want cancelled", i, at, jd.Status)
			}
		case err != nil:
			t.Fatal(err)
		case rec.Status == wire.JobCancelled:
			if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobCancelled {
				t.Errorf("try %d (at %d): record cancelled, job entry %s", i, at, jd.Status)
			}
		case rec.Status == wire.JobRunning || rec.Status == wire.JobQueued:
			if !rec.CancelRequested || !signalled {
				t.Errorf("try %d (at %d, plain %v): job %s (started %v) with cancel_requested %v, signalled %v after its request was retracted",
					i, at, plain, rec.Status, started, rec.CancelRequested, signalled)
			}
		default:
			t.Errorf("try %d (at %d): job %s", i, at, rec.Status)
		}
	}
}

// postAs posts a compute.request entry of module with id (empty: a fresh
// "<module>:<hex>" id) and returns the id.
func (bd *board) postAs(t testing.TB, module, id, data string) string {
	t.Helper()
	e := blackboard.NewEntry(blackboard.RequestTopic, module, json.RawMessage(data))
	e.ID = id
	if id == "" {
		e.ID = blackboard.NewModuleID(module)
	}
	if _, err := bd.store.Post(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// On a board with ACLs the module is the lane's: a request naming another
// module (in source_module or in its entry id) is refused as itself with
// identity_mismatch, legacy lanes are not read, and a module bills only
// what MayBill allows (by default its own account).
func TestACLIdentity(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{Identity: IdentityACL})
	ctx := t.Context()
	good := bd.postAs(t, "alice", "", okData)
	plain := bd.postAs(t, "alice", blackboard.NewID(), okData) // no module in the id
	billsBob := bd.postAs(t, "alice", "", `{"command":["echo"],"account":"bob"}`)
	bobsID := "bob:" + blackboard.NewID()
	bd.forge(t, bd.keys.ModuleInbox("alice", 4), "v", "2", "entry_id", bobsID,
		"entry", requestJSON(t, bobsID, "bob", okData)) // alice posting as bob
	aliceAsBob := "alice:" + blackboard.NewID()
	bd.forge(t, bd.keys.ModuleInbox("alice", 4), "v", "2", "entry_id", aliceAsBob,
		"entry", requestJSON(t, aliceAsBob, "bob", okData)) // her id, bob's source_module
	legacy := blackboard.NewID()
	bd.forge(t, bd.keys.Inbox(4), "v", "1", "entry_id", legacy, "entry", requestJSON(t, legacy, "alice", okData))
	feed(t, b)

	d := next(t, b)
	if d.EntryID != good || d.Module != "alice" || d.Request.Account != "alice" {
		t.Errorf("handed out %s of %s billing %s, want %s of alice billing alice", d.EntryID, d.Module, d.Request.Account, good)
	}
	if n := b.inbox.Len(); n != 1 {
		t.Errorf("inbox holds %d, want 1", n)
	}
	want := map[string]wire.Code{billsBob: wire.CodeAccountNotAllowed, aliceAsBob: wire.CodeIdentityMismatch}
	for id, code := range want {
		if jd, ok := bd.jobEntry(t, id); !ok || jd.ReasonCode != code {
			t.Errorf("job entry of %s: %+v %v, want rejected %s", id, jd, ok, code)
		}
	}
	// Refused as themselves: a job entry would be written for an entry id
	// that is not the poster's.
	for _, id := range []string{plain, bobsID, legacy} {
		if jd, ok := bd.jobEntry(t, id); ok {
			t.Errorf("forged request %s got a job entry %+v", id, jd)
		}
	}
	codes := map[string]int{}
	for _, dl := range bd.deadLetters(t) {
		codes[dl.Code]++
	}
	if codes[string(wire.CodeIdentityMismatch)] != 3 || codes[string(wire.CodeAccountNotAllowed)] != 1 {
		t.Errorf("dead letters by code %v, want 3 identity_mismatch, 1 account_not_allowed", codes)
	}
	if n, _ := bd.rdb.XLen(ctx, bd.keys.Inbox(4)).Result(); n != 1 {
		t.Errorf("legacy lane holds %d, want its 1 message unread", n)
	}

	// MayBill opens other accounts.
	b2 := newBoard(t)
	br := b2.broker(t, Config{Identity: IdentityACL, MayBill: func(m, a string) bool { return a == m || a == "shared" }})
	ok := b2.postAs(t, "alice", "", `{"command":["echo"],"account":"shared"}`)
	no := b2.postAs(t, "alice", "", `{"command":["echo"],"account":"bob"}`)
	feed(t, br)
	if _, held := br.inbox.Get(ok); !held {
		t.Error("request billing an allowed account not held")
	}
	if jd, _ := b2.jobEntry(t, no); jd.ReasonCode != wire.CodeAccountNotAllowed {
		t.Errorf("job entry %+v, want account_not_allowed", jd)
	}
}

// Registry members that name no lane, or no valid module, are dropped and
// create nothing; a lane registered later is found by the next feed step.
func TestLaneDiscovery(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{Identity: IdentityACL})
	ctx := t.Context()
	bd.rdb.SAdd(ctx, bd.keys.InboxLanes(), "ghost:p4", "bad*name:p1", "x:p12", "nolane")
	feed(t, b)
	if n, _ := bd.rdb.SCard(ctx, bd.keys.InboxLanes()).Result(); n != 0 {
		t.Errorf("registry holds %d junk members, want 0", n)
	}
	if n, _ := bd.rdb.Exists(ctx, bd.keys.ModuleInbox("ghost", 4)).Result(); n != 0 {
		t.Error("a lane was created for a junk member")
	}
	id := bd.postAs(t, "late", "", okData)
	if n := feed(t, b); n != 1 {
		t.Fatalf("read %d, want 1", n)
	}
	if _, ok := b.inbox.Get(id); !ok {
		t.Error("request on a newly registered lane not read")
	}
}

// Per-module lanes are read fairly within a priority: after a flood from
// one module, another module's single request at the same priority is
// read by the first read, not after the flood.
func TestFloodDoesNotDelayOtherModule(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{InboxCapacity: 100})
	ctx := t.Context()
	const flood = 10000
	for i := 0; i < flood; i += 500 {
		batch := make([]*blackboard.Entry, 500)
		for j := range batch {
			batch[j] = blackboard.NewEntry(blackboard.RequestTopic, "flood", json.RawMessage(`{"command":["x"],"priority":5}`))
		}
		if _, err := bd.store.PostMany(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	calm := bd.post(t, "calm", `{"command":["x"],"priority":5}`)
	if _, err := b.feedStep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.inbox.Get(calm); !ok {
		t.Fatalf("calm's request was not read by the first read (inbox holds %v)", b.inbox.ModuleCounts())
	}
	if n := b.inbox.ModuleLen("flood"); n != 99 {
		t.Errorf("inbox holds %d of the flood, want the other 99 slots", n)
	}
}

// TestCancelCheckIsPaced: with many active jobs the cancel check's passes
// spread out so that its reads (two keys per active job) average at most
// cancelCheckRate a second; with few, it runs at every tick.
func TestCancelCheckIsPaced(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	active, passes := 10_000, 0
	step := pacedCancel(clk, func(context.Context) (int, error) { passes++; return active, nil })
	tick := func(d time.Duration) {
		clk.Advance(d)
		if err := step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	tick(0)
	for range 4 {
		tick(2 * time.Second) // the default CancelCheckInterval
	}
	if passes != 1 {
		t.Fatalf("%d passes over 10,000 active jobs in 8 s, want 1 (20,000 reads at %d/s: one per 10 s)", passes, cancelCheckRate)
	}
	tick(2 * time.Second)
	if passes != 2 {
		t.Fatalf("%d passes after 10 s, want 2", passes)
	}
	active = 100
	tick(10 * time.Second)
	for range 3 {
		tick(2 * time.Second)
	}
	if passes != 6 {
		t.Fatalf("%d passes, want one per tick again with 100 active jobs (6)", passes)
	}
}
