package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// brokenDisk is a provider whose starts fail (as on a full or read-only
// disk) while broken is set, and whose Probe says so.
type brokenDisk struct {
	providers.Provider
	broken atomic.Bool
	starts atomic.Int32
}

func (b *brokenDisk) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	if b.broken.Load() {
		return providers.Handle{}, errors.New("write task record: read-only file system")
	}
	b.starts.Add(1)
	return b.Provider.Start(ctx, t)
}

func (b *brokenDisk) Probe(context.Context) error {
	if b.broken.Load() {
		return errors.New("read-only file system")
	}
	return nil
}

// TestFailedStartsTakeTheNodeOut: a start the provider refuses for a reason
// of its own puts the job back in the queue (nothing started, so it may
// run elsewhere; never failed, never started twice); after StartFailures in
// a row the node registers itself out of scheduling with the reason, and
// Health says so (/readyz); once a probe succeeds it is back.
func TestFailedStartsTakeTheNodeOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	disk := &brokenDisk{Provider: e.prov}
	disk.broken.Store(true)
	a := e.agent(disk, nil)
	a.cfg.StartFailures = 2
	a.cfg.ProbeEvery = 20 * time.Millisecond
	e.run(a)
	var ids []string
	for range 2 {
		j := e.queued(job30s)
		ids = append(ids, j.JobID)
		e.assign(j.JobID, "n1")
		e.waitFor("the job back in the queue after a failed start", func() bool {
			r := e.rec(j.JobID)
			return r.Status == wire.JobQueued && r.Attempt == 1
		})
	}
	if r := e.rec(ids[0]); r.Error != nil {
		t.Errorf("a requeued job carries an error: %+v", r.Error)
	}
	e.waitFor("the node out of scheduling", func() bool {
		nodes, _, err := e.reg.Nodes(e.ctx)
		return err == nil && len(nodes) == 1 && nodes[0].Unhealthy != ""
	})
	if ok, why := a.Health(); ok || why == "" {
		t.Errorf("Health %v %q, want out with a reason", ok, why)
	}
	// The disk is fixed: the probe brings the node back.
	disk.broken.Store(false)
	e.waitFor("the node back in scheduling", func() bool {
		nodes, _, err := e.reg.Nodes(e.ctx)
		ok, _ := a.Health()
		return err == nil && len(nodes) == 1 && nodes[0].Unhealthy == "" && ok
	})
	e.assign(ids[0], "n1")
	e.waitRunning(ids[0])
	if n := disk.starts.Load(); n != 1 {
		t.Errorf("%d starts reached the provider's task launch, want 1", n)
	}
}

// TestInvalidTaskFailsTheJob: a task the provider cannot run as given
// (ErrInvalidTask: it would fail on any node) fails the job, and does not
// count against the node.
func TestInvalidTaskFailsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.agent(invalidStarts{e.prov}, nil)
	a.cfg.StartFailures = 1
	e.run(a)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	r := e.waitStatus(j.JobID, wire.JobFailed)
	if r.Error == nil || r.Error.Code != "start_failed" {
		t.Fatalf("error %+v, want start_failed", r.Error)
	}
	if ok, _ := a.Health(); !ok {
		t.Error("an invalid task took the node out")
	}
}

type invalidStarts struct{ providers.Provider }

func (invalidStarts) Start(context.Context, providers.Task) (providers.Handle, error) {
	return providers.Handle{}, providers.ErrInvalidTask
}

// TestVanishedRecord: a running job whose record vanished (Redis lost it)
// is settled once its task ends, not retried for ever (issue 11, defect 4:
// "record job end … not found" six times a second, cores held for good).
func TestVanishedRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(nil, nil)
	e.run(a)
	e.waitRunning(j.JobID)
	if err := e.rdb.Del(e.ctx, e.keys.Job(j.JobID)).Err(); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(31 * time.Second)
	e.waitFor("the task settled", func() bool { return a.Stats().Running == 0 && len(e.nodeJobs("n1")) == 0 })
	if ok, _ := e.jobs.Exists(e.ctx, j.JobID); ok {
		t.Error("the vanished record came back")
	}
}

// TestOldRunDoesNotEndTheNewOne: a job the scheduler ended lost and ran
// again on another node (requeue_lost) is not ended by the first node's
// agent when its old task finishes: the record names the other node.
func TestOldRunDoesNotEndTheNewOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(nil, nil)
	e.run(a)
	e.waitRunning(j.JobID)
	// The scheduler gave up on n1 (requeue_lost) and the job now runs on n2.
	e.schedulerTransition(j.JobID, wire.JobRunning, wire.JobQueued, jobs.Update{})
	e.assign(j.JobID, "n2")
	if _, err := e.jobs.Transition(e.ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{Node: "n2", ExpectNode: "n2"}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(31 * time.Second) // n1's old task ends
	e.waitFor("n1's old task settled", func() bool { return a.Stats().Running == 0 })
	if r := e.rec(j.JobID); r.Status != wire.JobRunning || r.Node != "n2" {
		t.Fatalf("record %s on %s after n1's old task ended, want running on n2", r.Status, r.Node)
	}
}

// mirrorFails makes the first start's compare-and-set succeed and its
// job entry's mirror fail, as when Redis goes away between the two.
type mirrorFails struct {
	JobStore
	failed atomic.Bool
}

func (m *mirrorFails) Change(ctx context.Context, id string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, jobs.Mirror, error) {
	j, mirror, err := m.JobStore.Change(ctx, id, from, to, u)
	if err == nil && to == wire.JobRunning && from == wire.JobQueued && m.failed.CompareAndSwap(false, true) {
		return j, func(context.Context) error { return errors.New("connection refused") }, nil
	}
	return j, mirror, err
}

// TestStartWhenOnlyTheMirrorFailed: a start whose compare-and-set was made
// but whose job entry could not be updated still starts the task; before,
// the job stayed running with no task for ever.
func TestStartWhenOnlyTheMirrorFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.agent(nil, nil)
	a.cfg.Jobs = &mirrorFails{JobStore: e.jobs}
	e.run(a)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.waitFor("the task started", func() bool { return e.prov.Started() == 1 })
	e.clk.Advance(31 * time.Second)
	e.waitStatus(j.JobID, wire.JobSucceeded)
}

// TestFailuresOnAnOutNodeNeverFailTheJob: orders already on their way to
// a node that just took itself out bounce off it, each a new attempt.
// Those failures are the node's, not the job's: the job goes back to the
// queue every time and never fails for them. Before, its fourth bounce
// failed it (start_failed), as a job failing everywhere would.
func TestFailuresOnAnOutNodeNeverFailTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	disk := &brokenDisk{Provider: e.prov}
	disk.broken.Store(true)
	a := e.agent(disk, nil)
	a.cfg.StartFailures = 2
	a.cfg.ProbeEvery = time.Hour
	e.run(a)
	j := e.queued(job30s)
	for attempt := 1; attempt <= 6; attempt++ {
		e.assign(j.JobID, "n1")
		e.waitFor(fmt.Sprintf("attempt %d back in the queue", attempt), func() bool {
			r := e.rec(j.JobID)
			return r.Attempt == attempt && r.Status != wire.JobRunning
		})
		if r := e.rec(j.JobID); r.Status != wire.JobQueued {
			t.Fatalf("attempt %d on a node out of scheduling: the job is %s %+v, want queued", attempt, r.Status, r.Error)
		}
	}
}
