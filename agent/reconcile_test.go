package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestReconcileAfterRollback: Redis comes back from an older AOF (the
// acknowledged writes of the last moment lost: a job's end, another job's
// request, record and start). The agent re-asserts both from what it
// holds: the ended job is recorded succeeded again, the running one's
// record is recreated running on its node, and nothing starts twice.
func TestReconcileAfterRollback(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{AOF: true})
	e := newEnvOn(t, srv.Client(t), redistest.Namespace(t))
	a := e.agent(nil, nil)
	e.run(a)

	j0 := e.queued(`{"command":["true"],"estimated_duration":1}`)
	e.assign(j0.JobID, "n1")
	e.waitStatus(j0.JobID, wire.JobRunning)
	e.waitFor("j0's task started", func() bool { return e.prov.Started() == 1 })
	snap, err := srv.CopyAOF()
	if err != nil {
		t.Fatal(err)
	}
	// After the copy, so lost with the rollback: j0 ends, j1 is posted,
	// accepted and started.
	e.clk.Advance(2 * time.Second)
	e.waitStatus(j0.JobID, wire.JobSucceeded)
	j1 := e.queued(job30s)
	e.assign(j1.JobID, "n1")
	e.waitStatus(j1.JobID, wire.JobRunning)
	e.waitFor("both tasks started and tracked", func() bool { return e.prov.Started() == 2 && a.Stats().Running == 1 })

	if err := srv.RestartFrom(snap); err != nil {
		t.Fatal(err)
	}
	// (The agent re-asserts within a heartbeat, so the rolled-back state
	// itself is seen only in Stats: two records it had to fix.)
	e.waitFor("the round to close", func() bool {
		open, err := e.reg.RoundOpen(e.ctx)
		return err == nil && !open
	})
	e.waitStatus(j0.JobID, wire.JobSucceeded)
	r1 := e.waitStatus(j1.JobID, wire.JobRunning)
	if r1.Node != "n1" || r1.Handle == "" {
		t.Errorf("j1 re-asserted on %q with handle %q, want n1 and its handle", r1.Node, r1.Handle)
	}
	if ids, _ := e.ch.NodeJobs(e.ctx, "n1"); len(ids) != 1 || ids[0] != j1.JobID {
		t.Errorf("n1's job set after reconciling: %v, want [%s]", ids, j1.JobID)
	}
	if n := e.prov.Started(); n != 2 {
		t.Errorf("%d tasks started in all, want 2 (none again)", n)
	}
	if s := a.Stats(); s.Reasserted != 2 {
		t.Errorf("Reasserted %d, want 2", s.Reasserted)
	}
	// j1 still ends normally, on its record.
	e.clk.Advance(31 * time.Second)
	e.waitStatus(j1.JobID, wire.JobSucceeded)
}

// TestRecentEndsAreBounded: the ends kept for reconciliation stay within
// maxEnds and recentEnds, however busy the agent.
func TestRecentEndsAreBounded(t *testing.T) {
	e := newEnv(t)
	a := e.agent(nil, nil)
	for i := range maxEnds + 500 {
		a.rememberEnd(&task{rec: jobs.Job{JobData: wire.JobData{JobID: fmt.Sprint("j", i)}}, node: "n1"}, wire.JobSucceeded, jobs.Update{})
	}
	if n := len(a.ends); n != maxEnds {
		t.Fatalf("%d ends kept, want maxEnds (%d)", n, maxEnds)
	}
	if _, ok := a.ends["j0"]; ok {
		t.Error("the oldest end was kept, a newer one dropped")
	}
	e.clk.Advance(recentEnds + time.Second)
	a.rememberEnd(&task{rec: jobs.Job{JobData: wire.JobData{JobID: "last"}}, node: "n1"}, wire.JobSucceeded, jobs.Update{})
	if n := len(a.ends); n != 1 || len(a.endOrder) != 1 {
		t.Fatalf("after recentEnds: %d ends, %d in order; want only the last", n, len(a.endOrder))
	}
}
