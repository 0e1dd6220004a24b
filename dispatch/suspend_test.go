package dispatch

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/wire"
)

// suspendHarness: node n1 (4 CPUs, 8 GiB; its provider can suspend when
// suspendable) full with job "low" (level 2, 4 CPUs, lowGB of memory),
// running past the minimum run time, then a CRITICAL job "crit" (level 8,
// 4 CPUs, critGB) submitted. Victims are evicted in suspend mode.
func suspendHarness(t *testing.T, lowGB, critGB float64, suspendable bool, tune func(*Config)) *harness {
	t.Helper()
	h := newHarness(t, func(c *Config) {
		c.Preemption = engine.PreemptionConfig{Policy: engine.PreemptPriority, MinRuntime: 30 * time.Second, DefaultMode: engine.ModeSuspend}
		if tune != nil {
			tune(c)
		}
	})
	h.nodes.add(cpuNode("n1", 4, 8192))
	if suspendable {
		h.nodes.setSuspend("n1")
	}
	h.submit(h.newJob("low", 4, lowGB, withPriority(2)))
	h.mustCycle()
	h.wantAssigned("low", "n1")
	h.agentStart("low")
	h.mustCycle()
	h.watch(time.Minute)
	h.submit(h.newJob("crit", 4, critGB, withPriority(8)))
	return h
}

// agentSuspend does what the agent does with an eviction in suspend mode:
// the task paused, the record stamped suspended (still running), a
// "suspended" report.
func (h *harness) agentSuspend(id string) {
	h.t.Helper()
	node := h.store.rec(id).Node
	if _, err := h.store.transition(byAgent, id, wire.JobRunning, wire.JobRunning, jobs.Update{Suspend: true, ExpectNode: node}); err != nil {
		h.t.Fatalf("agent suspend %s: %v", id, err)
	}
	h.orders.report(pool.Report{JobID: id, Node: node, Event: pool.EventSuspended, Status: string(wire.JobRunning)})
}

// agentResume does what the agent does with a resume order.
func (h *harness) agentResume(id string) {
	h.t.Helper()
	node := h.store.rec(id).Node
	if _, err := h.store.transition(byAgent, id, wire.JobRunning, wire.JobRunning, jobs.Update{Resume: true, ExpectNode: node}); err != nil {
		h.t.Fatalf("agent resume %s: %v", id, err)
	}
	h.orders.report(pool.Report{JobID: id, Node: node, Event: pool.EventResumed, Status: string(wire.JobRunning)})
}

// holding is what the ledger holds for job id: node, millicores, MiB.
func (h *harness) holding(id string) (string, int64, int64) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	a, ok := h.s.ledger.Allocation(id)
	if !ok {
		return "", -1, -1
	}
	return a.Node, a.Vec[engine.DimCPU], a.Vec[engine.DimMemory]
}

func (h *harness) wantHolding(id, node string, cpu, mem int64) {
	h.t.Helper()
	if n, c, m := h.holding(id); n != node || c != cpu || m != mem {
		h.t.Errorf("ledger holds %s: node %q, %d millicores, %d MiB; want %q, %d, %d", id, n, c, m, node, cpu, mem)
	}
}

func (h *harness) flags(id string) (suspended, resuming bool) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	t := h.s.jobs_[id]
	if t == nil {
		return false, false
	}
	return t.suspended, t.resuming
}

