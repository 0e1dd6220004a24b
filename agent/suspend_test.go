package agent

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// suspendProvider is the fake provider with a Suspender that records its
// calls, in order ("suspend", "resume", "stop").
type suspendProvider struct {
	providers.Provider
	mu    sync.Mutex
	calls []string
}

func (p *suspendProvider) note(c string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
}

func (p *suspendProvider) Suspend(context.Context, providers.Handle) error {
	p.note("suspend")
	return nil
}

func (p *suspendProvider) Resume(context.Context, providers.Handle) error {
	p.note("resume")
	return nil
}

func (p *suspendProvider) Stop(ctx context.Context, h providers.Handle) error {
	p.note("stop")
	return p.Provider.Stop(ctx, h)
}

func (p *suspendProvider) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// registeredSuspend reports whether node n1's registry record says its
// provider can suspend.
func (e *env) registeredSuspend() bool {
	e.t.Helper()
	ns, _, err := e.reg.Nodes(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range ns {
		if n.Name == "n1" {
			return n.Suspend
		}
	}
	e.t.Fatal("node n1 not registered")
	return false
}

// TestEvictSuspend: an agent over a provider that can suspend registers
// its node so; an eviction in suspend mode pauses the task in place (the
// provider's Suspend; the record still running, attempt 1, with
// suspended_at) and reports "suspended"; a resume order continues it
// (Resume), clears suspended_at and reports "resumed"; the task was never
// stopped or started again.
func TestEvictSuspend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := &suspendProvider{Provider: e.prov}
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.run(e.agent(prov, nil))
	e.waitRunning(j.JobID)
	if !e.registeredSuspend() {
		t.Error("node n1 registered without suspend, over a Suspender")
	}
	if err := e.ch.Evict(e.ctx, e.fence, "n1", j.JobID, pool.Eviction{Mode: pool.EvictSuspend, Reason: "by crit"}); err != nil {
		t.Fatal(err)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" suspended running")
	rec := e.rec(j.JobID)
	if rec.Status != wire.JobRunning || rec.SuspendedAt == nil || rec.Attempt != 1 {
		t.Fatalf("suspended record: %s, suspended_at %v, attempt %d; want running, set, 1", rec.Status, rec.SuspendedAt, rec.Attempt)
	}
	if err := e.ch.Resume(e.ctx, e.fence, "n1", j.JobID, "room freed"); err != nil {
		t.Fatal(err)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" suspended running", j.JobID+" resumed running")
	rec = e.rec(j.JobID)
	if rec.Status != wire.JobRunning || rec.SuspendedAt != nil || rec.Attempt != 1 {
		t.Errorf("resumed record: %s, suspended_at %v, attempt %d; want running, nil, 1", rec.Status, rec.SuspendedAt, rec.Attempt)
	}
	if got := prov.got(); !slices.Equal(got, []string{"suspend", "resume"}) {
		t.Errorf("provider calls %q, want suspend, resume", got)
	}
	if n := e.prov.Started(); n != 1 {
		t.Errorf("provider started %d tasks, want 1", n)
	}
}

// TestSuspendedStop: a stop order (a retracted request) of a suspended
// job continues its task first, so it can take the stop, and records it
// cancelled, with suspended_at cleared.
func TestSuspendedStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := &suspendProvider{Provider: e.prov}
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.run(e.agent(prov, nil))
	e.waitRunning(j.JobID)
	if err := e.ch.Evict(e.ctx, e.fence, "n1", j.JobID, pool.Eviction{Mode: pool.EvictSuspend, Reason: "by crit"}); err != nil {
		t.Fatal(err)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" suspended running")
	if err := e.ch.Stop(e.ctx, e.fence, "n1", j.JobID, "request retracted"); err != nil {
		t.Fatal(err)
	}
	rec := e.waitStatus(j.JobID, wire.JobCancelled)
	if rec.SuspendedAt != nil {
		t.Errorf("cancelled record still suspended_at %v", *rec.SuspendedAt)
	}
	if got := prov.got(); len(got) < 3 || !slices.Equal(got[:3], []string{"suspend", "resume", "stop"}) {
		t.Errorf("provider calls %q, want suspend, resume, stop", got)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" suspended running", j.JobID+" ended cancelled")
}

// TestEvictSuspendUnsupported: over a provider that cannot suspend, the
// node is registered without suspend, and an eviction in suspend mode
// (a scheduler that did not know) is carried out as a requeue.
func TestEvictSuspendUnsupported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	e.run(e.agent(nil, nil))
	e.waitRunning(j.JobID)
	if e.registeredSuspend() {
		t.Error("node n1 registered with suspend, over a provider that cannot")
	}
	if err := e.ch.Evict(e.ctx, e.fence, "n1", j.JobID, pool.Eviction{Mode: pool.EvictSuspend, Reason: "by crit"}); err != nil {
		t.Fatal(err)
	}
	rec := e.waitStatus(j.JobID, wire.JobQueued)
	if rec.SuspendedAt != nil || rec.Attempt != 1 {
		t.Errorf("requeued record: suspended_at %v, attempt %d", rec.SuspendedAt, rec.Attempt)
	}
	e.waitReports(j.JobID+" started running", j.JobID+" ended queued")
}
