package jobs

import (
	"context"
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
