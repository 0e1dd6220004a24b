package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// env is one test's board: real Redis, job store, assignment channel and
// registry, the scheduler's fence (an elected scheduler's epoch), and a
// fake provider on a fake clock.
type env struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	keys  blackboard.Keys
	board *blackboard.Store
	clk   *clock.Fake
	jobs  *jobs.Store
	ch    *pool.Channel
	reg   *pool.Registry
	fence pool.Fence
	prov  *fake.Provider
	log   *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rdb, ns := redistest.New(t)
	return newEnvOn(t, rdb, ns)
}

// newEnvOn is newEnv on a given Redis and namespace.
func newEnvOn(t *testing.T, rdb redis.UniversalClient, ns string) *env {
	t.Helper()
	clk := clock.NewFake(time.Now().Truncate(time.Millisecond))
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	bb, err := blackboard.New(rdb, blackboard.Config{Namespace: ns, Clock: clk, MaxEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jobs.New(rdb, bb, jobs.Config{Clock: clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	k := bb.Keys()
	el, err := pool.NewElector(rdb, k, pool.ElectorConfig{ID: "scheduler-1", TTL: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	l, ok, err := el.TryAcquire(t.Context())
	if err != nil || !ok {
		t.Fatalf("elect: %v %v", ok, err)
	}
	return &env{t: t, ctx: t.Context(), rdb: rdb, keys: k, board: bb, clk: clk, jobs: js,
		ch: pool.NewChannel(rdb, k), reg: pool.NewRegistry(rdb, k),
		fence: pool.Fence{Key: el.FenceKey(), Epoch: l.Epoch}, prov: fake.New("fake", clk, time.Hour), log: log}
}

// queued posts a compute.request with data and accepts it as the broker
// does: a queued job record (and its job entry; the request consumed).
func (e *env) queued(data string) jobs.Job {
	e.t.Helper()
	ctx := e.ctx
	ent := blackboard.NewEntry(blackboard.RequestTopic, "mod", json.RawMessage(data))
	id, err := e.board.Post(ctx, ent)
	if err != nil {
		e.t.Fatal(err)
	}
	req, werr := wire.DecodeRequest(ent.Data, wire.EntryInfo{ID: id, SourceModule: "mod", Priority: int(ent.Priority),
		Timestamp: ent.Timestamp, TTLSeconds: ent.TTLSeconds})
	if werr != nil {
		e.t.Fatalf("decode %s: %v", data, werr)
	}
	spec := jobs.AcceptSpec{JobID: wire.JobID(id), EntryID: id, Module: "mod", Request: req, Submitted: ent.Timestamp}
	r, err := e.jobs.Accept(ctx, spec)
	if err != nil || !r.Created {
		e.t.Fatalf("accept: %+v %v", r, err)
	}
	if err := e.jobs.PublishAccepted(ctx, spec, r.Job); err != nil {
		e.t.Fatal(err)
	}
	j, err := e.jobs.ConsumeAccepted(ctx, spec, r.Job)
	if err != nil || j.Status != wire.JobQueued {
		e.t.Fatalf("consume: %+v %v", j, err)
	}
	return j
}

// a job that "runs" 30 s on the fake clock
const job30s = `{"command":["sleep","30"],"estimated_duration":30}`

// assign gives job id to node, as the scheduler does (fenced).
func (e *env) assign(id, node string) {
	e.t.Helper()
	// As the scheduler does: while the round the agent's first heartbeat
	// answers is open (reconcile.go), try again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		errs := e.ch.Assign(e.ctx, e.fence, []pool.Assignment{{JobID: id, Placement: providers.Placement{Node: node, NUMA: -1, CPUs: []int{0, 1}}}})
		if errors.Is(errs[0], pool.ErrReconciling) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if errs[0] != nil {
			e.t.Fatalf("assign %s to %s: %v", id, node, errs[0])
		}
		return
	}
}

// entry returns the data of job id's compute.job entry, the modules' view.
func (e *env) entry(id string) wire.JobData {
	e.t.Helper()
	en, err := e.board.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	var jd wire.JobData
	if err := json.Unmarshal(en.Data, &jd); err != nil {
		e.t.Fatal(err)
	}
	return jd
}

func (e *env) rec(id string) jobs.Job {
	e.t.Helper()
	j, err := e.jobs.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// agent returns a new agent serving node n1 with prov (the env's provider
// when nil); resolve, when set, replaces the default resolver (the
// request's command, no timeout).
func (e *env) agent(prov providers.Provider, resolve Resolver) *Agent {
	e.t.Helper()
	if prov == nil {
		prov = e.prov
	}
	if resolve == nil {
		resolve = func(r wire.Request) (Command, *wire.Error) { return Command{Argv: r.Command}, nil }
	}
	a, err := New(Config{
		Nodes: []Node{{Record: pool.NodeRecord{Node: inventory.Node{Name: "n1", CPUs: 4, MemoryMiB: 8192},
			Agent: "agent-n1", Provider: "fake", Fake: true}, Provider: prov}},
		Resolve: resolve, Jobs: e.jobs, Channel: e.ch, Registry: e.reg,
		Beat: 20 * time.Millisecond, Poll: 5 * time.Millisecond, Clock: e.clk, Logger: e.log,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// run runs a until the returned stop is called (or the test ends); stop
// waits for Run to return and checks it returned nil.
func (e *env) run(a *Agent) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.ctx))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("agent Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			e.t.Error("agent Run did not return within 10 s of its context's end")
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after 10 s.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	e.waitWithin(10*time.Second, what, cond)
}

// waitWithin is waitFor with its own limit, for steps that go through an
// outside system (slurmctld) that may answer slowly on a loaded machine.
func (e *env) waitWithin(limit time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitStatus waits until job id's record has status st.
func (e *env) waitStatus(id string, st wire.JobStatus) jobs.Job {
	e.t.Helper()
	var j jobs.Job
	e.waitFor(fmt.Sprintf("job %s %s", id, st), func() bool {
		var err error
		j, err = e.jobs.Get(e.ctx, id)
		return err == nil && j.Status == st
	})
	return j
}

// waitRunning waits until job id runs with its handle stored.
func (e *env) waitRunning(id string) jobs.Job {
	e.t.Helper()
	var j jobs.Job
	e.waitFor("job "+id+" running with a handle", func() bool {
		var err error
		j, err = e.jobs.Get(e.ctx, id)
		return err == nil && j.Status == wire.JobRunning && j.Handle != ""
	})
	return j
}

// reports returns every report on the stream as "job event status".
func (e *env) reports() []string {
	e.t.Helper()
	rs, err := e.ch.Reports(e.ctx, "0-0", 1000, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Node != "n1" {
			e.t.Errorf("report %+v from node %q", r, r.Node)
		}
		out = append(out, r.JobID+" "+r.Event+" "+r.Status)
	}
	return out
}

func (e *env) waitReports(want ...string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.reports()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("reports:\n got %q\nwant %q", got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *env) nodeJobs(node string) []string {
	e.t.Helper()
	ids, err := e.ch.NodeJobs(e.ctx, node)
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// ordersLeft is how many orders are still on node's stream (handled
// orders are acknowledged and deleted).
func (e *env) ordersLeft(node string) int64 {
	n, err := e.rdb.XLen(e.ctx, e.keys.NodeAssign(node)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// schedulerTransition is a transition the (fenced) scheduler makes.
func (e *env) schedulerTransition(id string, from, to wire.JobStatus, u jobs.Update) {
	e.t.Helper()
	fjs := e.jobs.Fenced(jobs.Fence{Key: e.fence.Key, Epoch: e.fence.Epoch})
	if _, err := fjs.Transition(e.ctx, id, from, to, u); err != nil {
		e.t.Fatalf("scheduler transition %s %s → %s: %v", id, from, to, err)
	}
}

// TestRunsAssignedJob: an order for the agent's node starts the job: the
// record goes queued → running on the node with the provider's handle
// stored, a started report follows; when the task ends (the fake clock
// passes its duration) the record says succeeded, an ended report
// follows, the job leaves the node's job set and the order its stream.
func TestRunsAssignedJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(nil, nil)
	e.run(a)

	rec := e.waitRunning(j.JobID)
	if rec.Node != "n1" || rec.Attempt != 1 || rec.StartedAt == nil {
		t.Errorf("running record: node %q attempt %d started %v", rec.Node, rec.Attempt, rec.StartedAt)
	}
	var h providers.Handle
	if err := json.Unmarshal([]byte(rec.Handle), &h); err != nil || h != (providers.Handle{Provider: "fake", ID: TaskID(j.JobID, 1)}) {
		t.Errorf("stored handle %s (%v), want the fake provider's task %s", rec.Handle, err, TaskID(j.JobID, 1))
	}
	e.waitReports(j.JobID + " started running")
	if n := e.prov.Started(); n != 1 {
		t.Errorf("provider started %d tasks", n)
	}
	e.waitFor("the order acknowledged", func() bool { return e.ordersLeft("n1") == 0 })
	if ids := e.nodeJobs("n1"); !slices.Equal(ids, []string{j.JobID}) {
		t.Errorf("node job set %v while it runs", ids)
	}
	nodes, _, err := e.reg.Nodes(e.ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Name != "n1" || nodes[0].Agent != "agent-n1" {
		t.Errorf("registry: %+v %v", nodes, err)
	}

	e.clk.Advance(29 * time.Second)
	time.Sleep(30 * time.Millisecond) // a few polls: still running
	if st := e.rec(j.JobID).Status; st != wire.JobRunning {
		t.Fatalf("status %s before the task's end", st)
	}
	e.clk.Advance(time.Second)
	rec = e.waitStatus(j.JobID, wire.JobSucceeded)
	if rec.ExitCode == nil || *rec.ExitCode != 0 || rec.Error != nil || rec.FinishedAt == nil {
		t.Errorf("succeeded record: exit %v error %+v finished %v", rec.ExitCode, rec.Error, rec.FinishedAt)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" ended succeeded")
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
	if s := a.Stats(); s.Started != 1 || s.Succeeded != 1 || s.Running != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestRefusesJobOfAnotherNode: an order whose job record names another
// node (the scheduler moved it) is refused: nothing starts, the record
// stays queued on the other node, a refused report follows and the job
// leaves this node's job set.
func TestRefusesJobOfAnotherNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.assign(j.JobID, "n2") // placed again, elsewhere
	a := e.agent(nil, nil)
	e.run(a)

	e.waitReports(j.JobID + " refused ")
	rec := e.rec(j.JobID)
	if rec.Status != wire.JobQueued || rec.Node != "n2" || rec.Attempt != 0 {
		t.Errorf("record %s on %q attempt %d, want queued on n2, never started", rec.Status, rec.Node, rec.Attempt)
	}
	if n := e.prov.Started(); n != 0 {
		t.Errorf("provider started %d tasks", n)
	}
	e.waitFor("the order acknowledged", func() bool { return e.ordersLeft("n1") == 0 })
	if ids := e.nodeJobs("n1"); len(ids) != 0 {
		t.Errorf("n1 still lists %v", ids)
	}
	if ids := e.nodeJobs("n2"); !slices.Equal(ids, []string{j.JobID}) {
		t.Errorf("n2 lists %v", ids)
	}
	if s := a.Stats(); s.Refused != 1 || s.Started != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestWithdrawnAtStart: a job whose request was retracted before its start
// is cancelled by the start's compare-and-set; nothing runs.
func TestWithdrawnAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	if ok, err := e.jobs.MarkCancelRequested(e.ctx, j.JobID); !ok || err != nil {
		t.Fatalf("mark cancel: %v %v", ok, err)
	}
	a := e.agent(nil, nil)
	e.run(a)
	e.waitReports(j.JobID + " ended cancelled")
	if rec := e.rec(j.JobID); rec.Status != wire.JobCancelled {
		t.Errorf("status %s", rec.Status)
	}
	if n := e.prov.Started(); n != 0 {
		t.Errorf("provider started %d tasks", n)
	}
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
}

// TestRestartReattaches: an agent that restarts while its job runs
// re-attaches to the task through the stored handle (it is not started
// again) and records its end, even one that came while it was down.
func TestRestartReattaches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	stop := e.run(e.agent(nil, nil))
	e.waitRunning(j.JobID)
	e.waitReports(j.JobID + " started running")
	stop()

	e.clk.Advance(31 * time.Second) // the task ends while no agent watches
	time.Sleep(20 * time.Millisecond)
	if st := e.rec(j.JobID).Status; st != wire.JobRunning {
		t.Fatalf("status %s with no agent running", st)
	}
	a2 := e.agent(nil, nil)
	e.run(a2)
	rec := e.waitStatus(j.JobID, wire.JobSucceeded)
	if rec.Attempt != 1 || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Errorf("record attempt %d exit %v", rec.Attempt, rec.ExitCode)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" ended succeeded")
	if n := e.prov.Started(); n != 1 {
		t.Errorf("provider started %d tasks, want 1 (re-attached, not restarted)", n)
	}
	if s := a2.Stats(); s.Succeeded != 1 || s.Started != 0 {
		t.Errorf("restarted agent's stats %+v", s)
	}
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
}

// TestRestartRequeuesUnstarted: a job recorded running on the node whose
// task the provider never started (the agent died between the compare-and
// -set and the start) goes back to the queue when the agent restarts, and
// the scheduler is told (an ended report with status queued).
func TestRestartRequeuesUnstarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	if _, err := e.jobs.Transition(e.ctx, j.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{Node: "n1", ExpectNode: "n1"}); err != nil {
		t.Fatal(err)
	}
	a := e.agent(nil, nil)
	e.run(a)
	rec := e.waitStatus(j.JobID, wire.JobQueued)
	if rec.Node != "n1" {
		t.Errorf("requeued record names %q", rec.Node)
	}
	if n := e.prov.Started(); n != 0 {
		t.Errorf("provider started %d tasks", n)
	}
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
	if s := a.Stats(); s.Requeued != 1 {
		t.Errorf("stats %+v", s)
	}
	e.waitReports(j.JobID + " ended queued")
}

// TestCorrectsLost: a job the scheduler ended failed (lost) while its
// agent was down gets its true outcome when the agent comes back
// (failed/lost → succeeded, the one legal correction), reported as such.
func TestCorrectsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	stop := e.run(e.agent(nil, nil))
	e.waitRunning(j.JobID)
	stop()
	e.schedulerTransition(j.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{
		Error: &wire.JobError{Code: wire.JobErrorLost, Message: "node n1 silent"}})

	a2 := e.agent(nil, nil)
	e.run(a2)
	time.Sleep(20 * time.Millisecond) // polls: the task still runs
	if st := e.rec(j.JobID).Status; st != wire.JobFailed {
		t.Fatalf("status %s before the task's end", st)
	}
	e.clk.Advance(31 * time.Second)
	rec := e.waitStatus(j.JobID, wire.JobSucceeded)
	if !wire.LegalCorrection(wire.JobFailed, wire.JobErrorLost, rec.Status) {
		t.Errorf("correction to %s is not legal", rec.Status)
	}
	if rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Errorf("exit code %v", rec.ExitCode)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" corrects succeeded")
	if s := a2.Stats(); s.Corrected != 1 {
		t.Errorf("stats %+v", s)
	}
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
	if n := e.prov.Started(); n != 1 {
		t.Errorf("provider started %d tasks", n)
	}
}

// TestCorrectionClearsLostError: a job corrected from failed/lost to
// succeeded no longer carries the "lost" error (wire.JobData: error is
// null unless the job was rejected, failed, expired or cancelled).
func TestCorrectionClearsLostError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	stop := e.run(e.agent(nil, nil))
	e.waitRunning(j.JobID)
	stop()
	e.schedulerTransition(j.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{
		Error: &wire.JobError{Code: wire.JobErrorLost, Message: "node n1 silent"}})
	e.clk.Advance(31 * time.Second)
	e.run(e.agent(nil, nil))
	rec := e.waitStatus(j.JobID, wire.JobSucceeded)
	if rec.Error != nil {
		t.Errorf("succeeded (corrected) record still has error %+v", *rec.Error)
	}
}

// TestStopOrderCancels: a stop order cancels the running job's task; the
// record says cancelled and an ended report follows.
func TestStopOrderCancels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(nil, nil)
	e.run(a)
	e.waitRunning(j.JobID)
	if err := e.ch.Stop(e.ctx, e.fence, "n1", j.JobID, "request retracted"); err != nil {
		t.Fatal(err)
	}
	rec := e.waitStatus(j.JobID, wire.JobCancelled)
	if rec.Error == nil || rec.Error.Code != "cancelled" {
		t.Errorf("cancelled record's error %+v", rec.Error)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" ended cancelled")
	// The agent forgets the task just after it reports the end (end, then
	// untrack): a check at the report alone raced with that.
	e.waitFor("the task forgotten", func() bool { return a.Stats().Running == 0 })
	if s := a.Stats(); s.Cancelled != 1 {
		t.Errorf("stats %+v", s)
	}
	e.waitFor("the stop order acknowledged", func() bool { return e.ordersLeft("n1") == 0 })
}

// TestFailureAndRetry: a task that fails (here: past its command's
// timeout) ends the job failed with the reason, or sends it back to the
// queue while it has retries left.
func TestFailureAndRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retries int
		want    wire.JobStatus
	}{
		{name: "no retries", want: wire.JobFailed},
		{name: "a retry left", retries: 1, want: wire.JobQueued},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.queued(fmt.Sprintf(`{"command":["sleep","30"],"estimated_duration":30,"max_retries":%d}`, tc.retries))
			e.assign(j.JobID, "n1")
			a := e.agent(nil, func(r wire.Request) (Command, *wire.Error) {
				return Command{Argv: r.Command, Timeout: 10 * time.Second}, nil
			})
			e.run(a)
			e.waitRunning(j.JobID)
			e.clk.Advance(10 * time.Second)
			rec := e.waitStatus(j.JobID, tc.want)
			if rec.Error == nil || rec.Error.Code != "timeout" {
				t.Errorf("error %+v, want code timeout", rec.Error)
			}
			e.waitReports(j.JobID+" started running", j.JobID+" ended "+string(tc.want))
		})
	}
}

// TestNodeRefusesRequest: a request this node's resolver refuses fails at
// its start, with the resolver's code; nothing runs.
func TestNodeRefusesRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.run(e.agent(nil, func(wire.Request) (Command, *wire.Error) {
		return Command{}, &wire.Error{Code: wire.CodeCommandNotAllowed, Message: "sleep is not allowed here"}
	}))
	rec := e.waitStatus(j.JobID, wire.JobFailed)
	if rec.Error == nil || rec.Error.Code != string(wire.CodeCommandNotAllowed) {
		t.Errorf("error %+v", rec.Error)
	}
	if n := e.prov.Started(); n != 0 {
		t.Errorf("provider started %d tasks", n)
	}
	e.waitReports(j.JobID + " ended failed")
}

