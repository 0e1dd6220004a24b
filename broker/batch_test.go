package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

func TestInboxPopBatch(t *testing.T) {
	items := func() []Item {
		var out []Item
		for i := range 40 {
			out = append(out, Item{ID: fmt.Sprint(i), Module: fmt.Sprint("m", i%3), Priority: i % 4})
		}
		return out
	}
	one, batch := NewInbox(InboxConfig{}), NewInbox(InboxConfig{})
	for _, it := range items() {
		if err := one.Push(it); err != nil {
			t.Fatal(err)
		}
		if err := batch.Push(it); err != nil {
			t.Fatal(err)
		}
	}
	want := popIDs(t, one, 40)
	var got []string
	tokens := map[uint64]bool{}
	for len(got) < 40 {
		its, ls, err := batch.PopBatch(t.Context(), 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(its) == 0 || len(its) > 7 || len(ls) != len(its) {
			t.Fatalf("PopBatch gave %d items, %d leases", len(its), len(ls))
		}
		for i, it := range its {
			if ls[i].ID != it.ID || tokens[ls[i].Token] || it.Deliveries != 1 {
				t.Fatalf("item %+v lease %+v", it, ls[i])
			}
			tokens[ls[i].Token] = true
			got = append(got, it.ID)
		}
		for _, l := range ls {
			if err := batch.Ack(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PopBatch order differs from Pop's (-Pop +PopBatch):\n%s", diff)
	}
	// Empty: it waits for the first item, then returns what is there.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := batch.PopBatch(ctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PopBatch on an empty inbox: %v", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = batch.Push(Item{ID: "late", Priority: 1})
	}()
	its, _, err := batch.PopBatch(t.Context(), 5)
	if err != nil || len(its) != 1 || its[0].ID != "late" {
		t.Fatalf("PopBatch = %v, %v", its, err)
	}
}

// TestNextBatch: NextBatch hands out what successive Next calls would, and
// finishes requests whose TTL lapsed instead of handing them out. A
// retracted request is handed out (NextBatch does not re-read statuses)
// and AcceptBatch finishes it as cancelled instead of creating a job.
func TestNextBatch(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	var ids []string
	for i := range 12 {
		ids = append(ids, bd.post(t, fmt.Sprint("m", i%3), fmt.Sprintf(`{"command":["x"],"priority":%d}`, i%4)))
	}
	retracted := bd.post(t, "m0", okData)
	expired := bd.post(t, "m1", okData, ttl(5))

	b := bd.broker(t, Config{})
	feed(t, b)
	want := ids
	if err := bd.store.Retract(ctx, retracted); err != nil {
		t.Fatal(err)
	}
	bd.clk.Advance(6 * time.Second)

	var got []string
	var withdrawn *Delivery
	for len(got) < len(want) || withdrawn == nil {
		ds, err := b.NextBatch(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Deliveries != 1 || d.lease.Token == 0 {
				t.Errorf("delivery %s: deliveries %d, lease %+v", d.EntryID, d.Deliveries, d.lease)
			}
			if d.EntryID == retracted {
				withdrawn = d
				continue
			}
			got = append(got, d.EntryID)
		}
	}
	if r := b.AcceptBatch(ctx, []*Delivery{withdrawn}); r[0].Err != nil || r[0].Created || r[0].Job.Status != wire.JobCancelled {
		t.Errorf("AcceptBatch of the retracted request: %+v", r[0])
	}
	// The exact order is TestNextBatchMatchesNext's; here: every live
	// request once, most urgent first.
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("handed out (-want +got):\n%s", diff)
	}
	prio := map[string]int{}
	for i, id := range ids {
		prio[id] = i % 4
	}
	for i := 1; i < len(got); i++ {
		if prio[got[i]] > prio[got[i-1]] {
			t.Errorf("priority order broken: %v", got)
			break
		}
	}
	if jd, _ := bd.jobEntry(t, retracted); jd.Status != wire.JobCancelled {
		t.Errorf("retracted request's job entry %+v", jd)
	}
	if jd, _ := bd.jobEntry(t, expired); jd.Status != wire.JobExpired {
		t.Errorf("expired request's job entry %+v", jd)
	}
	if st := bd.entryStatus(t, expired); st != blackboard.StatusExpired {
		t.Errorf("expired request %s", st)
	}
	if n := b.inbox.Len(); n != len(want) {
		t.Errorf("inbox holds %d, want the %d handed out", n, len(want))
	}
}

// TestNextBatchMatchesNext: on identical boards, NextBatch and Next hand
// out the same sequence (fair share included).
func TestNextBatchMatchesNext(t *testing.T) {
	run := func(batch bool) []string {
		bd := newBoard(t)
		for i := range 30 {
			bd.post(t, fmt.Sprint("m", i%4), fmt.Sprintf(`{"command":["x"],"priority":%d,"idempotency_key":"k%d"}`, i%3, i))
		}
		b := bd.broker(t, Config{})
		feed(t, b)
		var keys []string
		for len(keys) < 30 {
			if batch {
				ds, err := b.NextBatch(t.Context(), 4)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					keys = append(keys, d.Request.IdempotencyKey)
				}
				continue
			}
			keys = append(keys, next(t, b).Request.IdempotencyKey)
		}
		return keys
	}
	if diff := cmp.Diff(run(false), run(true)); diff != "" {
		t.Errorf("Next vs NextBatch order (-Next +NextBatch):\n%s", diff)
	}
}

