package dispatch

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/wire"
)

// preemptHarness: node n1 (4 CPUs) full with job "low" (level 2, running
// since t0+1s), then a CRITICAL job "crit" (level 8, 4 CPUs) submitted
// after the victim's minimum run time.
func preemptHarness(t *testing.T, pc engine.PreemptionConfig, tune func(*Config)) *harness {
	t.Helper()
	h := newHarness(t, func(c *Config) {
		c.Preemption = pc
		if tune != nil {
			tune(c)
		}
	})
	h.nodes.add(cpuNode("n1", 4, 8192))
	h.submit(h.newJob("low", 4, 2, withPriority(2)))
	h.mustCycle()
	h.wantAssigned("low", "n1")
	h.agentStart("low")
	h.mustCycle()
	h.wantPhase("low", PhaseRunning)
	h.watch(time.Minute) // past MinRuntime (30 s below)
	h.submit(h.newJob("crit", 4, 2, withPriority(8)))
	return h
}

// agentEvicted does what the agent does when it has stopped an evicted
// job: cancelled with error code preempted, or queued again.
func (h *harness) agentEvicted(id string, to wire.JobStatus, reason string) {
	h.t.Helper()
	node := h.store.rec(id).Node
	u := jobs.Update{ExpectNode: node}
	if to == wire.JobCancelled {
		u.Error = &wire.JobError{Code: "preempted", Message: reason}
	}
	if _, err := h.store.transition(byAgent, id, wire.JobRunning, to, u); err != nil {
		h.t.Fatalf("agent end %s: %v", id, err)
	}
	h.orders.report(pool.Report{JobID: id, Node: node, Event: pool.EventEnded, Status: string(to)})
}

// TestPreemptionApplied: a CRITICAL job that fits nowhere evicts the
// low-priority job filling the node (an eviction order with the mode), is
// assigned only once the victim's end is reported (its hold released in
// the ledger: never double-booked meanwhile, and no second eviction), and
// the victim then ends as its mode says: requeue puts it back in the
// queue (it runs again, as attempt 2, after the preemptor); cancel ends it.
func TestPreemptionApplied(t *testing.T) {
	for _, mode := range []engine.EvictionMode{engine.ModeRequeue, engine.ModeCancel} {
		t.Run(string(mode), func(t *testing.T) {
			pc := engine.PreemptionConfig{Policy: engine.PreemptPriority, MinRuntime: 30 * time.Second, DefaultMode: mode}
			h := preemptHarness(t, pc, nil)
			h.mustCycle()

			evs := h.orders.evictOrders()
			if len(evs) != 1 || evs[0].JobID != "low" || evs[0].Node != "n1" || evs[0].Mode != string(mode) {
				t.Fatalf("eviction orders %+v, want one for low on n1, mode %s", evs, mode)
			}
			if evs[0].Reason == "" {
				t.Error("eviction order has no reason")
			}
			// The preemptor waits for the victim's end: not assigned, and
			// the victim still holds n1.
			h.wantAssigned("crit")
			h.wantPhase("crit", PhasePending)
			if n, ok := h.held("low"); !ok || n != "n1" {
				t.Fatalf("victim held on %q (%v) before its end, want n1", n, ok)
			}
			ex, ok := h.s.Explain("crit")
			if !ok || !ex.Placed || !slices.Equal(ex.Evicts, []string{"low"}) {
				t.Errorf("crit's explanation %+v (%v), want placed, evicts [low]", ex, ok)
			}
			var critRec Explained
			if err := json.Unmarshal(h.store.rec("crit").Explanation, &critRec); err != nil || !slices.Equal(critRec.Evicts, []string{"low"}) {
				t.Errorf("preemptor record's explanation %s (%v), want evicts [low]", h.store.rec("crit").Explanation, err)
			}
			var onRec Explained
			if err := json.Unmarshal(h.store.rec("low").Explanation, &onRec); err != nil || onRec.Preempted == nil || onRec.Preempted.By != "crit" ||
				onRec.Preempted.Mode != string(mode) || onRec.Preempted.Policy != string(engine.PreemptPriority) {
				t.Errorf("victim record's explanation %s (%v), want preempted by crit, mode %s", h.store.rec("low").Explanation, err, mode)
			}
			if st := h.s.Stats(0); st.Metrics["scheduler_preemptions"] != 1 || st.Metrics["scheduler_preemptions_last_hour"] != 1 ||
				st.Metrics["scheduler_preemption_lost_work_s"] < 60 {
				t.Errorf("metrics %v, want 1 preemption with ≥ 60 s lost", st.Metrics)
			}
			h.s.mu.Lock()
			recs := slices.Clone(h.s.state.Preemptions)
			h.s.mu.Unlock()
			if len(recs) != 1 || recs[0].Job != "low" || recs[0].By != "crit" {
				t.Errorf("engine state preemptions %+v, want low by crit", recs)
			}

			// Cycles and full re-plans while the victim stops: nothing
			// more is evicted, and the preemptor is still not assigned.
			h.clk.Advance(11 * time.Second)
			h.cycles(5)
			if n := len(h.orders.evictOrders()); n != 1 {
				t.Errorf("%d eviction orders while the victim stops, want 1", n)
			}
			h.wantAssigned("crit")

			to := wire.JobQueued
			if mode == engine.ModeCancel {
				to = wire.JobCancelled
			}
			h.agentEvicted("low", to, evs[0].Reason)
			h.mustCycle()
			h.wantAssigned("crit", "n1")
			h.wantPhase("crit", PhaseAssigned)
			if mode == engine.ModeCancel {
				h.wantPhase("low", "")
				if r := h.store.rec("low"); r.Status != wire.JobCancelled || r.Error == nil || r.Error.Code != "preempted" {
					t.Errorf("victim record %s %+v, want cancelled, preempted", r.Status, r.Error)
				}
				return
			}
			h.wantPhase("low", PhasePending)
			ex, ok = h.s.Explain("low")
			if !ok || ex.Preempted == nil || ex.Preempted.By != "crit" {
				t.Errorf("requeued victim's explanation %+v (%v), want preempted by crit", ex, ok)
			}
			h.agentStart("crit")
			h.mustCycle()
			h.wantAssigned("low", "n1") // not before crit ends
			h.agentEnd("crit", wire.JobSucceeded)
			h.mustCycle()
			h.wantAssigned("low", "n1", "n1")
			h.agentStart("low")
			if a := h.store.rec("low").Attempt; a != 2 {
				t.Errorf("victim's attempt %d on its second start, want 2", a)
			}
		})
	}
}

