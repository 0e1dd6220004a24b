package dispatch

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// plans is the number of engine runs so far.
func (h *harness) plans() int {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.stats.cycles
}

// wantPlans runs one cycle and checks it ran the engine n times (0 or 1).
func (h *harness) wantPlans(n int, what string) {
	h.t.Helper()
	before := h.plans()
	h.mustCycle()
	if got := h.plans() - before; got != n {
		h.t.Errorf("%s: %d engine runs in the cycle, want %d", what, got, n)
	}
}

// busyPool: node n (2 cores) runs job "run" (2 cores); "wait" (2 cores)
// waits, planned and explained. The last plan was two cycles ago: the
// start of "run" does not call for one.
func busyPool(t *testing.T, tune func(*Config)) *harness {
	h := newHarness(t, tune)
	h.nodes.add(cpuNode("n", 2, 4096))
	h.submit(h.newJob("run", 2, 1))
	h.submit(h.newJob("wait", 2, 1))
	h.wantPlans(1, "two new jobs")
	h.agentStart("run")
	h.wantPlans(0, "a start of the last plan's placement")
	h.wantPhase("run", PhaseRunning)
	h.wantPhase("wait", PhasePending)
	return h
}

// TestUnchangedCycleSkipsEngine: with nothing new (the registry read every
// cycle, the same nodes, jobs waiting that cannot start), a cycle does not
// run the engine, and the explanations are not walked again once
// published.
func TestUnchangedCycleSkipsEngine(t *testing.T) {
	h := busyPool(t, nil)
	h.clk.Advance(time.Second) // past the explanation gap
	for i := range 20 {
		h.wantPlans(0, "idle cycle")
		if i == 0 {
			h.s.mu.Lock()
			more := h.s.explainMore
			h.s.mu.Unlock()
			if more {
				t.Error("explanations still marked to publish after a full pass")
			}
		}
	}
	if e := h.store.rec("wait").Explanation; len(e) == 0 {
		t.Error("the waiting job's explanation was never published")
	}
}

// TestChangeTriggersPlan: an end, a cancel, a node added, changed or
// turned unhealthy, and a new job that may start, each run the engine in
// the cycle that sees them; a new job that cannot start while every other
// job is stuck does not.
func TestChangeTriggersPlan(t *testing.T) {
	h := busyPool(t, nil)
	h.wantPlans(0, "idle")

	h.submit(h.newJob("new", 2, 1))
	h.wantPlans(0, "new job that fits nowhere, the others stuck")
	h.wantPhase("new", PhasePending)

	h.s.OnCancel("new")
	h.wantPlans(1, "cancel of a pending job")
	h.wantPhase("new", "")
	h.wantPlans(0, "idle after the cancel")

	h.agentEnd("run", wire.JobSucceeded)
	h.wantPlans(1, "end (resources freed)")
	h.wantAssigned("wait", "n")
	h.wantPlans(0, "nothing pending")

	h.submit(h.newJob("big", 4, 1))
	h.wantPlans(0, "new job that fits nowhere, after a placement")
	h.nodes.add(cpuNode("m", 2, 4096))
	h.wantPlans(1, "node added")
	h.wantPlans(0, "idle after the node")
	h.nodes.add(cpuNode("m", 4, 4096))
	h.wantPlans(1, "node inventory changed")
	h.wantAssigned("big", "m")

	h.submit(h.newJob("more", 1, 1))
	h.wantPlans(0, "new job that fits nowhere, after a placement")
	h.clk.Advance(explainNewWithin)
	h.wantPlans(1, "a new job waiting explainNewWithin for its first explanation")
	h.wantPlans(0, "idle")
	h.nodes.silence("m")
	h.clk.Advance(h.cfg.NodeUnhealthy + time.Second)
	h.wantPlans(1, "node turned unhealthy")
	h.wantPlans(0, "idle after the node turned unhealthy")
}