// TestAcceptBatch: AcceptBatch leaves Redis as successive Accepts would,
// including duplicate idempotency keys within the batch and a delivery
// whose lease was lost.
func TestAcceptBatch(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	var ids []string
	for i := range 6 {
		ids = append(ids, bd.post(t, "m", fmt.Sprintf(`{"command":["x"],"idempotency_key":"k%d"}`, i)))
	}
	dupA := bd.post(t, "m", `{"command":["x"],"idempotency_key":"dup"}`)
	dupB := bd.post(t, "m", `{"command":["x"],"idempotency_key":"dup"}`)
	lost := bd.post(t, "m", okData)
	feed(t, b)
	ds, err := b.NextBatch(ctx, 100)
	if err != nil || len(ds) != 9 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	if !b.inbox.Requeue(lost) {
		t.Fatal("requeue")
	}
	res := b.AcceptBatch(ctx, ds)
	byEntry := map[string]AcceptResult{}
	for i, r := range res {
		byEntry[ds[i].EntryID] = r
	}
	for _, id := range ids {
		r := byEntry[id]
		if r.Err != nil || !r.Created || r.Job.JobID != wire.JobID(id) || r.Job.Status != wire.JobQueued {
			t.Errorf("%s: %+v", id, r)
		}
		if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobQueued {
			t.Errorf("%s: job entry %+v", id, jd)
		}
		if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
			t.Errorf("%s: request %s", id, st)
		}
		j, err := b.jobs.Get(ctx, wire.JobID(id))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r.Job, j, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: returned job differs from the record (-returned +record):\n%s", id, diff)
		}
	}
	a, bb := byEntry[dupA], byEntry[dupB]
	if a.Err != nil || bb.Err != nil || a.Created == bb.Created || a.Job.JobID != bb.Job.JobID {
		t.Errorf("duplicate keys: %+v / %+v", a, bb)
	}
	first := dupA
	if bb.Created {
		first = dupB
	}
	if a.Job.RequestEntryID != first {
		t.Errorf("duplicate's job belongs to %s, want %s", a.Job.RequestEntryID, first)
	}
	if st := bd.entryStatus(t, dupB); st != blackboard.StatusConsumed {
		t.Errorf("duplicate request %s", st)
	}
	if r := byEntry[lost]; !errors.Is(r.Err, ErrLeaseLost) || r.Created {
		t.Errorf("lost lease: %+v", r)
	}
	if st := bd.entryStatus(t, lost); st != blackboard.StatusActive {
		t.Errorf("request with a lost lease %s, want active", st)
	}
	if n := bd.idemKeys(t); n != 7 {
		t.Errorf("%d idempotency keys, want 7", n)
	}
	// Only the requeued request is left, in the lane and in the inbox.
	if l, p := bd.laneTotals(t); l != 1 || p != 1 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
	if b.inbox.Len() != 1 {
		t.Errorf("inbox holds %d", b.inbox.Len())
	}
	d := next(t, b)
	if j, created := accept(t, b, d); d.EntryID != lost || !created || j.Status != wire.JobQueued {
		t.Errorf("requeued request: %s %+v %v", d.EntryID, j, created)
	}
	if res := b.AcceptBatch(ctx, nil); len(res) != 0 {
		t.Errorf("AcceptBatch(nil) = %v", res)
	}
}

