package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// boardState is what a fenced write must leave alone: the job's record,
// the active set, the module's idempotency key, the job entry and the
// request entry's status.
type boardState struct {
	Record  map[string]string
	Active  []redis.Z
	Idem    string
	Entry   string // the job entry's data ("" if none)
	Request blackboard.Status
}

func (bd *board) state(t *testing.T, spec AcceptSpec) boardState {
	t.Helper()
	ctx := context.Background()
	var st boardState
	var err error
	if st.Record, err = bd.rdb.HGetAll(ctx, bd.keys.Job(spec.JobID)).Result(); err != nil {
		t.Fatal(err)
	}
	if st.Active, err = bd.rdb.ZRangeWithScores(ctx, bd.keys.JobsActive(), 0, -1).Result(); err != nil {
		t.Fatal(err)
	}
	st.Idem, _ = bd.rdb.Get(ctx, bd.keys.JobIdem(spec.Module, spec.Request.IdempotencyKey)).Result()
	if e, err := bd.store.Get(ctx, spec.JobID); err == nil {
		st.Entry = string(e.Data)
	}
	st.Request = bd.entryStatus(t, spec.EntryID)
	return st
}

// TestFenced: a Fenced view's accept and transition check the epoch key
// in the same step: with a stale epoch (or none at all) they fail with
// ErrFenced, naming both epochs, and change nothing — not even a start
// that would otherwise cancel a withdrawn job; with the current epoch they
// do what an unfenced store does.
func TestFenced(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	key := bd.keys.PoolEpoch()
	if err := bd.rdb.Set(ctx, key, 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	stale := bd.jobs.Fenced(Fence{Key: key, Epoch: 4})
	current := bd.jobs.Fenced(Fence{Key: key, Epoch: 5})
	if stale.Fence() != (Fence{Key: key, Epoch: 4}) || bd.jobs.Fence() != (Fence{}) {
		t.Fatalf("fences: %+v, %+v", stale.Fence(), bd.jobs.Fence())
	}

	// Accept.
	spec := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k1"}`)
	before := bd.state(t, spec)
	r, err := stale.Accept(ctx, spec)
	if !errors.Is(err, ErrFenced) || !errors.Is(r.Err, ErrFenced) || r.Created {
		t.Fatalf("stale Accept = %+v, %v; want ErrFenced", r, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "epoch 4") || !strings.Contains(msg, "holds 5") {
		t.Errorf("stale Accept's error %q does not name both epochs", msg)
	}
	if diff := cmp.Diff(before, bd.state(t, spec)); diff != "" {
		t.Errorf("stale Accept changed the board (-before +after):\n%s", diff)
	}
	for _, r := range stale.AcceptBatch(ctx, []AcceptSpec{spec, bd.post(t, "m", okData)}) {
		if !errors.Is(r.Err, ErrFenced) {
			t.Errorf("stale AcceptBatch: %+v, want ErrFenced", r)
		}
	}
	if n, _ := bd.rdb.ZCard(ctx, bd.keys.JobsActive()).Result(); n != 0 {
		t.Errorf("stale accepts left %d active jobs", n)
	}
	j, created := bd.accept(t, current, spec)
	if !created || j.Status != wire.JobQueued {
		t.Fatalf("current Accept = %+v, created %v", j, created)
	}

	// Transition.
	before = bd.state(t, spec)
	if _, err := stale.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale Transition: %v, want ErrFenced", err)
	} else if msg := err.Error(); !strings.Contains(msg, "epoch 4") || !strings.Contains(msg, "holds 5") {
		t.Errorf("stale Transition's error %q does not name both epochs", msg)
	}
	if _, err := stale.Transition(ctx, "nope", wire.JobQueued, wire.JobRunning, Update{}); !errors.Is(err, ErrFenced) {
		t.Errorf("stale Transition of an unknown job: %v, want ErrFenced (the fence comes first)", err)
	}
	if diff := cmp.Diff(before, bd.state(t, spec)); diff != "" {
		t.Errorf("stale Transition changed the board (-before +after):\n%s", diff)
	}
	// A stale start does not even cancel a withdrawn job.
	if ok, err := bd.jobs.MarkCancelRequested(ctx, j.JobID); !ok || err != nil {
		t.Fatal(ok, err)
	}
	before = bd.state(t, spec)
	if _, err := stale.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{}); !errors.Is(err, ErrFenced) || errors.Is(err, ErrWithdrawn) {
		t.Fatalf("stale start of a withdrawn job: %v, want ErrFenced only", err)
	}
	if diff := cmp.Diff(before, bd.state(t, spec)); diff != "" {
		t.Errorf("stale start of a withdrawn job changed the board (-before +after):\n%s", diff)
	}
	if err := bd.rdb.HDel(ctx, bd.keys.Job(j.JobID), "cancel_requested").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := current.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"})
	if err != nil || got.Status != wire.JobRunning || got.Node != "n1" {
		t.Fatalf("current Transition = %+v, %v", got, err)
	}
	if jd, _ := bd.jobEntry(t, spec.EntryID); jd.Status != wire.JobRunning {
		t.Errorf("job entry after the current epoch's start: %+v", jd)
	}

	// No epoch at all is as stale as another one.
	if err := bd.rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := current.Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, Update{}); !errors.Is(err, ErrFenced) {
		t.Errorf("Transition with the epoch key gone: %v, want ErrFenced", err)
	}
	// The zero Fence is unfenced.
	if _, err := current.Fenced(Fence{}).Transition(ctx, j.JobID, wire.JobRunning, wire.JobRunning, Update{Handle: "{}"}); err != nil {
		t.Errorf("unfenced view of a fenced one: %v", err)
	}
	// A fence key of another board is refused before anything runs.
	other := blackboard.NewKeys("elsewhere").PoolEpoch()
	if _, err := bd.jobs.Fenced(Fence{Key: other, Epoch: 1}).Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, Update{}); err == nil {
		t.Error("a fence key of another board was accepted")
	}
	if rec, _ := bd.jobs.Get(ctx, j.JobID); rec.Status != wire.JobRunning {
		t.Errorf("record %s after the refused writes, want running", rec.Status)
	}
}
