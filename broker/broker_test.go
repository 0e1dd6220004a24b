package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestAccept: a delivery becomes a queued job with its entry, its request
// consumed and its message gone. (What a job does next, Transition, is
// tested in package jobs: TestTransition.)
func TestAccept(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	id := bd.post(t, "planner", `{"command":["echo","hi"],"priority":7,"name":"n1"}`)
	if n := feed(t, b); n != 1 {
		t.Fatalf("read %d, want 1", n)
	}
	d := next(t, b)
	if d.EntryID != id || d.Priority != 7 || d.Lane != 7 || d.Module != "planner" || d.Deliveries != 1 {
		t.Fatalf("delivery %+v", d)
	}
	j, created := accept(t, b, d)
	if !created || j.JobID != wire.JobID(id) || j.Status != wire.JobQueued || j.Request.Name != "n1" {
		t.Fatalf("job %+v created %v", j, created)
	}
	if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
		t.Errorf("request entry %s, want consumed", st)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d messages, %d pending; want 0, 0", l, p)
	}
	if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobQueued || jd.Account != "planner" || jd.Priority != 7 {
		t.Errorf("job entry %+v %v", jd, ok)
	}
	if b.inbox.Len() != 0 {
		t.Errorf("inbox holds %d", b.inbox.Len())
	}
	if rec, err := b.jobs.Get(t.Context(), j.JobID); err != nil || !cmp.Equal(rec, j, cmpopts.EquateEmpty()) {
		t.Errorf("record %+v, %v; Accept returned %+v", rec, err, j)
	}
}

// TestAcceptCrashBetweenSteps simulates a broker that dies after each step
// of Accept: a second broker takes the request over and the request is
// neither lost nor accepted twice.
func TestAcceptCrashBetweenSteps(t *testing.T) {
	tests := map[string]struct {
		steps       int  // Accept steps the first broker completes before dying
		wantCreated bool // the second broker's Accept creates the record
	}{
		"crash after hand-off": {steps: 0, wantCreated: true},
		"crash after record":   {steps: 1},
		"crash after entry":    {steps: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bd := newBoard(t)
			ctx := t.Context()
			a := bd.broker(t, Config{Consumer: "a", ClaimIdle: 20 * time.Millisecond})
			id := bd.post(t, "m", okData)
			feed(t, a)
			d := next(t, a)
			if tc.steps >= 1 {
				j, created, err := a.acceptRecord(ctx, d)
				if err != nil || !created {
					t.Fatal(created, err)
				}
				if tc.steps >= 2 {
					if err := a.publishJob(ctx, d, j); err != nil {
						t.Fatal(err)
					}
				}
			}
			// a is gone. b takes over once the message has been idle.
			b := bd.broker(t, Config{Consumer: "b", ClaimIdle: 20 * time.Millisecond})
			time.Sleep(40 * time.Millisecond)
			n, err := b.reclaimStep(ctx)
			if err != nil || n != 1 {
				t.Fatalf("reclaim = %d, %v", n, err)
			}
			// The job was never seen by an adapter: it is handed out again,
			// and Accept completes the remaining steps.
			d2 := next(t, b)
			if d2.Deliveries != 2 {
				t.Errorf("deliveries %d, want 2", d2.Deliveries)
			}
			j, created := accept(t, b, d2)
			if created != tc.wantCreated || j.Status != wire.JobQueued || j.RequestEntryID != id {
				t.Errorf("Accept = %+v, created %v", j, created)
			}
			if l, p := bd.laneTotals(t); l != 0 || p != 0 {
				t.Errorf("lanes hold %d, %d pending", l, p)
			}
			if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
				t.Errorf("request %s", st)
			}
			if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobQueued {
				t.Errorf("job entry %+v", jd)
			}
			if n := bd.idemKeys(t); n != 1 {
				t.Errorf("%d idempotency keys", n)
			}
			// The dead broker's adapter tries to finish: it gets the same job.
			if tc.steps > 0 {
				j, created, err := a.acceptRecord(ctx, d)
				if err != nil || created || j.JobID != wire.JobID(id) {
					t.Errorf("late accept = %+v %v %v", j, created, err)
				}
			}
		})
	}
}

