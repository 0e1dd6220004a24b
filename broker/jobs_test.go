package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestConfigJobs: the broker accepts into the job store it is given (its
// retention applies), and a Fenced store's refusal leaves the request
// unaccepted and its message pending, to be accepted later.
func TestConfigJobs(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	js, err := jobs.New(bd.rdb, bd.store, jobs.Config{Retention: time.Hour, Clock: bd.clk})
	if err != nil {
		t.Fatal(err)
	}
	b := bd.broker(t, Config{Jobs: js})
	if b.jobs != js {
		t.Fatal("the broker made its own job store")
	}
	bd.post(t, "m", okData)
	feed(t, b)
	j, _ := accept(t, b, next(t, b))
	zero := 0
	if _, err := js.Transition(ctx, j.JobID, wire.JobQueued, wire.JobSucceeded, jobs.Update{ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	if d, _ := bd.rdb.PTTL(ctx, bd.keys.Job(j.JobID)).Result(); d <= 0 || d > time.Hour+2*time.Second {
		t.Errorf("record TTL %v, want the store's retention, about 1h", d)
	}

	// Fenced, stale.
	key := bd.keys.PoolEpoch()
	if err := bd.rdb.Set(ctx, key, 2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	fb := bd.broker(t, Config{Consumer: "b2", Jobs: js.Fenced(jobs.Fence{Key: key, Epoch: 1})})
	id := bd.post(t, "m", okData)
	feed(t, fb)
	d := next(t, fb)
	if _, _, err := fb.Accept(ctx, d); !errors.Is(err, jobs.ErrFenced) {
		t.Fatalf("Accept through a stale fence: %v, want ErrFenced", err)
	}
	if r := fb.AcceptBatch(ctx, []*Delivery{d}); !errors.Is(r[0].Err, jobs.ErrFenced) {
		t.Fatalf("AcceptBatch through a stale fence: %+v, want ErrFenced", r[0])
	}
	if ok, _ := js.Exists(ctx, wire.JobID(id)); ok {
		t.Error("a stale fence made a record")
	}
	if _, p := bd.laneTotals(t); p != 1 {
		t.Errorf("%d messages pending, want 1 (the refused request's)", p)
	}
	if err := bd.rdb.Set(ctx, key, 1, 0).Err(); err != nil { // the fence is current again
		t.Fatal(err)
	}
	if j, created := accept(t, fb, d); !created || j.JobID != wire.JobID(id) {
		t.Errorf("Accept once the fence is current: %+v, created %v", j, created)
	}
}

// TestFencedAckAndDeadLetter: a deposed scheduler's broker (its job store
// fenced at a stale epoch) neither dead-letters nor acknowledges: the
// message stays pending for the current scheduler.
func TestFencedAckAndDeadLetter(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	js, err := jobs.New(bd.rdb, bd.store, jobs.Config{Clock: bd.clk})
	if err != nil {
		t.Fatal(err)
	}
	key := bd.keys.PoolEpoch()
	if err := bd.rdb.Set(ctx, key, 2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	fb := bd.broker(t, Config{Consumer: "old", Jobs: js.Fenced(jobs.Fence{Key: key, Epoch: 1})})
	bd.post(t, "m", okData)
	feed(t, fb)
	d := next(t, fb)
	err = fb.Reject(ctx, d, &wire.Error{Code: wire.CodeInvalidValue, Message: "refused by a deposed scheduler"})
	if !errors.Is(err, jobs.ErrFenced) {
		t.Fatalf("Reject through a stale fence: %v, want ErrFenced", err)
	}
	if n := bd.rdb.XLen(ctx, bd.keys.DLQ()).Val(); n != 0 {
		t.Errorf("%d dead letters written by a deposed scheduler", n)
	}
	if _, p := bd.laneTotals(t); p != 1 {
		t.Errorf("%d messages pending, want 1", p)
	}
	if errs := fb.ackBatch(ctx, []*Delivery{d}); !errors.Is(errs[0], jobs.ErrFenced) {
		t.Errorf("ack through a stale fence: %v, want ErrFenced", errs[0])
	}
	if _, p := bd.laneTotals(t); p != 1 {
		t.Errorf("%d messages pending after a fenced ack, want 1", p)
	}
}