// TestHeartbeat: the agent registers its node and renews its heartbeat
// (stamped in Redis's time).
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(e.agent(nil, nil))
	var first time.Time
	e.waitFor("registered", func() bool {
		ns, _, err := e.reg.Nodes(e.ctx)
		if err == nil && len(ns) == 1 && !ns[0].LastBeat.IsZero() {
			first = ns[0].LastBeat
			return true
		}
		return false
	})
	e.waitFor("a later beat", func() bool {
		ns, _, err := e.reg.Nodes(e.ctx)
		return err == nil && len(ns) == 1 && ns[0].LastBeat.After(first)
	})
}

// TestNewChecksConfig: an agent needs nodes with names and providers, and
// its seams.
func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := Config{Nodes: []Node{{Record: pool.NodeRecord{Node: inventory.Node{Name: "n1"}}, Provider: e.prov}},
		Resolve: func(wire.Request) (Command, *wire.Error) { return Command{}, nil }, Jobs: e.jobs, Channel: e.ch, Registry: e.reg}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"no nodes", func(c *Config) { c.Nodes = nil }},
		{"no resolver", func(c *Config) { c.Resolve = nil }},
		{"no job store", func(c *Config) { c.Jobs = nil }},
		{"nameless node", func(c *Config) { c.Nodes = []Node{{Provider: e.prov}} }},
		{"no provider", func(c *Config) { c.Nodes = []Node{{Record: pool.NodeRecord{Node: inventory.Node{Name: "n1"}}}} }},
		{"node twice", func(c *Config) { c.Nodes = append(slices.Clone(c.Nodes), c.Nodes[0]) }},
	} {
		c := ok
		tc.mod(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	a, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.ID != "n1" || !slices.Equal(a.Nodes(), []string{"n1"}) {
		t.Errorf("id %q nodes %v", a.cfg.ID, a.Nodes())
	}
}

// stubProvider runs every task forever; Stop only counts.
type stubProvider struct {
	mu    sync.Mutex
	stops int
}

func (p *stubProvider) Start(_ context.Context, t providers.Task) (providers.Handle, error) {
	return providers.Handle{Provider: "stub", ID: t.ID}, nil
}

func (p *stubProvider) Poll(context.Context, providers.Handle) (providers.Status, error) {
	return providers.Status{State: providers.StateRunning}, nil
}

func (p *stubProvider) Stop(context.Context, providers.Handle) error {
	p.mu.Lock()
	p.stops++
	p.mu.Unlock()
	return nil
}

// TestStopOrderWhilePolling: stop orders (the orders goroutine) and polls
// (the poll goroutine) of the same task run at once, as in Run; each stop
// reaches the provider. Run with -race: the stop reason the order records
// must be read under the agent's lock.
func TestStopOrderWhilePolling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := &stubProvider{}
	a := e.agent(prov, nil)
	a.tasks["j"] = &task{rec: jobs.Job{JobData: wire.JobData{JobID: "j", Status: wire.JobRunning}}, node: "n1",
		handle: providers.Handle{Provider: "stub", ID: "j-1"}, prov: prov}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 200 {
			a.order(e.ctx, pool.Message{Kind: pool.KindStop, Node: "n1", JobID: "j", Reason: "request retracted"})
		}
	}()
	go func() {
		defer wg.Done()
		for range 200 {
			a.pollOnce(e.ctx)
		}
	}()
	wg.Wait()
	prov.mu.Lock()
	defer prov.mu.Unlock()
	if prov.stops < 200 {
		t.Errorf("%d stops reached the provider, want at least one per order (200)", prov.stops)
	}
}

