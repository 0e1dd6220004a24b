package broker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// finishedEvents reads every compute.job.finished payload on the board.
func (bd *board) finishedEvents(t testing.TB) map[string]map[string]any {
	t.Helper()
	evs, _, err := bd.store.Events(t.Context(), "0", "compute.job.finished", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, ev := range evs {
		var p map[string]any
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if ev.Source != wire.SourceModule {
			t.Errorf("source %q", ev.Source)
		}
		id, _ := p["job_id"].(string)
		out[id] = p
	}
	return out
}

// TestJobFinishedEvent: every job that ends, whatever its status, raises
// one compute.job.finished event naming the job, its status, its request
// and its exit or error code.
func TestJobFinishedEvent(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	b := bd.broker(t, Config{})
	ok := bd.post(t, "m", okData)
	bad := bd.post(t, "m", `{"command":["x"],"bogus":1}`)
	feed(t, b)
	j, _ := accept(t, b, next(t, b))
	bd.post(t, "m", okData, ttl(0.5))
	feed(t, b)
	bd.clk.Advance(time.Second)
	if err := b.expiryStep(ctx); err != nil { // the TTL lapsed in the inbox
		t.Fatal(err)
	}
	if _, err := b.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{}); err != nil {
		t.Fatal(err)
	}
	three := 3
	if _, err := b.jobs.Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{ExitCode: &three,
		Error: &wire.JobError{Code: "exit_status", Message: "exit 3"}}); err != nil {
		t.Fatal(err)
	}
	got := bd.finishedEvents(t)
	if p := got[wire.JobID(ok)]; p == nil || p["status"] != "failed" || p["request_entry_id"] != ok ||
		p["exit_code"] != 3.0 || p["error_code"] != "exit_status" {
		t.Errorf("failed job's event %v", p)
	}
	if p := got[wire.JobID(bad)]; p == nil || p["status"] != "rejected" || p["request_entry_id"] != bad ||
		p["error_code"] != "unknown_field" || p["exit_code"] != nil {
		t.Errorf("rejected job's event %v", p)
	}
	if len(got) != 3 {
		t.Errorf("%d finished events, want 3 (failed, rejected, expired): %v", len(got), got)
	}
}