// TestPreemptionOff: with preemption off (the default) nothing is evicted
// and the CRITICAL job waits.
func TestPreemptionOff(t *testing.T) {
	h := preemptHarness(t, engine.PreemptionConfig{}, nil)
	h.watch(15 * time.Second)
	if evs := h.orders.evictOrders(); len(evs) != 0 {
		t.Errorf("eviction orders %+v with preemption off", evs)
	}
	h.wantAssigned("crit")
	h.wantPhase("low", PhaseRunning)
}

// TestPreemptionNonPreemptible: a job whose template says
// non_preemptible is never a victim.
func TestPreemptionNonPreemptible(t *testing.T) {
	pc := engine.PreemptionConfig{Policy: engine.PreemptPriority, MinRuntime: 30 * time.Second}
	h := preemptHarness(t, pc, func(c *Config) {
		c.Resolve = func(r wire.Request) (Spec, *wire.Error) {
			return Spec{NonPreemptible: r.Priority < 5}, nil
		}
	})
	h.watch(15 * time.Second)
	if evs := h.orders.evictOrders(); len(evs) != 0 {
		t.Errorf("eviction orders %+v of a non-preemptible job", evs)
	}
	h.wantAssigned("crit")
}

// TestPreemptionVictimNeverEnds: a victim that does not stop within
// PreemptWait frees its preemptor's hold (it waits in the queue again,
// not assigned over the victim), and the victim, in its cool-down, is
// not evicted a second time.
func TestPreemptionVictimNeverEnds(t *testing.T) {
	pc := engine.PreemptionConfig{Policy: engine.PreemptPriority, MinRuntime: 30 * time.Second}
	h := preemptHarness(t, pc, func(c *Config) { c.PreemptWait = 5 * time.Second })
	h.mustCycle()
	if n := len(h.orders.evictOrders()); n != 1 {
		t.Fatalf("%d eviction orders, want 1", n)
	}
	h.watch(20 * time.Second)
	h.wantAssigned("crit")
	h.wantPhase("crit", PhasePending)
	h.s.mu.Lock()
	waiting := len(h.s.waiting)
	h.s.mu.Unlock()
	if waiting != 0 {
		t.Errorf("%d preemptors still hold room after PreemptWait", waiting)
	}
	if n := len(h.orders.evictOrders()); n != 1 {
		t.Errorf("%d eviction orders, want the one", n)
	}
}

// TestPreemptionAfterStart: a CRITICAL job that arrives while its victim
// is assigned but not started yet (no victim then) evicts it once its
// start is reported, without waiting for the next full re-plan.
func TestPreemptionAfterStart(t *testing.T) {
	pc := engine.PreemptionConfig{Policy: engine.PreemptPriority, MinRuntime: -1}
	h := newHarness(t, func(c *Config) { c.Preemption = pc })
	h.nodes.add(cpuNode("n1", 4, 8192))
	h.submit(h.newJob("low", 4, 2, withPriority(2)))
	h.mustCycle()
	h.wantAssigned("low", "n1")
	h.submit(h.newJob("crit", 4, 2, withPriority(8)))
	h.cycles(3)
	if evs := h.orders.evictOrders(); len(evs) != 0 {
		t.Fatalf("evicted an assigned job that has not started: %+v", evs)
	}
	h.agentStart("low")
	h.mustCycle()
	if evs := h.orders.evictOrders(); len(evs) != 1 || evs[0].JobID != "low" {
		t.Fatalf("eviction orders %+v after the victim's start, want low", evs)
	}
}