// TestNewJobThatFitsTriggersPlan: while every pending job is stuck, a new
// job that fits on some node now runs the engine, and so does a new gang
// member.
func TestNewJobThatFitsTriggersPlan(t *testing.T) {
	h := newHarness(t, nil)
	h.nodes.add(cpuNode("n", 2, 4096))
	h.submit(h.newJob("run", 1, 1))
	h.mustCycle()
	h.agentStart("run")
	h.submit(h.newJob("wait", 2, 1))
	h.mustCycle()
	h.wantPlans(0, "idle")
	h.submit(h.newJob("gang-a", 2, 1, withGang("g", 2)))
	h.wantPlans(1, "gang member")
	h.wantPlans(0, "idle")
	h.submit(h.newJob("small", 1, 1))
	h.wantPlans(1, "new job that fits now")
}

// TestFullReplanPeriod: with nothing changing, the engine still runs every
// FullReplan (fake clock), and not more often.
func TestFullReplanPeriod(t *testing.T) {
	h := busyPool(t, func(c *Config) { c.FullReplan = 5 * time.Second })
	start := h.plans()
	for range 4 {
		// To 2 ms before the period: the cycle moves the clock 1 ms.
		h.s.mu.Lock()
		last := h.s.plannedAt
		h.s.mu.Unlock()
		h.clk.Advance(last.Add(5*time.Second - 2*time.Millisecond).Sub(h.clk.Now()))
		h.wantPlans(0, "just before the period")
		h.wantPlans(1, "at the period")
	}
	if got := h.plans() - start; got != 4 {
		t.Errorf("%d engine runs in 4 periods, want 4", got)
	}
}

// TestAgeingDecisionWithinFullReplan: a decision that time alone changes
// (which job holds the reservation, when ageing is capped and a younger
// job of a higher level catches up with an older one) is taken within one
// FullReplan of when it changes, with no other event.
func TestAgeingDecisionWithinFullReplan(t *testing.T) {
	const period = 10 * time.Second
	h := newHarness(t, func(c *Config) {
		// One level a second, capped at 20: "old" (level 0) stops at 20;
		// "young" (level 9, 15 s younger) passes it when 9 + age − 15 > 20,
		// 26 s after "old" was submitted.
		c.Policy = engine.Policy{Weights: engine.Weights{Level: 1, Age: 3600}, MaxAge: 20}
		c.FullReplan = period
	})
	h.nodes.add(cpuNode("n", 1, 4096))
	h.submit(h.newJob("run", 1, 1))
	h.mustCycle()
	h.agentStart("run")
	h.mustCycle()
	born := h.clk.Now()
	h.submit(h.newJob("old", 1, 1, withPriority(0)))
	h.clk.Advance(15 * time.Second)
	h.submit(h.newJob("young", 1, 1, withPriority(9)))
	holder := func() string {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		if r := h.s.plan.Reservation; r != nil {
			return r.JobID
		}
		return ""
	}
	h.mustCycle()
	if got := holder(); got != "old" {
		t.Fatalf("reservation held by %q, want old", got)
	}
	flip := born.Add(26 * time.Second)
	p0 := h.plans()
	for h.clk.Now().Before(born.Add(60 * time.Second)) {
		h.clk.Advance(time.Second)
		h.mustCycle()
		now := h.clk.Now()
		switch got := holder(); {
		case now.Before(flip) && got != "old":
			t.Fatalf("at %v: reservation held by %q before young could pass old", now.Sub(born), got)
		case now.After(flip.Add(period+time.Second)) && got != "young":
			t.Fatalf("at %v: reservation still held by %q, more than FullReplan (%v) after young passed old", now.Sub(born), got, period)
		}
	}
	if n := h.plans() - p0; n > 5 {
		t.Errorf("%d engine runs in 45 idle seconds, want about one per FullReplan (%v)", n, period)
	}
}

