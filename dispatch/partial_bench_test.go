package dispatch

import (
	"testing"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/wire"
)

// BenchmarkPartialPlan: one cycle's planning after an end, with 4,000
// one-core jobs of four accounts waiting for a node of 8 cores (the e2e
// bench's shape), 500 of them run since the last full plan: the partial
// plan's input, the engine over it, and its check; against the full
// plan's input and the engine over every job.
func BenchmarkPartialPlan(b *testing.B) {
	h := queuedOnOneNode(b, 4000)
	for _, a := range h.orders.allAssigned() {
		h.agentStart(a.JobID)
	}
	h.mustCycle()
	// 500 ends, each followed by its cycle (a partial plan placing one
	// job) and the start of that job: the front of the full plan's order
	// is placed, as in a run.
	for range 500 {
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseRunning && h.store.rec(a.JobID).Status == wire.JobRunning {
				h.agentEnd(a.JobID, wire.JobSucceeded)
				break
			}
		}
		h.mustCycle()
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseAssigned && h.store.rec(a.JobID).Status == wire.JobQueued {
				h.agentStart(a.JobID)
			}
		}
	}
	for _, a := range h.orders.allAssigned() {
		if p, ok := h.phase(a.JobID); ok && p == PhaseRunning && h.store.rec(a.JobID).Status == wire.JobRunning {
			h.agentEnd(a.JobID, wire.JobSucceeded)
			break
		}
	}
	h.takeReports()
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	b.Run("partial", func(b *testing.B) {
		jobs := 0
		for b.Loop() {
			snap, ps, ok := h.s.partialSnapshotLocked(1)
			if !ok {
				b.Fatal("no partial plan")
			}
			jobs = len(snap.Pending)
			plan, _ := h.s.partialBuf.schedule(h.s.state, snap)
			if !h.s.partialValidLocked(plan, ps) || len(plan.Placements) != 1 {
				b.Fatalf("partial plan refused, or placing %d", len(plan.Placements))
			}
		}
		b.ReportMetric(float64(jobs), "jobs/plan")
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			snap := h.s.snapshotLocked()
			plan, _ := engine.Schedule(h.s.state, snap)
			if len(plan.Placements) != 1 {
				b.Fatalf("placing %d", len(plan.Placements))
			}
		}
	})
}