// orderLog records, in order, a provider's starts and a job store's
// mirrors, and holds the mirrors of a chosen status until released.
type orderLog struct {
	JobStore
	providers.Provider
	mu     sync.Mutex
	events []string
	holdTo wire.JobStatus
	hold   chan struct{}
	freed  bool
}

// release lets the held mirrors go.
func (o *orderLog) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.freed {
		close(o.hold)
		o.freed = true
	}
}

func (o *orderLog) add(ev string) {
	o.mu.Lock()
	o.events = append(o.events, ev)
	o.mu.Unlock()
}

func (o *orderLog) log() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

func (o *orderLog) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	o.add("start")
	return o.Provider.Start(ctx, t)
}

func (o *orderLog) Change(ctx context.Context, id string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, jobs.Mirror, error) {
	j, mirror, err := o.JobStore.Change(ctx, id, from, to, u)
	if err != nil {
		return j, mirror, err
	}
	return j, func(ctx context.Context) error {
		o.mu.Lock()
		held, hold := to == o.holdTo, o.hold
		o.mu.Unlock()
		if held {
			<-hold
		}
		o.add("mirror " + string(to))
		return mirror(ctx)
	}, nil
}

// TestMirrorOrder: a start is mirrored onto the job entry after its task
// started, and before the task can end; an end for good is reported to
// the scheduler before its mirror (which may lag), and an end that puts
// the job back in the queue after it, so that the job's next start,
// mirrored later, is never overwritten by it.
func TestMirrorOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := &orderLog{JobStore: e.jobs, holdTo: wire.JobSucceeded, hold: make(chan struct{})}
	o.Provider = e.prov
	resolve := func(r wire.Request) (Command, *wire.Error) {
		c := Command{Argv: r.Command}
		if r.MaxRetries > 0 {
			c.Timeout = time.Second // fails timed out, and goes back to the queue
		}
		return c, nil
	}
	a := e.agent(o, resolve)
	a.cfg.Jobs = o
	e.run(a)
	t.Cleanup(o.release) // before the agent's stop (cleanups run last first)
	entry := func(id string) wire.JobStatus { return e.entry(id).Status }

	// Ends for good: reported while its mirror is held.
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.waitFor("the start mirrored", func() bool { return slices.Contains(o.log(), "mirror running") })
	if got := o.log(); !slices.Equal(got, []string{"start", "mirror running"}) {
		t.Fatalf("start: %v; want the task started, then the entry", got)
	}
	if st := entry(j.JobID); st != wire.JobRunning {
		t.Fatalf("job entry %s while the task runs", st)
	}
	e.clk.Advance(30 * time.Second)
	e.waitReports(j.JobID+" started running", j.JobID+" ended succeeded")
	if st := entry(j.JobID); st != wire.JobRunning {
		t.Errorf("job entry %s while its end's mirror is held; want running still", st)
	}
	o.release()
	e.waitFor("the end mirrored", func() bool { return entry(j.JobID) == wire.JobSucceeded })

	// Back to the queue: mirrored before the report.
	o.mu.Lock()
	o.holdTo, o.hold, o.freed, o.events = wire.JobQueued, make(chan struct{}), false, nil
	o.mu.Unlock()
	r := e.queued(`{"command":["sleep","30"],"estimated_duration":30,"max_retries":1}`)
	e.assign(r.JobID, "n1")
	e.waitFor("the start mirrored", func() bool { return slices.Contains(o.log(), "mirror running") })
	e.clk.Advance(2 * time.Second)
	e.waitFor("the requeue's mirror reached", func() bool { return e.rec(r.JobID).Status == wire.JobQueued })
	time.Sleep(50 * time.Millisecond) // the agent's poll, report included, had its turn
	for _, rep := range e.reports() {
		if rep == r.JobID+" ended queued" {
			t.Fatal("a job going back to the queue was reported before its entry said so")
		}
	}
	o.release()
	e.waitReports(j.JobID+" started running", j.JobID+" ended succeeded", r.JobID+" started running", r.JobID+" ended queued")
	if st := entry(r.JobID); st != wire.JobQueued {
		t.Errorf("job entry %s after the requeue; want queued", st)
	}
}

