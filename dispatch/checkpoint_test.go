package dispatch

import (
	"math"
	"testing"
	"time"

	"github.com/computeboard/computeboard/jobs"
)

// TestCheckpointFeedAndNodeLoss: the verified checkpoint on a running
// job's record reaches the engine (Running.LastCheckpoint) with the next
// rescan; when its node is lost, a job with a checkpoint and retries left
// goes back to the queue (to resume elsewhere) like a requeue_lost job,
// one without retries fails lost; either way the work since the
// checkpoint is counted lost (seconds, core-seconds).
func TestCheckpointFeedAndNodeLoss(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retries   int
		want      string
		wantNodes []string
	}{
		{name: "retries left: requeued", retries: 1, want: "scheduler j1: running→queued", wantNodes: []string{"a", "b"}},
		{name: "no retries: lost", retries: 0, want: "scheduler j1: running→failed (lost)", wantNodes: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.nodes.add(cpuNode("a", 4, 8192))
			h.submit(h.newJob("j1", 4, 1, func(j *jobs.Job) { j.Request.MaxRetries = tc.retries }))
			h.mustCycle()
			h.agentStart("j1")
			h.mustCycle()
			h.wantPhase("j1", PhaseRunning)
			h.nodes.add(cpuNode("b", 4, 8192))

			h.clk.Advance(20 * time.Second)
			at := h.clk.Now().Add(-5 * time.Second).Truncate(time.Millisecond)
			rec := h.store.rec("j1")
			rec.Checkpoint = &jobs.Checkpoint{Seq: 3, Path: "/ck/j1/3", At: epochOf(at)}
			h.store.put(rec)
			if err := h.s.rescan(h.ctx); err != nil {
				t.Fatal(err)
			}
			h.s.mu.Lock()
			snap := h.s.snapshotLocked()
			h.s.mu.Unlock()
			if len(snap.Running) != 1 || snap.Running[0].LastCheckpoint.Sub(at).Abs() > time.Millisecond {
				t.Fatalf("engine's running jobs %+v, want j1 with LastCheckpoint %v", snap.Running, at)
			}

			h.nodes.silence("a")
			h.watch(61 * time.Second)
			h.wantChanges(tc.want)
			h.wantAssigned("j1", tc.wantNodes...)
			m := h.s.Stats(0).Metrics
			// Lost at about 61 s after the silence, 66 s after the checkpoint.
			if w := m["scheduler_node_lost_work_s"]; w < 60 || w > 70 {
				t.Errorf("scheduler_node_lost_work_s = %v, want about 66 (since the checkpoint, not the start)", w)
			}
			if c, w := m["scheduler_node_lost_cpu_s"], m["scheduler_node_lost_work_s"]; math.Abs(c-4*w) > 0.01 {
				t.Errorf("scheduler_node_lost_cpu_s = %v, want 4 × %v", c, w)
			}
			if len(m) > 20 {
				t.Errorf("%d metrics: compute.metrics carries 20", len(m))
			}
		})
	}
}