// TestResumeAfterCrash: a request redelivered after its first broker died
// mid-way is finished without bothering an adapter when an earlier decision
// already settled it.
func TestResumeAfterCrash(t *testing.T) {
	t.Run("job already started", func(t *testing.T) {
		bd := newBoard(t)
		ctx := t.Context()
		cfg := Config{ClaimIdle: 10 * time.Millisecond}
		a := bd.broker(t, withConsumer(cfg, "a"))
		id := bd.post(t, "m", okData)
		feed(t, a)
		d := next(t, a)
		j, _, err := a.acceptRecord(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		b := bd.broker(t, withConsumer(cfg, "b"))
		if n, err := b.reclaimStep(ctx); err != nil || n != 1 {
			t.Fatalf("reclaim = %d, %v", n, err)
		}
		if b.inbox.Len() != 0 {
			t.Fatal("a started job was handed out again")
		}
		if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
			t.Errorf("request %s", st)
		}
		if l, p := bd.laneTotals(t); l != 0 || p != 0 {
			t.Errorf("lanes hold %d, %d pending", l, p)
		}
	})
	t.Run("refusal half done", func(t *testing.T) {
		bd := newBoard(t)
		ctx := t.Context()
		cfg := Config{ClaimIdle: 10 * time.Millisecond, Check: func(wire.Request) *wire.Error {
			return &wire.Error{Code: wire.CodeImpossibleRequest, Message: "no such GPU"}
		}}
		a := bd.broker(t, withConsumer(cfg, "a"))
		id := bd.post(t, "m", okData)
		if err := a.EnsureGroups(ctx); err != nil { // find the module's lane
			t.Fatal(err)
		}
		if _, err := a.readNew(ctx, 10); err != nil { // read, then die before deciding
			t.Fatal(err)
		}
		// The first decision got as far as the job entry.
		jd := wire.RejectedJob(wire.EntryInfo{ID: id, SourceModule: "m"},
			&wire.Error{Code: wire.CodeRateLimited, Message: "over rate"}, 1)
		if _, err := a.putJobEntry(ctx, jd); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		b := bd.broker(t, withConsumer(cfg, "b"))
		if _, err := b.reclaimStep(ctx); err != nil {
			t.Fatal(err)
		}
		dls := bd.deadLetters(t)
		if len(dls) != 1 || dls[0].Code != string(wire.CodeRateLimited) {
			t.Fatalf("dead letters %+v (the first decision must stand)", dls)
		}
		if l, p := bd.laneTotals(t); l != 0 || p != 0 {
			t.Errorf("lanes hold %d, %d pending", l, p)
		}
	})
}

