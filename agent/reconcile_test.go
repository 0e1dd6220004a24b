package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
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

// gatedProvider holds each Start in the provider until gate is closed,
// after saying so on entered: a start in flight.
type gatedProvider struct {
	*fake.Provider
	entered chan struct{}
	gate    chan struct{}
}

func (p *gatedProvider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	<-p.gate
	return p.Provider.Start(ctx, t)
}

// TestReconcileWaitsForStartsInFlight (the CI failure of 2026-12-02, two
// requests run twice with both agents live): a start whose
// compare-and-set Redis acknowledged and then lost is still in the
// provider when the round asks this node to re-assert. The agent answered
// with what it tracked, which did not include that task yet; the round
// closed, and the job, its record gone with Redis, was free to be
// accepted again and run on another node. Now the round waits for the
// starts in flight, and the record is re-asserted running here.
func TestReconcileWaitsForStartsInFlight(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{AOF: true})
	e := newEnvOn(t, srv.Client(t), redistest.Namespace(t))
	prov := &gatedProvider{Provider: e.prov, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	a := e.agent(prov, nil)
	e.run(a)
	e.waitFor("n1 registered and its first round over", func() bool {
		open, err := e.reg.RoundOpen(e.ctx)
		return err == nil && !open && e.rdb.HExists(e.ctx, e.keys.PoolNodes(), "n1").Val() &&
			e.rdb.Exists(e.ctx, e.keys.NodeAssign("n1")).Val() == 1
	})
	snap, err := srv.CopyAOF()
	if err != nil {
		t.Fatal(err)
	}
	// After the copy, so lost with the rollback: j1 is accepted, assigned
	// and moved to running by the agent, whose start is then held in the
	// provider.
	j1 := e.queued(job30s)
	e.assign(j1.JobID, "n1")
	select {
	case <-prov.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the start never reached the provider")
	}
	if r := e.rec(j1.JobID); r.Status != wire.JobRunning {
		t.Fatalf("j1 is %s while its start is in the provider, want running", r.Status)
	}
	if err := srv.RestartFrom(snap); err != nil {
		t.Fatal(err)
	}
	run := e.rdb.InfoMap(e.ctx, "server").Item("Server", "run_id")
	e.waitFor("the agent's heartbeat to open the round of the restarted Redis", func() bool {
		return e.rdb.HGet(e.ctx, e.keys.PoolBoot(), "run").Val() == run
	})
	// Before the fix the agent answered at once (within a heartbeat of
	// 20 ms) and the round closed; give it many heartbeats to do so.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if open, err := e.reg.RoundOpen(e.ctx); err == nil && !open {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(prov.gate)
	e.waitFor("the round to close", func() bool {
		open, err := e.reg.RoundOpen(e.ctx)
		return err == nil && !open
	})
	r1, err := e.jobs.Get(e.ctx, j1.JobID)
	if err != nil {
		t.Fatalf("j1's record after the round: %v (its start, in flight during the rollback, was not re-asserted)", err)
	}
	if r1.Status != wire.JobRunning || r1.Node != "n1" {
		t.Errorf("j1 after the round: %s on %q, want running on n1", r1.Status, r1.Node)
	}
	if n := prov.Started(); n != 1 {
		t.Errorf("%d tasks started, want 1", n)
	}
}

// TestRegistersAgainAfterDataLoss: Redis loses the node's registration
// (a restart without persistence, or a rollback to before it registered);
// before, the agent went on beating for a node the scheduler no longer
// knew, and the pool had no node until the adapter restarted.
func TestRegistersAgainAfterDataLoss(t *testing.T) {
	e := newEnv(t)
	a := e.agent(nil, nil)
	e.run(a)
	e.waitFor("n1 registered", func() bool { return e.rdb.HExists(e.ctx, e.keys.PoolNodes(), "n1").Val() })
	want := e.rdb.HGet(e.ctx, e.keys.PoolNodes(), "n1").Val()
	if err := e.rdb.Del(e.ctx, e.keys.PoolNodes()).Err(); err != nil {
		t.Fatal(err)
	}
	e.waitFor("n1 registered again", func() bool { return e.rdb.HExists(e.ctx, e.keys.PoolNodes(), "n1").Val() })
	if got := e.rdb.HGet(e.ctx, e.keys.PoolNodes(), "n1").Val(); got != want {
		t.Errorf("registered again as %s, want %s", got, want)
	}
}

// takenIDProvider is a provider on which the task ID taken was made
// before but never started (an adapter died between the two): Start
// refuses it as the local provider does (ErrTaskExists, an invalid task),
// and Poll does not know it.
type takenIDProvider struct {
	providers.Provider
	taken string
}

func (p *takenIDProvider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	if t.ID == p.taken {
		return providers.Handle{}, fmt.Errorf("taken: start %s: %w: %w", t.ID, providers.ErrInvalidTask, providers.ErrTaskExists)
	}
	return p.Provider.Start(ctx, t)
}

// TestTakenTaskIDThatNeverRanRequeues: a start order for an attempt whose
// task ID is taken on the node, with nothing run under it (the adapter
// died between making the task's directory and starting it, and Redis
// lost what followed: integration/TestRedisRollbackRunsNothingTwice met
// it), puts the job back in the queue to run as its next attempt. It
// failed the job start_failed, as a task the node could never run.
func TestTakenTaskIDThatNeverRanRequeues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	prov := &takenIDProvider{Provider: e.prov, taken: TaskID(j.JobID, 1)}
	e.run(e.agent(prov, nil))
	var rec jobs.Job
	e.waitFor("the job back in the queue after attempt 1", func() bool {
		var err error
		rec, err = e.jobs.Get(e.ctx, j.JobID)
		return err == nil && (rec.Status.Terminal() || rec.Status == wire.JobQueued && rec.Attempt == 1)
	})
	if rec.Status != wire.JobQueued || rec.Error != nil {
		t.Fatalf("job %s (error %+v) after its attempt's task ID was found taken; want queued, to run as attempt 2", rec.Status, rec.Error)
	}
	// Placed again on the node, it runs as attempt 2, under a new task ID.
	e.assign(j.JobID, "n1")
	if r := e.waitRunning(j.JobID); r.Attempt != 2 {
		t.Errorf("the job runs as attempt %d, want 2", r.Attempt)
	}
}