// TestSuspendResume: a victim on a node that can suspend is evicted in
// suspend mode. Until its agent reports it paused it holds the node whole
// (the preemptor waits); then it keeps its memory on n1 (its CPU goes to
// the preemptor, which is assigned there), stays running on its node, is
// neither a victim again nor resumed while the preemptor runs, and once
// the preemptor ends it gets a resume order for n1 (not a new start) and
// holds its whole request again.
func TestSuspendResume(t *testing.T) {
	h := suspendHarness(t, 2, 2, true, nil)
	h.mustCycle()
	evs := h.orders.evictOrders()
	if len(evs) != 1 || evs[0].JobID != "low" || evs[0].Mode != pool.EvictSuspend {
		t.Fatalf("eviction orders %+v, want low in suspend mode", evs)
	}
	h.cycles(3)
	h.wantAssigned("crit") // low is not paused yet
	h.wantHolding("low", "n1", 4000, 2048)

	h.agentSuspend("low")
	h.mustCycle()
	h.wantHolding("low", "n1", 0, 2048) // its memory stays held
	h.wantAssigned("crit", "n1")
	h.wantPhase("low", PhaseRunning)
	if s, _ := h.flags("low"); !s {
		t.Error("low not seen suspended")
	}
	h.agentStart("crit")
	h.clk.Advance(11 * time.Second) // a full re-plan
	h.cycles(5)
	if rs := h.orders.resumeOrders(); len(rs) != 0 {
		t.Errorf("resume orders %+v while the preemptor runs", rs)
	}
	if n := len(h.orders.evictOrders()); n != 1 {
		t.Errorf("%d eviction orders, want 1 (a suspended job is no victim)", n)
	}
	h.wantAssigned("low", "n1") // never started again

	h.agentEnd("crit", wire.JobSucceeded)
	h.mustCycle()
	rs := h.orders.resumeOrders()
	if len(rs) != 1 || rs[0].JobID != "low" || rs[0].Node != "n1" {
		t.Fatalf("resume orders %+v, want low on n1", rs)
	}
	h.wantHolding("low", "n1", 4000, 2048)
	if s, r := h.flags("low"); s || !r {
		t.Errorf("low suspended %v, resuming %v after the order; want false, true", s, r)
	}
	h.agentResume("low")
	h.mustCycle()
	if s, r := h.flags("low"); s || r {
		t.Errorf("low suspended %v, resuming %v once resumed; want false, false", s, r)
	}
	h.cycles(3)
	if n := len(h.orders.resumeOrders()); n != 1 {
		t.Errorf("%d resume orders, want 1", n)
	}
	h.wantAssigned("low", "n1")
	h.agentEnd("low", wire.JobSucceeded)
	h.mustCycle()
	h.wantPhase("low", "")
	if r := h.store.rec("low"); r.Attempt != 1 {
		t.Errorf("low's attempt %d, want 1 (resumed, not restarted)", r.Attempt)
	}
}

// TestSuspendFallback: suspend is ordered only where it can work: on a node
// whose provider cannot suspend, and where the preemptor would not fit
// beside the memory the suspended victim keeps, the victim is requeued
// instead, and the eviction's reason says why. A suspension loses no work;
// a requeue its run time.
func TestSuspendFallback(t *testing.T) {
	tests := map[string]struct {
		lowGB, critGB float64
		suspendable   bool
		wantMode      string
		wantReason    string
	}{
		"suspends":              {2, 2, true, pool.EvictSuspend, ""},
		"provider cannot":       {2, 2, false, pool.EvictRequeue, "cannot suspend"},
		"memory kept is needed": {6, 4, true, pool.EvictRequeue, "requeued instead of suspended"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := suspendHarness(t, tc.lowGB, tc.critGB, tc.suspendable, nil)
			h.mustCycle()
			evs := h.orders.evictOrders()
			if len(evs) != 1 || evs[0].Mode != tc.wantMode {
				t.Fatalf("eviction orders %+v, want one in mode %s", evs, tc.wantMode)
			}
			if !strings.Contains(evs[0].Reason, tc.wantReason) {
				t.Errorf("reason %q, want it to say %q", evs[0].Reason, tc.wantReason)
			}
			got := h.s.Evictions()
			if len(got) != 1 || string(got[0].Mode) != tc.wantMode || got[0].Reason != evs[0].Reason {
				t.Fatalf("recorded evictions %+v, want mode %s with the order's reason", got, tc.wantMode)
			}
			if lost := got[0].LostWork; (tc.wantMode == pool.EvictSuspend) != (lost == 0) {
				t.Errorf("lost work %v s in mode %s, want 0 only when suspended", lost, tc.wantMode)
			}
		})
	}
}