// TestAcceptBatchAfterCrash: redeliveries of requests whose Accept was
// interrupted after each step are completed by AcceptBatch, none accepted
// twice.
func TestAcceptBatchAfterCrash(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	a := bd.broker(t, Config{Consumer: "a", ClaimIdle: 20 * time.Millisecond})
	var ids []string
	for range 3 {
		ids = append(ids, bd.post(t, "m", okData))
	}
	feed(t, a)
	for steps := range 3 { // request i: a completed i steps, then died
		d := next(t, a)
		if d.EntryID != ids[steps] {
			t.Fatalf("order: %s", d.EntryID)
		}
		if steps >= 1 {
			j, _, err := a.acceptRecord(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if steps >= 2 {
				if err := a.publishJob(ctx, d, j); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	b := bd.broker(t, Config{Consumer: "b", ClaimIdle: 20 * time.Millisecond})
	time.Sleep(40 * time.Millisecond)
	if n, err := b.reclaimStep(ctx); err != nil || n != 3 {
		t.Fatalf("reclaim = %d, %v", n, err)
	}
	ds, err := b.NextBatch(ctx, 10)
	if err != nil || len(ds) != 3 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	for i, r := range b.AcceptBatch(ctx, ds) {
		steps := -1
		for k, id := range ids {
			if id == ds[i].EntryID {
				steps = k
			}
		}
		if r.Err != nil || r.Created != (steps == 0) || r.Job.Status != wire.JobQueued || ds[i].Deliveries != 2 {
			t.Errorf("request after %d steps: %+v (deliveries %d)", steps, r, ds[i].Deliveries)
		}
	}
	for _, id := range ids {
		if st := bd.entryStatus(t, id); st != blackboard.StatusConsumed {
			t.Errorf("request %s", st)
		}
		if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobQueued {
			t.Errorf("job entry %+v", jd)
		}
	}
	if n := bd.idemKeys(t); n != 3 {
		t.Errorf("%d idempotency keys", n)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
}

// TestAcceptBatchNoScript: after Redis loses its script cache (a restart,
// SCRIPT FLUSH), the pipelined scripts are loaded again and run once.
func TestAcceptBatchNoScript(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	for range 3 {
		bd.post(t, "m", okData)
	}
	feed(t, b)
	ds, err := b.NextBatch(ctx, 10)
	if err != nil || len(ds) != 3 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	if err := bd.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i, r := range b.AcceptBatch(ctx, ds) {
		if r.Err != nil || !r.Created {
			t.Errorf("%s: %+v", ds[i].EntryID, r)
		}
	}
	if n := bd.idemKeys(t); n != 3 {
		t.Errorf("%d idempotency keys", n)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
}

// TestHandOffStatus: a request retracted, superseded or expired while it
// waits never becomes a job. Next re-reads the request entry before handing
// it out and acts on what it finds; NextBatch only expires lapsed TTLs and
// leaves the status to AcceptBatch, which reads it atomically with creating
// the record and finishes the request the same way (mode "accept": the
// change comes after Next's hand-off, and Accept does the same).
func TestHandOffStatus(t *testing.T) {
	tests := map[string]struct {
		change  func(t *testing.T, bd *board, id string)
		handOut bool
		job     wire.JobStatus // the job entry written instead of a hand-out
		entry   blackboard.Status
	}{
		"active": {change: func(*testing.T, *board, string) {}, handOut: true, entry: blackboard.StatusActive},
		"removed from the board": {change: func(t *testing.T, bd *board, id string) {
			if err := bd.store.Remove(t.Context(), id, "test"); err != nil {
				t.Fatal(err)
			}
		}, handOut: true},
		"retracted": {change: func(t *testing.T, bd *board, id string) {
			if err := bd.store.Retract(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		}, job: wire.JobCancelled, entry: blackboard.StatusRetracted},
		"superseded": {change: func(t *testing.T, bd *board, id string) {
			e := blackboard.NewEntry(blackboard.RequestTopic, "m", []byte(okData))
			if _, err := bd.store.Supersede(t.Context(), id, e); err != nil {
				t.Fatal(err)
			}
		}, job: wire.JobCancelled, entry: blackboard.StatusSuperseded},
		"marked expired": {change: func(t *testing.T, bd *board, id string) {
			if err := bd.store.Expire(t.Context(), id, nil); err != nil {
				t.Fatal(err)
			}
		}, job: wire.JobExpired, entry: blackboard.StatusExpired},
		"ttl lapsed": {change: func(t *testing.T, bd *board, id string) {
			bd.clk.Advance(6 * time.Second)
		}, job: wire.JobExpired, entry: blackboard.StatusExpired},
	}
	for name, tc := range tests {
		for _, mode := range []string{"next", "batch", "accept"} {
			if mode == "accept" && name == "ttl lapsed" {
				continue // a lapsed TTL is checked at hand-off only
			}
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				t.Parallel()
				bd := newBoard(t)
				b := bd.broker(t, Config{})
				id := bd.post(t, "m", okData, ttl(5))
				feed(t, b)
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancel()
				var got []*Delivery
				var res []AcceptResult
				switch mode {
				case "batch":
					tc.change(t, bd, id)
					got, _ = b.NextBatch(ctx, 10)
					if !tc.handOut && len(got) == 1 && name != "ttl lapsed" {
						res, got = b.AcceptBatch(t.Context(), got), nil
					}
				case "accept":
					d := next(t, b)
					tc.change(t, bd, id)
					if j, created, err := b.Accept(t.Context(), d); tc.handOut {
						got = []*Delivery{d}
					} else {
						res = []AcceptResult{{Job: j, Created: created, Err: err}}
					}
				default:
					tc.change(t, bd, id)
					if d, err := b.Next(ctx); err == nil {
						got = []*Delivery{d}
					}
				}
				if len(res) > 0 {
					if r := res[0]; r.Err != nil || r.Created || r.Job.Status != tc.job || r.Job.JobID != wire.JobID(id) {
						t.Errorf("accept of the withdrawn request: %+v", r)
					}
					if _, err := b.jobs.Get(t.Context(), wire.JobID(id)); !errors.Is(err, jobs.ErrNotFound) {
						t.Errorf("job record of the withdrawn request: %v, want none", err)
					}
				} else if !tc.handOut && mode != "next" && name != "ttl lapsed" {
					t.Fatalf("withdrawn request not handed out for Accept to finish: %v", got)
				}
				if tc.handOut {
					if len(got) != 1 || got[0].EntryID != id {
						t.Fatalf("handed out %v, want %s", got, id)
					}
					return
				}
				if len(got) != 0 {
					t.Fatalf("handed out %s", got[0].EntryID)
				}
				if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != tc.job {
					t.Errorf("job entry %+v, want %s", jd, tc.job)
				}
				if st := bd.entryStatus(t, id); st != tc.entry {
					t.Errorf("request %s, want %s", st, tc.entry)
				}
				if _, p := bd.laneTotals(t); p != 0 || b.inbox.Len() != 0 { // (superseding posts a new request)
					t.Errorf("lanes hold %d pending; inbox %d", p, b.inbox.Len())
				}
			})
		}
	}
}

// TestAwaitRoom: under backpressure the feed waits for a batch's worth of
// room (capacity/8 here) rather than reading as each slot frees, and never
// longer than ReadBlock/10.
func TestAwaitRoom(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{InboxCapacity: 32, ReadBlock: time.Hour})
	for i := range 32 {
		if err := b.inbox.Push(Item{ID: fmt.Sprint(i), Priority: 1}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { b.awaitRoom(t.Context()); close(done) }()
	var leases []Lease
	for range 4 {
		_, l, err := b.inbox.Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	for i, l := range leases {
		if err := b.inbox.Ack(l); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			select {
			case <-done:
				t.Fatalf("awaitRoom returned with %d free, want 4", b.inbox.Free())
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("awaitRoom still waiting with %d free", b.inbox.Free())
		}
	}
	b = bd.broker(t, Config{InboxCapacity: 32, ReadBlock: 100 * time.Millisecond, Consumer: "b2"})
	for i := range 32 {
		_ = b.inbox.Push(Item{ID: fmt.Sprint(i), Priority: 1})
	}
	start := time.Now()
	b.awaitRoom(t.Context())
	if d := time.Since(start); d < 9*time.Millisecond || d > time.Second {
		t.Errorf("awaitRoom on a full inbox returned after %v, want ReadBlock/10", d)
	}
}

// TestReadNewBounded: a read takes the most urgent lanes first and never
// more than the room, whether Redis knows each lane's lag (the plan, read
// in one pipeline) or not (read inside read.lua).
func TestReadNewBounded(t *testing.T) {
	for _, lagKnown := range []bool{true, false} {
		t.Run(fmt.Sprint("lag known=", lagKnown), func(t *testing.T) {
			bd := newBoard(t)
			b := bd.broker(t, Config{})
			ctx := t.Context()
			lanes := []int{1, 7, 3, 7, 1, 3, 7, 9, 9, 1} // data.priority = lane
			for _, p := range lanes {
				bd.post(t, "m", fmt.Sprintf(`{"command":["x"],"priority":%d}`, p))
			}
			b.intakeMu.Lock()
			if err := b.discoverLanes(ctx); err != nil {
				t.Fatal(err)
			}
			b.intakeMu.Unlock()
			if !lagKnown {
				// A message deleted before the group read it leaves Redis
				// unable to tell the group's lag.
				for lane := range NumPriorities {
					if !slices.Contains(lanes, lane) {
						continue
					}
					key := bd.keys.ModuleInbox("m", lane)
					id, err := bd.rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"x", "y"}}).Result()
					if err != nil {
						t.Fatal(err)
					}
					if err := bd.rdb.XDel(ctx, key, id).Err(); err != nil {
						t.Fatal(err)
					}
					gs, err := bd.rdb.XInfoGroups(ctx, key).Result()
					if err != nil || len(gs) != 1 || gs[0].Lag != -1 {
						t.Fatalf("lane %d: groups %+v %v, want lag unknown (-1)", lane, gs, err)
					}
				}
			}
			var got []int
			for _, room := range []int{4, 3, 100} {
				msgs, err := b.readNew(ctx, room)
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) > room {
					t.Fatalf("read %d into room %d", len(msgs), room)
				}
				for _, m := range msgs {
					got = append(got, m.lane)
				}
			}
			want := []int{9, 9, 7, 7, 7, 3, 3, 1, 1, 1}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lanes read (-want +got):\n%s", diff)
			}
			if msgs, err := b.readNew(ctx, 10); err != nil || len(msgs) != 0 {
				t.Errorf("read again: %d, %v", len(msgs), err)
			}
			if err := bd.rdb.XGroupDestroy(ctx, bd.keys.Inbox(5), blackboard.InboxGroup).Err(); err != nil {
				t.Fatal(err)
			}
			// An empty lane is not looked at (nothing to read); one that
			// holds a message is, and its missing group is reported.
			if _, err := b.readNew(ctx, 10); err != nil {
				t.Errorf("read with an empty lane without a group: %v", err)
			}
			if err := bd.rdb.XAdd(ctx, &redis.XAddArgs{Stream: bd.keys.Inbox(5), Values: []any{"x", "y"}}).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.readNew(ctx, 10); !isNoGroup(err) {
				t.Errorf("read without a group: %v, want NOGROUP", err)
			}
		})
	}
}

// TestAcceptBatchStatusErrors: a request whose entry key is not a HASH
// (accept.lua's status read cannot read it) is refused on its own — its
// job is rejected and dead-lettered, not retried — and the others are
// accepted.
func TestAcceptBatchStatusErrors(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	var ids []string
	for range 3 {
		ids = append(ids, bd.post(t, "m", okData))
	}
	feed(t, b)
	if err := bd.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	bad := ids[1]
	if err := bd.rdb.Del(ctx, bd.keys.Entry(bad)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Set(ctx, bd.keys.Entry(bad), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ds, err := b.NextBatch(ctx, 10)
	if err != nil || len(ds) != 3 {
		t.Fatalf("NextBatch = %d, %v", len(ds), err)
	}
	var got []string
	for i, r := range b.AcceptBatch(ctx, ds) {
		switch {
		case ds[i].EntryID == bad:
			// Not a HASH: refused at once (TestNonHashEntry), never retried.
			if r.Err != nil || r.Created || r.Job.Status != wire.JobRejected {
				t.Errorf("accept of the request with the unreadable entry: %+v", r)
			}
		case r.Err != nil || !r.Created || r.Job.Status != wire.JobQueued:
			t.Errorf("%s: %+v", ds[i].EntryID, r)
		default:
			got = append(got, ds[i].EntryID)
		}
	}
	if want := []string{ids[0], ids[2]}; !cmp.Equal(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	if it, ok := b.inbox.Get(bad); ok {
		t.Fatalf("the request with the unreadable entry is still held: %+v", it)
	}
	if _, err := b.jobs.Get(ctx, wire.JobID(bad)); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("job record of the failed request: %v, want none", err)
	}
}