// TestDeliveryLimitAfterAcceptedRecord: a request whose Accept was cut
// short again and again is dead-lettered, and its queued job record fails
// instead of lingering in P:jobs:active.
func TestDeliveryLimitAfterAcceptedRecord(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	cfg := Config{ClaimIdle: 10 * time.Millisecond, DeliveryLimit: 1}
	a := bd.broker(t, withConsumer(cfg, "a"))
	id := bd.post(t, "m", okData)
	feed(t, a)
	if _, _, err := a.acceptRecord(ctx, next(t, a)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	b := bd.broker(t, withConsumer(cfg, "b"))
	if _, err := b.reclaimStep(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := b.jobs.Get(ctx, wire.JobID(id))
	if err != nil || j.Status != wire.JobFailed || j.Error == nil || j.Error.Code != string(wire.CodeDeliveryLimit) {
		t.Fatalf("job %+v, %v", j, err)
	}
	if active, _ := b.jobs.ListActive(ctx); len(active) != 0 {
		t.Errorf("still active: %+v", active)
	}
	if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobFailed {
		t.Errorf("job entry %+v", jd)
	}
	if dls := bd.deadLetters(t); len(dls) != 1 || dls[0].Reason != ReasonDeliveryLimit {
		t.Errorf("dead letters %+v", dls)
	}
}

func TestDuplicateIdempotencyKey(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	first := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	second := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	feed(t, b)
	j1, c1 := accept(t, b, next(t, b))
	j2, c2 := accept(t, b, next(t, b))
	if !c1 || c2 || j1.JobID != j2.JobID || j2.RequestEntryID != first {
		t.Fatalf("first %+v %v, second %+v %v", j1, c1, j2, c2)
	}
	if st := bd.entryStatus(t, second); st != blackboard.StatusConsumed {
		t.Errorf("duplicate request %s, want consumed", st)
	}
	// The duplicate's own job id has an entry naming the job
	// (TestDuplicateGetsEntry), but no record.
	if _, ok := bd.jobEntry(t, second); !ok {
		t.Errorf("duplicate request got no job entry of its own")
	}
	if _, err := b.jobs.Get(t.Context(), wire.JobID(second)); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("duplicate request got a job record: %v", err)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
}

func TestReclaim(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	cfg := Config{ClaimIdle: time.Minute}
	a := bd.broker(t, withConsumer(cfg, "a"))
	b := bd.broker(t, withConsumer(cfg, "b"))
	ids := []string{bd.post(t, "m", okData), bd.post(t, "m", okData)}
	feed(t, a)

	// a refreshes what it holds: b cannot take it. (age sets the messages'
	// idle time in Redis, as if a minute had passed.)
	bd.age(t, "a", 2*time.Minute)
	if _, err := a.reclaimStep(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.reclaimStep(ctx); err != nil || n != 0 {
		t.Fatalf("b reclaimed %d from a live broker (%v)", n, err)
	}

	// a stops refreshing (dead or cut off): b takes both over.
	bd.age(t, "a", 2*time.Minute)
	if n, err := b.reclaimStep(ctx); err != nil || n != 2 {
		t.Fatalf("b reclaimed %d, want 2 (%v)", n, err)
	}
	var got []string
	for range 2 {
		d := next(t, b)
		got = append(got, d.EntryID)
		accept(t, b, d)
	}
	slices.Sort(got)
	slices.Sort(ids)
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("reclaimed (-want +got):\n%s", diff)
	}
	// a comes back: its refresh finds it lost them and forgets them.
	if _, err := a.reclaimStep(ctx); err != nil {
		t.Fatal(err)
	}
	if a.inbox.Len() != 0 {
		t.Errorf("a still holds %d lost requests", a.inbox.Len())
	}
}

func withConsumer(cfg Config, name string) Config { cfg.Consumer = name; return cfg }

// TestReclaimTakesTheBacklogAtOnce: a dead consumer's idle backlog is taken
// over in one reclaim round, as far as the inbox has room, not 256 per
// ReclaimInterval (3,563 requests took 343 s that way), and in a few round
// trips per batch, not three per request (a loaded CI machine took over
// 100 requests a second that way, and missed the takeover bound).
func TestReclaimTakesTheBacklogAtOnce(t *testing.T) {
	bd := newBoard(t)
	cfg := Config{ClaimIdle: time.Minute, InboxCapacity: 2000}
	a := bd.broker(t, withConsumer(cfg, "a"))
	b := bd.broker(t, withConsumer(cfg, "b"))
	const n = 700
	for range n {
		bd.post(t, "m", okData)
	}
	if got := feed(t, a); got != n {
		t.Fatalf("a read %d, want %d", got, n)
	}
	bd.age(t, "a", 2*time.Minute)
	if err := scriptClaim.Load(t.Context(), bd.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	rt := redistest.CountRoundTrips(bd.rdb)
	got, err := b.reclaimStep(t.Context())
	if err != nil || got != n {
		t.Fatalf("one reclaim round took over %d of %d (%v)", got, n, err)
	}
	// A few for the lanes and the refresh, then per batch of at most 252
	// (three here, 22 round trips in all when this was written):
	// the claim and three look-ups.
	if trips := rt.N(); trips > 30 {
		t.Errorf("taking over %d requests took %d round trips, want at most 30", n, trips)
	}
	if b.inbox.Len() != n {
		t.Errorf("inbox holds %d, want %d", b.inbox.Len(), n)
	}
	// With less room, it stops at the room.
	c := bd.broker(t, withConsumer(Config{ClaimIdle: time.Minute, InboxCapacity: 300}, "c"))
	bd.age(t, "b", 2*time.Minute)
	if got, err := c.reclaimStep(t.Context()); err != nil || got != 300 {
		t.Fatalf("a 300-slot inbox took over %d (%v), want 300", got, err)
	}
}

// TestOwnPendingAfterRestart: a broker restarted under the same consumer
// name re-reads its own pending requests at once.
func TestOwnPendingAfterRestart(t *testing.T) {
	bd := newBoard(t)
	a := bd.broker(t, Config{Consumer: "same"})
	id := bd.post(t, "m", okData)
	feed(t, a)
	a2 := bd.broker(t, Config{Consumer: "same"})
	if n := feed(t, a2); n != 1 {
		t.Fatalf("restarted broker read %d, want 1", n)
	}
	d := next(t, a2)
	if d.EntryID != id || d.Deliveries != 2 {
		t.Fatalf("delivery %+v", d)
	}
}

// TestBackpressure: with a full inbox the broker stops reading; the rest
// stay in Redis, unread, and all are accepted once the adapter drains.
func TestBackpressure(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{InboxCapacity: 10})
	const total = 55
	for i := range total {
		bd.post(t, fmt.Sprint("m", i%3), okData)
	}
	if n := feed(t, b); n != 10 {
		t.Fatalf("read %d into a 10-slot inbox", n)
	}
	if !b.inbox.Full() {
		t.Fatal("inbox not full")
	}
	l, p := bd.laneTotals(t)
	if l != total || p != 10 {
		t.Fatalf("lanes hold %d (%d pending), want %d (10)", l, p, total)
	}
	st, err := b.Inspector().Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var unread int64
	for _, ls := range st.Lanes {
		unread += ls.Unread
	}
	if unread != total-10 || st.Held != 10 {
		t.Fatalf("stats: unread %d held %d", unread, st.Held)
	}
	accepted := map[string]bool{}
	for len(accepted) < total {
		if b.inbox.Len() == 0 {
			if n := feed(t, b); n == 0 {
				t.Fatalf("stuck after %d accepted", len(accepted))
			}
		}
		d := next(t, b)
		accept(t, b, d)
		accepted[d.EntryID] = true
		if b.inbox.Len() > 10 {
			t.Fatal("inbox over capacity")
		}
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
}

// TestFairnessUnderBurst: a module that posts 3,000 requests at once does
// not delay another module's single request by more than one hand-out.
func TestFairnessUnderBurst(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	entries := make([]*blackboard.Entry, 0, 3000)
	for range 3000 {
		entries = append(entries, blackboard.NewEntry(blackboard.RequestTopic, "flood", []byte(okData)))
	}
	for c := range slices.Chunk(entries, 500) {
		if _, err := bd.store.PostMany(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	feed(t, b)
	// Serve some of the burst, then the quiet module posts one request.
	for range 100 {
		accept(t, b, next(t, b))
	}
	quiet := bd.post(t, "quiet", okData)
	feed(t, b)
	for i := range 2 {
		d := next(t, b)
		accept(t, b, d)
		if d.EntryID == quiet {
			t.Logf("quiet request handed out at position %d after 3,000 flood requests", i+1)
			return
		}
	}
	t.Fatal("quiet request not among the next 2 hand-outs")
}

func TestPoisonToDLQ(t *testing.T) {
	tests := map[string]struct {
		data       string
		wantCode   wire.Code
		wantReason string
	}{
		"unknown field": {data: `{"command":["x"],"bogus":1}`, wantCode: wire.CodeUnknownField, wantReason: ReasonInvalid},
		"wrong type":    {data: `{"command":"x"}`, wantCode: wire.CodeWrongType, wantReason: ReasonInvalid},
		"bad version":   {data: `{"version":2,"command":["x"]}`, wantCode: wire.CodeUnsupportedVersion, wantReason: ReasonInvalid},
		"not an object": {data: `[1,2]`, wantCode: wire.CodeWrongType, wantReason: ReasonInvalid},
		"refused by check": {data: `{"command":["rm","-rf"]}`, wantCode: wire.CodeCommandNotAllowed,
			wantReason: ReasonRejected},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bd := newBoard(t)
			b := bd.broker(t, Config{Check: func(r wire.Request) *wire.Error {
				if len(r.Command) > 0 && r.Command[0] == "rm" {
					return &wire.Error{Code: wire.CodeCommandNotAllowed, Message: "rm is not allowed"}
				}
				return nil
			}})
			id := bd.post(t, "m", tc.data)
			feed(t, b)
			if b.inbox.Len() != 0 {
				t.Fatal("poison request queued")
			}
			dls := bd.deadLetters(t)
			if len(dls) != 1 {
				t.Fatalf("%d dead letters", len(dls))
			}
			got := dls[0]
			if got.EntryID != id || got.Code != string(tc.wantCode) || got.Reason != tc.wantReason ||
				got.Deliveries != 1 || got.Message == "" || len(got.Entry) < 10 || got.FailedAt == 0 {
				t.Errorf("dead letter %+v", got)
			}
			jd, ok := bd.jobEntry(t, id)
			if !ok || jd.Status != wire.JobRejected || jd.ReasonCode != tc.wantCode || jd.Error == nil ||
				jd.Error.Code != string(tc.wantCode) {
				t.Errorf("job entry %+v", jd)
			}
			if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
				t.Errorf("request %s, want consumed", st)
			}
			if l, p := bd.laneTotals(t); l != 0 || p != 0 {
				t.Errorf("lanes hold %d, %d pending", l, p)
			}
		})
	}
}

// TestGarbageMessage: a lane message that is not even an entry is
// dead-lettered and acked.
func TestGarbageMessage(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	for _, v := range [][]any{
		{"hello", "world"},
		{"v", "1", "entry_id", "0123456789abcdef0123456789abcdef", "entry", "{not json"},
	} {
		if err := bd.rdb.XAdd(ctx, &redis.XAddArgs{Stream: bd.keys.Inbox(3), Values: v}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	feed(t, b)
	dls := bd.deadLetters(t)
	if len(dls) != 2 || dls[0].Code != string(wire.CodeUnsupportedVersion) || dls[1].Code != string(wire.CodeMalformedJSON) {
		t.Fatalf("dead letters %+v", dls)
	}
	if jd, ok := bd.jobEntry(t, "0123456789abcdef0123456789abcdef"); !ok || jd.Status != wire.JobRejected {
		t.Errorf("job entry %+v %v", jd, ok)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
}

func TestDeliveryLimit(t *testing.T) {
	t.Run("redis deliveries", func(t *testing.T) {
		bd := newBoard(t)
		ctx := t.Context()
		cfg := Config{ClaimIdle: 10 * time.Millisecond, DeliveryLimit: 2}
		id := bd.post(t, "m", okData)
		feed(t, bd.broker(t, withConsumer(cfg, "a"))) // delivery 1; a dies
		for i, name := range []string{"b", "c"} {     // deliveries 2 and 3
			time.Sleep(20 * time.Millisecond)
			b := bd.broker(t, withConsumer(cfg, name))
			if _, err := b.reclaimStep(ctx); err != nil {
				t.Fatal(err)
			}
			if held := b.inbox.Len(); held != 1-i {
				t.Fatalf("%s holds %d", name, held)
			}
		}
		dls := bd.deadLetters(t)
		if len(dls) != 1 || dls[0].Reason != ReasonDeliveryLimit || dls[0].Code != string(wire.CodeDeliveryLimit) || dls[0].Deliveries != 3 {
			t.Fatalf("dead letters %+v", dls)
		}
		if jd, _ := bd.jobEntry(t, id); jd.ReasonCode != wire.CodeDeliveryLimit {
			t.Errorf("job entry %+v", jd)
		}
	})
	t.Run("lapsed leases", func(t *testing.T) {
		bd := newBoard(t)
		b := bd.broker(t, Config{DeliveryLimit: 2, LeaseTimeout: time.Second})
		id := bd.post(t, "m", okData)
		feed(t, b)
		for want := 1; want <= 2; want++ {
			d := next(t, b) // never accepted
			if d.Deliveries != want {
				t.Fatalf("delivery %d, want %d", d.Deliveries, want)
			}
			bd.clk.Advance(2 * time.Second)
			if err := b.expiryStep(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if b.inbox.Len() != 0 {
			t.Fatal("still held")
		}
		dls := bd.deadLetters(t)
		if len(dls) != 1 || dls[0].EntryID != id || dls[0].Reason != ReasonDeliveryLimit || dls[0].Deliveries != 2 {
			t.Fatalf("dead letters %+v", dls)
		}
	})
}

func TestExpiry(t *testing.T) {
	t.Run("while queued", func(t *testing.T) {
		bd := newBoard(t)
		b := bd.broker(t, Config{})
		id := bd.post(t, "m", okData, ttl(5))
		keep := bd.post(t, "m", okData)
		feed(t, b)
		bd.clk.Advance(6 * time.Second)
		if err := b.expiryStep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := b.inbox.Get(id); ok || b.inbox.Len() != 1 {
			t.Fatal("expired request still queued")
		}
		if st := bd.entryStatus(t, id); st != blackboard.StatusExpired {
			t.Errorf("request %s", st)
		}
		if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobExpired || jd.FinishedAt == nil {
			t.Errorf("job entry %+v", jd)
		}
		if d := next(t, b); d.EntryID != keep {
			t.Errorf("handed out %s", d.EntryID)
		}
		if l, p := bd.laneTotals(t); l != 1 || p != 1 {
			t.Errorf("lanes hold %d, %d pending", l, p)
		}
	})
	t.Run("before it was read", func(t *testing.T) {
		bd := newBoard(t)
		b := bd.broker(t, Config{})
		id := bd.post(t, "m", okData, ttl(0))
		bd.clk.Advance(time.Millisecond)
		feed(t, b)
		if b.inbox.Len() != 0 {
			t.Fatal("expired request queued")
		}
		if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobExpired {
			t.Errorf("job entry %+v", jd)
		}
		if l, p := bd.laneTotals(t); l != 0 || p != 0 {
			t.Errorf("lanes hold %d, %d pending", l, p)
		}
	})
}

func TestCancellation(t *testing.T) {
	t.Run("queued request never starts", func(t *testing.T) {
		bd := newBoard(t)
		b := bd.broker(t, Config{})
		ctx := t.Context()
		if _, _, err := b.eventsStep(ctx, 0); err != nil { // start watching
			t.Fatal(err)
		}
		id := bd.post(t, "m", okData)
		other := bd.post(t, "m", okData)
		feed(t, b)
		if err := bd.store.Retract(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, n, err := b.eventsStep(ctx, 0); err != nil || n != 1 {
			t.Fatalf("eventsStep acted on %d, %v", n, err)
		}
		if _, ok := b.inbox.Get(id); ok {
			t.Fatal("retracted request still queued")
		}
		if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobCancelled {
			t.Errorf("job entry %+v", jd)
		}
		if d := next(t, b); d.EntryID != other {
			t.Errorf("handed out %s", d.EntryID)
		}
	})
	t.Run("retracted before hand-off, event not seen", func(t *testing.T) {
		bd := newBoard(t)
		b := bd.broker(t, Config{})
		id := bd.post(t, "m", okData)
		other := bd.post(t, "m", okData)
		feed(t, b)
		if err := bd.store.Retract(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if d := next(t, b); d.EntryID != other {
			t.Fatalf("handed out %s, want the other request", d.EntryID)
		}
		if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobCancelled {
			t.Errorf("job entry %+v", jd)
		}
		if l, p := bd.laneTotals(t); l != 1 || p != 1 {
			t.Errorf("lanes hold %d, %d pending", l, p)
		}
	})
	t.Run("running job is signalled", func(t *testing.T) {
		bd := newBoard(t)
		var got []Cancel
		b := bd.broker(t, Config{OnCancel: func(c Cancel) { got = append(got, c) }})
		ctx := t.Context()
		b.eventsStep(ctx, 0)
		id := bd.post(t, "m", okData)
		feed(t, b)
		j, _ := accept(t, b, next(t, b))
		if _, err := b.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{}); err != nil {
			t.Fatal(err)
		}
		if err := bd.store.Retract(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.eventsStep(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Cancel{{EntryID: id, JobID: j.JobID}}, got); diff != "" {
			t.Errorf("OnCancel calls (-want +got):\n%s", diff)
		}
		if j, _ := b.jobs.Get(ctx, j.JobID); !j.CancelRequested {
			t.Error("cancel_requested not recorded")
		}
	})
	t.Run("retracted between hand-off and accept", func(t *testing.T) {
		bd := newBoard(t)
		b := bd.broker(t, Config{})
		ctx := t.Context()
		b.eventsStep(ctx, 0)
		id := bd.post(t, "m", okData)
		feed(t, b)
		d := next(t, b)
		if err := bd.store.Retract(ctx, id); err != nil {
			t.Fatal(err)
		}
		b.eventsStep(ctx, 0)
		if _, _, err := b.Accept(ctx, d); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Accept after retraction: %v, want ErrLeaseLost", err)
		}
		if jd, _ := bd.jobEntry(t, id); jd.Status != wire.JobCancelled {
			t.Errorf("job entry %+v", jd)
		}
	})
}

func TestRateLimit(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{ModuleRate: 1, ModuleBurst: 2})
	var noisy []string
	for range 5 {
		noisy = append(noisy, bd.post(t, "noisy", okData))
	}
	calm := bd.post(t, "calm", okData)
	feed(t, b)
	if b.inbox.ModuleLen("noisy") != 2 || b.inbox.ModuleLen("calm") != 1 {
		t.Fatalf("held %v", b.inbox.ModuleCounts())
	}
	for _, id := range noisy[2:] {
		jd, _ := bd.jobEntry(t, id)
		if jd.Status != wire.JobRejected || jd.ReasonCode != wire.CodeRateLimited || jd.Error == nil {
			t.Errorf("job entry %+v", jd)
		}
	}
	if _, ok := bd.jobEntry(t, calm); ok {
		t.Error("calm request rejected")
	}
	if n := len(bd.deadLetters(t)); n != 3 {
		t.Errorf("%d dead letters, want 3", n)
	}

	// A waiting cap per module: inbox_full.
	bd = newBoard(t)
	b = bd.broker(t, Config{ModuleMaxWaiting: 2})
	for range 4 {
		bd.post(t, "noisy", okData)
	}
	feed(t, b)
	dls := bd.deadLetters(t)
	if b.inbox.Len() != 2 || len(dls) != 2 || dls[0].Code != string(wire.CodeInboxFull) {
		t.Fatalf("held %d, dead letters %+v", b.inbox.Len(), dls)
	}
}

// TestTwoBrokersNoDoubleAcceptance runs two brokers, three adapters each,
// on one group, with a claim-idle limit so short that they keep taking
// requests from each other, and checks that every request became exactly
// one job that started exactly once, and that nothing is left behind.
func TestTwoBrokersNoDoubleAcceptance(t *testing.T) {
	bd := newBoard(t)
	const total = 300
	cfg := Config{ClaimIdle: 2 * time.Millisecond, ReclaimInterval: 2 * time.Millisecond,
		ReadBlock: 20 * time.Millisecond, DeliveryLimit: 1000, Clock: clock.Real{}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var created, started, handedTwice atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := map[string]int{}
	for _, name := range []string{"a", "b"} {
		b := bd.broker(t, withConsumer(cfg, name))
		wg.Go(func() { _ = b.Run(ctx) })
		for range 3 { // adapters
			wg.Go(func() {
				for {
					d, err := b.Next(ctx)
					if err != nil {
						return
					}
					time.Sleep(time.Duration(d.EntryID[0]%3) * time.Millisecond) // let idle time build up
					j, c, err := b.Accept(ctx, d)
					if err != nil {
						continue // lease lost: someone else has it
					}
					if c {
						created.Add(1)
					}
					if _, err := b.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{}); err == nil {
						started.Add(1)
					}
					mu.Lock()
					if accepted[d.EntryID]++; accepted[d.EntryID] == 2 {
						handedTwice.Add(1)
					}
					mu.Unlock()
				}
			})
		}
	}
	for range total {
		bd.post(t, "m", okData)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, p := bd.laneTotals(t)
		n := bd.idemKeys(t)
		if l == 0 && p == 0 && n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d job records, lanes hold %d (%d pending)", n, l, p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The records are all there; wait for the adapters to have started
	// each job (an Accept may still be between its record and its start).
	for created.Load() < total || started.Load() < total {
		if time.Now().After(deadline) {
			break // reported below
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if created.Load() != total || started.Load() != total {
		t.Errorf("created %d jobs, started %d, want %d each", created.Load(), started.Load(), total)
	}
	if dls := bd.deadLetters(t); len(dls) != 0 {
		t.Errorf("%d dead letters", len(dls))
	}
	t.Logf("%d requests were handed to adapters of both brokers and accepted idempotently", handedTwice.Load())
}

func TestRunAndShutdown(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{ReadBlock: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	id := bd.post(t, "m", okData)
	d := next(t, b)
	if d.EntryID != id {
		t.Fatalf("got %s", d.EntryID)
	}
	accept(t, b, d)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	got := []any{c.InboxCapacity, c.LeaseTimeout, c.ClaimIdle, c.DeliveryLimit, c.ModuleRate, c.ModuleBurst,
		c.ModuleMaxWaiting, c.ReclaimInterval, c.ExpiryInterval, c.Consumer != ""}
	want := []any{10000, 30 * time.Second, 60 * time.Second, 5, 100.0, 200, 2500, 20 * time.Second, time.Second, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	for name, bad := range map[string]Config{
		"negative capacity": {InboxCapacity: -1},
		"negative lease":    {LeaseTimeout: -time.Second},
		"tiny claim idle":   {ClaimIdle: time.Microsecond},
	} {
		if err := bad.fill(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