// TestSuspendedCancel: a suspended job whose request is retracted gets a
// stop order on its node (the agent continues and stops it); its end
// frees what it kept.
func TestSuspendedCancel(t *testing.T) {
	h := suspendHarness(t, 2, 2, true, nil)
	h.mustCycle()
	h.agentSuspend("low")
	h.mustCycle()
	h.s.OnCancel("low")
	h.mustCycle()
	if st := h.orders.stopOrders(); len(st) != 1 || st[0].JobID != "low" || st[0].Node != "n1" {
		t.Fatalf("stop orders %+v, want low on n1", st)
	}
	h.agentEnd("low", wire.JobCancelled)
	h.mustCycle()
	h.wantPhase("low", "")
	if _, ok := h.held("low"); ok {
		t.Error("a cancelled suspended job still holds its node")
	}
	if rs := h.orders.resumeOrders(); len(rs) != 0 {
		t.Errorf("resume orders %+v for a cancelled job", rs)
	}
}

// TestSuspendedNodeLost: a suspended job whose node goes silent past
// NodeTimeout ends lost, as a running job there does.
func TestSuspendedNodeLost(t *testing.T) {
	h := suspendHarness(t, 2, 2, true, nil)
	h.mustCycle()
	h.agentSuspend("low")
	h.mustCycle()
	h.agentStart("crit")
	h.mustCycle()
	h.nodes.silence("n1")
	h.watch(2 * time.Minute)
	if r := h.store.rec("low"); r.Status != wire.JobFailed || r.Error == nil || r.Error.Code != "lost" || r.SuspendedAt != nil {
		t.Errorf("suspended job on a lost node: %s %+v suspended_at %v; want failed, lost, not suspended", r.Status, r.Error, r.SuspendedAt)
	}
	h.wantPhase("low", "")
	if rs := h.orders.resumeOrders(); len(rs) != 0 {
		t.Errorf("resume orders %+v on a lost node", rs)
	}
}

// TestSuspendedRecovered: a new term finds a suspended job in the active
// records: it holds only its pin on its node (its CPU is another job's
// now) and is resumed there, not started again, once that job ends.
func TestSuspendedRecovered(t *testing.T) {
	h := newHarness(t, nil)
	h.nodes.add(cpuNode("n1", 4, 8192))
	j := h.newJob("low", 4, 2, withPriority(2), withStatus(wire.JobRunning, "n1"))
	at := epochOf(t0)
	j.SuspendedAt = &at
	h.store.put(j)
	h.store.put(h.newJob("crit", 4, 2, withPriority(8), withStatus(wire.JobRunning, "n1")))
	h.orders.list("n1", "low", "crit")
	if err := h.s.Recover(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.wantHolding("low", "n1", 0, 2048)
	h.wantHolding("crit", "n1", 4000, 2048)
	h.cycles(3)
	if rs := h.orders.resumeOrders(); len(rs) != 0 {
		t.Fatalf("resume orders %+v while its CPU is taken", rs)
	}
	h.agentEnd("crit", wire.JobSucceeded)
	h.mustCycle()
	if rs := h.orders.resumeOrders(); len(rs) != 1 || rs[0].JobID != "low" || rs[0].Node != "n1" {
		t.Fatalf("resume orders %+v, want low on n1", rs)
	}
	h.wantHolding("low", "n1", 4000, 2048)
	h.wantAssigned("low") // resumed, never assigned
}

// TestResumeOrderFails: a resume order that cannot be written leaves the
// job suspended, holding only its pin, and is tried again next cycle.
func TestResumeOrderFails(t *testing.T) {
	h := suspendHarness(t, 2, 2, true, nil)
	h.mustCycle()
	h.agentSuspend("low")
	h.mustCycle()
	h.agentStart("crit")
	h.mustCycle()
	h.orders.mu.Lock()
	h.orders.resumeErr = errors.New("redis down")
	h.orders.mu.Unlock()
	h.agentEnd("crit", wire.JobSucceeded)
	h.mustCycle()
	h.wantHolding("low", "n1", 0, 2048)
	if s, r := h.flags("low"); !s || r {
		t.Errorf("low suspended %v, resuming %v after a failed resume order; want true, false", s, r)
	}
	h.orders.mu.Lock()
	h.orders.resumeErr = nil
	h.orders.mu.Unlock()
	h.mustCycle()
	if rs := h.orders.resumeOrders(); len(rs) != 1 || rs[0].JobID != "low" {
		t.Fatalf("resume orders %+v, want low's", rs)
	}
	h.wantHolding("low", "n1", 4000, 2048)
}
