package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/computeboard/computeboard/wire"
)

func TestSetHandles(t *testing.T) {
	bd := newBoard(t)
	s, ctx := bd.jobs, context.Background()
	j0, _ := bd.accept(t, s, bd.post(t, "m", okData))
	id := j0.JobID
	if errs := s.SetHandles(ctx, []HandleSet{{JobID: id, Node: "n1", Handle: `{"provider":"p","id":"x"}`}}); !errors.Is(errs[0], ErrConflict) {
		t.Fatalf("handle of a queued job stored: %v", errs[0])
	}
	if _, err := s.Transition(ctx, id, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	errs := s.SetHandles(ctx, []HandleSet{
		{JobID: id, Node: "n2", Handle: `{"provider":"p","id":"wrong"}`},
		{JobID: id, Node: "n1", Handle: `{"provider":"p","id":"x"}`},
		{JobID: "nope", Node: "n1", Handle: "{}"},
	})
	if !errors.Is(errs[0], ErrConflict) || errs[1] != nil || !errors.Is(errs[2], ErrConflict) {
		t.Fatalf("errs %v", errs)
	}
	j, err := s.Get(ctx, id)
	if err != nil || j.Handle != `{"provider":"p","id":"x"}` || j.Version != 1 {
		t.Fatalf("record %+v %v: want the n1 handle and no extra transition", j, err)
	}
}

// TestCorrectionEvent: replacing a lost job's failure with its true outcome
// raises compute.job.corrected (naming the previous status) and
// compute.job.finished again with the new status.
func TestCorrectionEvent(t *testing.T) {
	bd := newBoard(t)
	s, ctx := bd.jobs, context.Background()
	j, _ := bd.accept(t, s, bd.post(t, "m", okData))
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, Update{Error: &wire.JobError{Code: wire.JobErrorLost, Message: "silent"}}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if _, err := s.Transition(ctx, j.JobID, wire.JobFailed, wire.JobSucceeded, Update{ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := bd.store.Events(ctx, "0", EventJobCorrected, 100, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("corrected events %d %v, want 1", len(evs), err)
	}
	var p JobCorrectedEvent
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.JobID != j.JobID || p.Status != wire.JobSucceeded || p.PreviousStatus != wire.JobFailed || p.ErrorCode != "" {
		t.Errorf("corrected event %+v", p)
	}
	if fin := bd.finishedEvents(t)[j.JobID]; fin["status"] != string(wire.JobSucceeded) {
		t.Errorf("last finished event %v, want succeeded", fin)
	}
}
