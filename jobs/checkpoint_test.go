package jobs

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/wire"
)

// TestRecordCheckpoint: a transition records the job's verified and
// refused checkpoints on its record (not on its entry); a later
// transition leaves them alone; NoCheckpoint clears the verified one.
func TestRecordCheckpoint(t *testing.T) {
	bd := newBoard(t)
	s := bd.jobs
	ctx := t.Context()
	spec := bd.post(t, "planner", `{"command":["echo","hi"]}`)
	j, _ := bd.accept(t, s, spec)
	good := &Checkpoint{Seq: 2, Path: "/ck/" + j.JobID + "/2", At: 1_900_000_000.5}
	bad := &Checkpoint{Seq: 3, Path: "/ck/" + j.JobID + "/3", At: 1_900_000_010, Reason: "manifest missing"}
	if _, err := s.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, Update{Node: "n1", Checkpoint: good, CheckpointRefused: bad}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobRunning, Update{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(good, got.Checkpoint); diff != "" {
		t.Errorf("checkpoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(bad, got.CheckpointRefused); diff != "" {
		t.Errorf("checkpoint_refused (-want +got):\n%s", diff)
	}
	if jd, ok := bd.jobEntry(t, spec.EntryID); !ok || jd.Status != wire.JobRunning {
		t.Errorf("job entry %+v", jd)
	}
	got, err = s.Transition(ctx, j.JobID, wire.JobRunning, wire.JobQueued, Update{NoCheckpoint: true})
	if err != nil || got.Checkpoint != nil || got.CheckpointRefused == nil {
		t.Errorf("after NoCheckpoint: checkpoint %+v, refused %+v (%v); want none, and the refusal kept", got.Checkpoint, got.CheckpointRefused, err)
	}
}