// TestLiveAgentCorrectsLost: the scheduler ends a running job lost while
// its agent, stalled past the node timeout, still runs it; the agent
// resumes and its task ends. Before, the agent found the record moved on
// and gave the outcome up: the job stayed failed/lost though it had
// succeeded (a restarted agent corrected it, through Recover; a resumed
// one did not). Now it corrects it, as after a restart.
func TestLiveAgentCorrectsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(nil, nil)
	e.run(a)
	e.waitRunning(j.JobID)
	e.schedulerTransition(j.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{
		Error: &wire.JobError{Code: wire.JobErrorLost, Message: "node n1 silent"}})
	e.clk.Advance(31 * time.Second)
	rec := e.waitStatus(j.JobID, wire.JobSucceeded)
	if rec.Error != nil || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Errorf("corrected record: error %+v exit %v", rec.Error, rec.ExitCode)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" corrects succeeded")
	if s := a.Stats(); s.Corrected != 1 || s.Succeeded != 0 {
		t.Errorf("stats %+v", s)
	}
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
	if st := e.entry(j.JobID).Status; st != wire.JobSucceeded {
		t.Errorf("job entry after the correction: %s; want succeeded", st)
	}
}

// TestLateStartMirrorSkipped: another writer changes a running job's
// record while its agent, stalled, has not yet mirrored the start (here the
// scheduler placed the job again elsewhere: requeue_lost). The late start
// mirror made the job entry say running on this node over the newer record,
// until the agent, finding the record moved on when the task ended, listed
// the job for the scheduler's repair. A mirror now applies only while the
// record is at the version it mirrors: the entry never goes back, and
// nothing is left to repair.
func TestLateStartMirrorSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.run(e.agent(nil, nil))
	e.waitRunning(j.JobID)
	// The crossing: a start mirror held (here a same-status change's,
	// which mirrors the same running record), the scheduler's requeue of
	// the lost job mirrored, then the held mirror.
	_, late, err := e.jobs.Change(e.ctx, j.JobID, wire.JobRunning, wire.JobRunning, jobs.Update{})
	if err != nil {
		t.Fatal(err)
	}
	e.schedulerTransition(j.JobID, wire.JobRunning, wire.JobQueued, jobs.Update{Node: "n2"})
	if err := late(e.ctx); err != nil {
		t.Fatal(err)
	}
	if jd := e.entry(j.JobID); jd.Status != wire.JobQueued || jd.Node != "n2" {
		t.Fatalf("job entry after the late mirror: %s on %q; want queued on n2, as the record says", jd.Status, jd.Node)
	}
	// The task ends; the agent's end finds the record queued elsewhere
	// and leaves it, and the entry, alone.
	e.clk.Advance(31 * time.Second)
	e.waitFor("the job settled", func() bool { return len(e.nodeJobs("n1")) == 0 })
	e.clk.Advance(11 * time.Second)
	if n, err := e.jobs.RepairMirrors(e.ctx, 10*time.Second); err != nil || n != 0 {
		t.Fatalf("RepairMirrors: %d, %v; want 0", n, err)
	}
	if jd := e.entry(j.JobID); jd.Status != wire.JobQueued || jd.Node != "n2" {
		t.Fatalf("job entry after the task's end: %s on %q; want queued on n2", jd.Status, jd.Node)
	}
}