// TestSkippedPlanPlacesNothing: over random histories (jobs of several
// shapes, selectors, gangs, priorities and two accounts, one with a quota;
// starts, ends, cancels, nodes added and silenced, time passing), whenever
// a cycle with new jobs does not run the engine (canSkipLocked), the full
// plan of that moment, run aside, places nothing: skipping it changes no
// placement.
func TestSkippedPlanPlacesNothing(t *testing.T) {
	checked, planned := 0, 0
	for seed := range uint64(40) {
		c, p := skipHistory(t, seed)
		checked += c
		planned += p
	}
	t.Logf("skipped plans checked: %d; plans run with new jobs: %d", checked, planned)
	if checked < 100 || planned < 100 {
		t.Errorf("only %d skipped and %d run plans with new jobs: the histories do not exercise the rule", checked, planned)
	}
}

func skipHistory(t *testing.T, seed uint64) (checked, planned int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	h := newHarness(t, func(c *Config) {
		c.Accounts = []engine.Account{{Name: "acct"}, {Name: "capped", Quota: engine.Resources{engine.DimCPU: 3000}}}
		c.Seed = seed + 1
	})
	labels := []string{"a", "b"}
	addNode := func(i int) {
		n := cpuNode(fmt.Sprintf("n%d", i), float64(2+rng.IntN(4)), 8192)
		n.Labels = map[string]string{"pool": labels[rng.IntN(2)]}
		h.nodes.add(n)
	}
	nodes := 2 + rng.IntN(2)
	for i := range nodes {
		addNode(i)
	}
	next := 0
	newJob := func() jobs.Job {
		next++
		opts := []jobOpt{withPriority(rng.IntN(10))}
		if rng.IntN(5) == 0 {
			opts = append(opts, func(j *jobs.Job) { j.Request.NodeSelector = map[string]string{"pool": labels[rng.IntN(2)]} })
		}
		if rng.IntN(3) == 0 {
			opts = append(opts, func(j *jobs.Job) { j.Account, j.Request.Account = "capped", "capped" })
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, func(j *jobs.Job) { j.Request.EstimatedDuration = float64(60 * (1 + rng.IntN(30))) })
		}
		return h.newJob(fmt.Sprintf("j%03d", next), float64(1+rng.IntN(4)), float64(1+rng.IntN(3)), opts...)
	}
	for step := range 150 {
		switch op := rng.IntN(10); {
		case op < 4:
			for range 1 + rng.IntN(3) {
				h.submit(newJob())
			}
		case op == 4 && rng.IntN(3) == 0:
			g := fmt.Sprintf("g%d", next)
			for range 2 {
				h.submit(newJob()) // not a member: the gang's first member comes below
			}
			a, b := newJob(), newJob()
			withGang(g, 2)(&a)
			withGang(g, 2)(&b)
			h.submit(a)
			h.submit(b)
		case op == 5:
			for _, a := range h.orders.allAssigned() {
				if p, ok := h.phase(a.JobID); ok && p == PhaseAssigned && h.store.rec(a.JobID).Status == wire.JobQueued && rng.IntN(2) == 0 {
					h.agentStart(a.JobID)
				}
			}
		case op == 6:
			for _, a := range h.orders.allAssigned() {
				if p, ok := h.phase(a.JobID); ok && p == PhaseRunning && rng.IntN(4) == 0 {
					h.agentEnd(a.JobID, wire.JobSucceeded)
					break
				}
			}
		case op == 7 && rng.IntN(3) == 0:
			h.s.OnCancel(fmt.Sprintf("j%03d", 1+rng.IntN(next+1)))
		case op == 8 && rng.IntN(8) == 0:
			addNode(nodes)
			nodes++
		case op == 8 && rng.IntN(8) == 0:
			h.nodes.silence(fmt.Sprintf("n%d", rng.IntN(nodes)))
		default:
			h.clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		// What the engine would decide now, had it run.
		h.s.mu.Lock()
		// The pending counts kept by account (intake's shares) agree
		// with the jobs, whatever happened.
		by := map[string]int{}
		for _, t := range h.s.jobs_ {
			if t.phase == PhasePending {
				by[t.acct]++
			}
		}
		if !maps.Equal(by, h.s.pendingBy) {
			t.Fatalf("step %d: pending by account %v, kept as %v", step, by, h.s.pendingBy)
		}
		skippable := !h.s.replan && h.s.pendingN > 0
		withNew := skippable && len(h.s.added) > 0
		snap := h.s.snapshotLocked()
		h.s.cycle--
		st := h.s.state
		h.s.mu.Unlock()
		snap.Now = snap.Now.Add(time.Millisecond) // the cycle's clock
		before := h.plans()
		h.mustCycle()
		ran := h.plans() > before
		switch {
		case withNew && ran:
			planned++
		case skippable && !ran:
			// A skipped plan: with new jobs, or after this scheduler's
			// own placements or their starts.
			checked++
			plan, _ := engine.Schedule(st, snap)
			if len(plan.Placements) > 0 {
				t.Fatalf("seed %d: a cycle skipped the engine (new jobs: %v), but the full plan places %+v", seed, withNew, plan.Placements)
			}
		}
	}
	return checked, planned
}

