package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/providers/local"
	"github.com/computeboard/computeboard/wire"
)

// node is a node of the test agents: name, served by prov.
func node(name string, prov providers.Provider) Node {
	return Node{Record: pool.NodeRecord{Node: inventory.Node{Name: name, CPUs: 4, MemoryMiB: 8192},
		Agent: "agent-" + name, Provider: "fake", Fake: true}, Provider: prov}
}

// agentWith is e.agent with nodes of its own, the request's command as is,
// and polls set by poll and safety.
func (e *env) agentWith(poll, safety time.Duration, nodes ...Node) *Agent {
	e.t.Helper()
	a, err := New(Config{
		ID: "agent", Nodes: nodes, Jobs: e.jobs, Channel: e.ch, Registry: e.reg,
		Resolve: func(r wire.Request) (Command, *wire.Error) { return Command{Argv: r.Command}, nil },
		Beat:    20 * time.Millisecond, Poll: poll, SafetyPoll: safety, Clock: e.clk, Logger: e.log,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// waitStatusWithin is waitStatus with its own limit.
func (e *env) waitStatusWithin(id string, st wire.JobStatus, limit time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		j, err := e.jobs.Get(e.ctx, id)
		if err == nil && j.Status == st {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s not %s within %v (status %s, %v)", id, st, limit, j.Status, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestNotifiedEnd: with a Notifier provider (the fake), a task's end is
// recorded as soon as the provider says so, long before any poll tick:
// here neither tick comes within the test.
func TestNotifiedEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agentWith(time.Hour, time.Hour, node("n1", e.prov))
	e.run(a)
	e.waitRunning(j.JobID)
	e.clk.Advance(29 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if st := e.rec(j.JobID).Status; st != wire.JobRunning {
		t.Fatalf("status %s before the task's end", st)
	}
	e.clk.Advance(time.Second)
	e.waitStatusWithin(j.JobID, wire.JobSucceeded, 2*time.Second)
	e.waitReports(j.JobID+" started running", j.JobID+" ended succeeded")
	// The end is reported before the task is untracked (Running counts
	// the tracked tasks), so the count may lag the report by an instant.
	e.waitWithin(2*time.Second, "the agent's stats to show one success and no task running", func() bool {
		s := a.Stats()
		return s.Succeeded == 1 && s.Running == 0
	})
}

// TestNotifiedEndLocal: the same with real processes (the local provider,
// watching its tasks in-process): a task that exits is recorded at once.
func TestNotifiedEndLocal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov, err := local.New(local.Config{WorkDir: t.TempDir(), AllowRoot: true, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close(context.Background()) })
	var ids []string
	for _, cmd := range []string{`["/bin/sleep","0.3"]`, `["/bin/sh","-c","exit 0"]`} {
		j := e.queued(fmt.Sprintf(`{"command":%s}`, cmd))
		e.assign(j.JobID, "n1")
		ids = append(ids, j.JobID)
	}
	e.run(e.agentWith(time.Hour, time.Hour, node("n1", prov)))
	for _, id := range ids {
		e.waitStatusWithin(id, wire.JobSucceeded, 5*time.Second)
	}
}

// slowStart is the fake provider whose Start returns late: after its
// task has ended and been notified.
type slowStart struct{ *fake.Provider }

func (p slowStart) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	h, err := p.Provider.Start(ctx, t)
	time.Sleep(30 * time.Millisecond)
	return h, err
}

// TestNotifiedEndRacesStart: a task that ends as it starts is notified
// before the agent tracks it; its end is still recorded soon (the notice
// is looked up again on the next ticks), not at the safety poll.
func TestNotifiedEndRacesStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := slowStart{fake.New("fake", clock.Real{}, time.Hour)}
	var ids []string
	for range 5 {
		j := e.queued(`{"command":["true"],"estimated_duration":0.0001}`)
		e.assign(j.JobID, "n1")
		ids = append(ids, j.JobID)
	}
	e.run(e.agentWith(20*time.Millisecond, time.Hour, node("n1", prov)))
	for _, id := range ids {
		e.waitStatusWithin(id, wire.JobSucceeded, 5*time.Second)
	}
}

// TestNotifiedEndRacesStartNoTick: the same without any tick within the
// test: a notice that came before its task was tracked is looked up again
// as soon as the agent tracks a task.
func TestNotifiedEndRacesStartNoTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := slowStart{fake.New("fake", clock.Real{}, time.Hour)}
	var ids []string
	for range 5 {
		j := e.queued(`{"command":["true"],"estimated_duration":0.0001}`)
		e.assign(j.JobID, "n1")
		ids = append(ids, j.JobID)
	}
	e.run(e.agentWith(time.Hour, time.Hour, node("n1", prov)))
	for _, id := range ids {
		e.waitStatusWithin(id, wire.JobSucceeded, 5*time.Second)
	}
}

// notifierStub is a Notifier that never notifies; its tasks run until they
// have been asked to stop three times.
type notifierStub struct {
	mu    sync.Mutex
	stops int
	ended chan providers.Handle
}

func (p *notifierStub) Start(_ context.Context, t providers.Task) (providers.Handle, error) {
	return providers.Handle{Provider: "stub", ID: t.ID}, nil
}

func (p *notifierStub) Poll(context.Context, providers.Handle) (providers.Status, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stops >= 3 {
		return providers.Status{State: providers.StateCancelled}, nil
	}
	return providers.Status{State: providers.StateRunning}, nil
}

func (p *notifierStub) Stop(context.Context, providers.Handle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stops++
	return nil
}

func (p *notifierStub) Ended() <-chan providers.Handle { return p.ended }

// TestStopRetriedWithNotifier: a task being stopped is polled, and its stop
// retried, on every Poll tick until it ends, although its provider is a
// Notifier (which, here, says nothing).
func TestStopRetriedWithNotifier(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := &notifierStub{ended: make(chan providers.Handle)}
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.run(e.agentWith(5*time.Millisecond, time.Hour, node("n1", prov)))
	e.waitRunning(j.JobID)
	if err := e.ch.Stop(e.ctx, e.fence, "n1", j.JobID, "request retracted"); err != nil {
		t.Fatal(err)
	}
	e.waitStatusWithin(j.JobID, wire.JobCancelled, 5*time.Second)
}

// endsAfterPolls is a provider without Notifier whose tasks end at their
// third poll.
type endsAfterPolls struct {
	mu    sync.Mutex
	polls map[providers.Handle]int
}

func (p *endsAfterPolls) Start(_ context.Context, t providers.Task) (providers.Handle, error) {
	return providers.Handle{Provider: "plain", ID: t.ID}, nil
}

func (p *endsAfterPolls) Poll(_ context.Context, h providers.Handle) (providers.Status, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.polls[h]++; p.polls[h] >= 3 {
		zero := 0
		return providers.Status{State: providers.StateSucceeded, ExitCode: &zero}, nil
	}
	return providers.Status{State: providers.StateRunning}, nil
}

func (p *endsAfterPolls) Stop(context.Context, providers.Handle) error { return nil }

// TestMixedProviders: an agent with a Notifier node and a plain one polls
// the plain node's tasks on every Poll tick, and records the Notifier's
// ends when notified.
func TestMixedProviders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plain := &endsAfterPolls{polls: map[providers.Handle]int{}}
	j1, j2 := e.queued(job30s), e.queued(job30s)
	e.assign(j1.JobID, "n1")
	e.assign(j2.JobID, "n2")
	e.run(e.agentWith(5*time.Millisecond, time.Hour, node("n1", e.prov), node("n2", plain)))
	e.waitStatusWithin(j2.JobID, wire.JobSucceeded, 5*time.Second)
	e.waitRunning(j1.JobID)
	e.clk.Advance(30 * time.Second)
	e.waitStatusWithin(j1.JobID, wire.JobSucceeded, 2*time.Second)
}