// TestFairSharesView: the API's fair-share tree has the configured
// accounts with their targets normalized down the tree, the accounts jobs
// name with the default shares, usage from the jobs that ran (decayed) and
// the factors that follow.
func TestFairSharesView(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Accounts = []engine.Account{{Name: "org", Shares: 1}, {Name: "a", Parent: "org", Shares: 1}, {Name: "b", Parent: "org", Shares: 3}}
	})
	h.nodes.add(cpuNode("n", 2, 4096))
	acct := func(a string) jobOpt { return func(j *jobs.Job) { j.Account, j.Request.Account = a, a } }
	h.submit(h.newJob("ja", 2, 1, acct("a")))
	h.mustCycle()
	h.agentStart("ja")
	h.mustCycle() // the start seen: it runs from here
	h.clk.Advance(10 * time.Minute)
	h.agentEnd("ja", wire.JobSucceeded)
	h.submit(h.newJob("jm", 8, 1, acct("m"))) // fits nowhere: stays pending
	h.mustCycle()
	h.clk.Advance(explainNewWithin)
	h.mustCycle()
	if e, ok := h.s.Explanation("jm"); !ok || e.JobID != "jm" || e.Placed || e.Position != 1 {
		t.Errorf("Explanation(jm) = %+v, %v; want the waiting job, first in order", e, ok)
	}
	if _, ok := h.s.Explanation("ja"); ok {
		t.Error("Explanation of an ended job")
	}
	got := map[string]FairShareView{}
	for _, v := range h.s.FairShares() {
		got[v.Account] = v
	}
	a, b, m, org := got["a"], got["b"], got["m"], got["org"]
	switch {
	case !a.Configured || a.Parent != "org" || math.Abs(a.Target-0.25*org.Target) > 1e-9 || math.Abs(b.Target-0.75*org.Target) > 1e-9:
		t.Errorf("targets: a %+v, b %+v, org %+v", a, b, org)
	case a.Usage <= 0 || b.Usage != 0 || a.UsageShare <= 0:
		t.Errorf("usage: a %+v, b %+v", a, b)
	case !(a.Factor < b.Factor) || m.Factor != 1:
		// b used nothing but its parent did (classic: it inherits part of
		// org's effective usage); m, under the root, used nothing.
		t.Errorf("factors: a %v, b %v, m %v; want a under b, m 1", a.Factor, b.Factor, m.Factor)
	case m.Configured || m.Shares != 1 || m.PendingJobs != 1:
		t.Errorf("the account a pending job names: %+v", m)
	}
}
