package dispatch

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestPartialPlanIsTheFullPlan: on random histories (jobs of several
// accounts, sizes, priorities, selectors, estimates and a quota; ends,
// starts, cancellations, nodes coming and going, time passing), whenever a
// partial plan passes its check (partialValidLocked), the full plan over
// every pending job, with the same seed and clock, makes the same
// placements in the same order, the same reservation and the same next
// State. The heads are kept small (2 fitting jobs per account) so that most
// partial plans leave jobs out. Each selection is covered, and both
// outcomes of the check must occur often: a check that always refuses
// would pass this test too.
func TestPartialPlanIsTheFullPlan(t *testing.T) {
	for _, sel := range []engine.Selection{engine.SelectPriority, engine.SelectProportional, engine.SelectLottery, engine.SelectWFQ, engine.SelectDRF} {
		t.Run(string(sel), func(t *testing.T) {
			var valid, refused, placedBy, outs int
			for seed := range uint64(15) {
				v, r, p, o := partialHistory(t, sel, seed, seed%3 == 2)
				valid, refused, placedBy, outs = valid+v, refused+r, placedBy+p, outs+o
			}
			t.Logf("partial plans: %d valid (%d of them leaving jobs out, %d of those placing jobs), %d refused", valid, outs, placedBy, refused)
			if refused < 100 || placedBy < 200 {
				t.Errorf("%d valid partial plans leaving jobs out placed jobs, %d were refused: the histories do not exercise the check", placedBy, refused)
			}
		})
	}
}

// partialHistory runs one random history; mixed: a fifth of the jobs are
// big (they hold reservations, and small ones backfill or are blocked),
// else every job asks for one or two cores.
func partialHistory(t *testing.T, sel engine.Selection, seed uint64, mixed bool) (valid, refused, placing, leftOut int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	h := newHarness(t, func(c *Config) {
		c.Accounts = []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 2}, {Name: "c", Shares: 3},
			{Name: "capped", Quota: engine.Resources{engine.DimCPU: 4000}}}
		c.Policy.Selection = sel
		c.Seed = seed + 1
		if seed%2 == 1 {
			// Ageing that reorders a queue within seconds: a level per
			// second, capped at two levels (MaxAge), so an old job of a
			// lower level is overtaken by younger ones of a higher level
			// once both are capped (the partial plans' drift check).
			c.Policy.Weights.Age, c.Policy.MaxAge = 3600, 2
		}
	})
	h.s.headFit, h.s.partialMin = 6, 1
	labels := []string{"x", "y"}
	nodes := 0
	addNode := func() {
		n := cpuNode(fmt.Sprintf("n%d", nodes), float64(2+rng.IntN(6)), 16384)
		n.Labels = map[string]string{"pool": labels[rng.IntN(2)]}
		h.nodes.add(n)
		nodes++
	}
	for range 3 + rng.IntN(4) {
		addNode()
	}
	accts := []string{"a", "b", "c", "capped"}
	next := 0
	newJob := func() jobs.Job {
		next++
		a := accts[rng.IntN(len(accts))]
		opts := []jobOpt{withPriority(rng.IntN(4)), func(j *jobs.Job) { j.Account, j.Request.Account = a, a }}
		if rng.IntN(6) == 0 {
			opts = append(opts, func(j *jobs.Job) { j.Request.NodeSelector = map[string]string{"pool": labels[rng.IntN(2)]} })
		}
		if rng.IntN(5) > 0 {
			opts = append(opts, func(j *jobs.Job) { j.Request.EstimatedDuration = float64(30 * (1 + rng.IntN(20))) })
		}
		if seed%5 == 4 && rng.IntN(40) == 0 { // a deadline: no partial plan while it waits
			opts = append(opts, withDeadline(h.clk.Now().Add(time.Hour)))
		}
		cpu := float64(1 + rng.IntN(2))
		if mixed && rng.IntN(5) == 0 {
			cpu = float64(3 + rng.IntN(5)) // a big one: it reserves, the small ones backfill
		}
		return h.newJob(fmt.Sprintf("j%04d", next), cpu, float64(1+rng.IntN(4)), opts...)
	}
	for range 120 {
		h.submit(newJob())
	}
	for range 150 {
		switch op := rng.IntN(12); {
		case op < 3:
			for range 1 + rng.IntN(4) {
				h.submit(newJob())
			}
		case op < 9:
			ends := 1 + rng.IntN(2)
			for _, a := range h.orders.allAssigned() {
				if p, ok := h.phase(a.JobID); ok && p == PhaseRunning && h.store.rec(a.JobID).Status == wire.JobRunning && rng.IntN(2) == 0 {
					h.agentEnd(a.JobID, wire.JobSucceeded)
					if ends--; ends == 0 {
						break
					}
				}
			}
		case op == 9 && rng.IntN(4) == 0:
			h.s.OnCancel(fmt.Sprintf("j%04d", 1+rng.IntN(next)))
		case op == 10 && rng.IntN(6) == 0:
			addNode()
		case op == 10 && rng.IntN(6) == 0:
			h.nodes.silence(fmt.Sprintf("n%d", rng.IntN(nodes)))
		default:
			h.clk.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		}
		// Compare where the cycle would plan: after the reports.
		h.takeReports()
		h.s.mu.Lock()
		seed := h.s.cfg.Seed ^ (h.s.cycle + 1)
		psnap, ps, ok := h.s.partialSnapshotLocked(seed)
		if ok {
			st := h.s.state
			plan, next := h.s.partialBuf.schedule(st, psnap)
			// The step's plan, built through ScheduleEach into reused
			// buffers, is engine.Schedule's, but for its non-final
			// rejections.
			ref, _ := engine.Schedule(st, psnap)
			var finals []engine.Rejection
			for _, r := range ref.Rejected {
				if r.Final {
					finals = append(finals, r)
				}
			}
			same := func(a, b any, n int) bool { return n == 0 || reflect.DeepEqual(a, b) }
			if len(plan.Explanations) != len(ref.Explanations) || !same(plan.Explanations, ref.Explanations, len(ref.Explanations)) ||
				len(plan.Rejected) != len(finals) || !same(plan.Rejected, finals, len(finals)) {
				h.s.mu.Unlock()
				t.Fatalf("seed %d: the partial plan's explanations or final rejections differ from engine.Schedule's:\n%+v\n%+v\nfinals %+v, want %+v", seed, plan.Explanations, ref.Explanations, plan.Rejected, finals)
			}
			if h.s.partialValidLocked(plan, ps) {
				valid++
				if ps.left() > 0 {
					leftOut++
					if len(plan.Placements) > 0 {
						placing++
					}
				}
				full := h.s.snapshotLocked()
				h.s.cycle--
				full.Seed = seed
				fplan, fnext := engine.Schedule(st, full)
				if !reflect.DeepEqual(plan.Placements, fplan.Placements) || !reflect.DeepEqual(plan.Reservation, fplan.Reservation) {
					h.s.mu.Unlock()
					t.Fatalf("seed %d: the partial plan (%d jobs of %d) places %+v, reservation %+v; the full plan places %+v, reservation %+v",
						seed, len(psnap.Pending), len(full.Pending), plan.Placements, plan.Reservation, fplan.Placements, fplan.Reservation)
				}
				if !reflect.DeepEqual(next, fnext) {
					h.s.mu.Unlock()
					t.Fatalf("seed %d: the partial plan's next State %+v; the full plan's %+v", seed, next, fnext)
				}
			} else {
				refused++
			}
		}
		h.s.mu.Unlock()
		h.mustCycle()
		// The agents start what was assigned.
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseAssigned && h.store.rec(a.JobID).Status == wire.JobQueued {
				h.agentStart(a.JobID)
			}
		}
	}
	return valid, refused, placing, leftOut
}

// TestPartialPlansWhileJobsEnd: the regime partial plans are for. 400
// one-core jobs of four accounts wait for a node of 8 cores; each end
// frees one core. Every cycle after an end runs a partial plan over the
// heads of the queues (at most headFit fitting jobs per account), none is
// refused, and each places the job the full plan would place.
func TestPartialPlansWhileJobsEnd(t *testing.T) {
	h := queuedOnOneNode(t, 400)
	startAll := func() {
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseAssigned && h.store.rec(a.JobID).Status == wire.JobQueued {
				h.agentStart(a.JobID)
			}
		}
	}
	startAll()
	h.mustCycle()
	ended := 0
	for range 60 {
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseRunning && h.store.rec(a.JobID).Status == wire.JobRunning {
				h.agentEnd(a.JobID, wire.JobSucceeded)
				ended++
				break
			}
		}
		h.clk.Advance(10 * time.Millisecond)
		h.takeReports()
		h.s.mu.Lock()
		seed := h.s.cfg.Seed ^ (h.s.cycle + 1)
		psnap, ps, ok := h.s.partialSnapshotLocked(seed)
		// One core is free, so each of the 4 accounts' heads ends at the
		// room bound: headRoomMin jobs.
		if !ok || ps.left() == 0 || len(psnap.Pending) > 4*headRoomMin {
			h.s.mu.Unlock()
			t.Fatalf("after %d ends: partial input ok=%v with %d jobs, %d left out; want the heads only", ended, ok, len(psnap.Pending), ps.left())
		}
		plan, _ := engine.Schedule(h.s.state, psnap)
		full := h.s.snapshotLocked()
		h.s.cycle--
		full.Seed = seed
		fplan, _ := engine.Schedule(h.s.state, full)
		h.s.mu.Unlock()
		if len(plan.Placements) != 1 || !reflect.DeepEqual(plan.Placements, fplan.Placements) {
			t.Fatalf("after %d ends: the partial plan places %+v, the full plan %+v", ended, plan.Placements, fplan.Placements)
		}
		before := h.s.stats
		h.mustCycle()
		if after := h.s.stats; after.partial != before.partial+1 || after.partialRefused != before.partialRefused {
			t.Fatalf("after %d ends: %d partial plans and %d refused, want one more partial plan (%d, %d before)", ended, after.partial, after.partialRefused, before.partial, before.partialRefused)
		}
		startAll()
		// The node is full again: no queued job fits, so each head is
		// headRoomMin jobs (before, every queue was walked to headMax).
		h.s.mu.Lock()
		psnap, _, ok = h.s.partialSnapshotLocked(seed)
		h.s.mu.Unlock()
		if !ok || len(psnap.Pending) > 4*headRoomMin {
			t.Fatalf("after %d ends, with the node full: partial input ok=%v with %d jobs; want %d at most", ended, ok, len(psnap.Pending), 4*headRoomMin)
		}
	}
}

// takeReports applies the agents' reports as a cycle does first, and
// nothing else of the cycle.
func (h *harness) takeReports() {
	h.t.Helper()
	rs, err := h.orders.Reports(h.ctx, h.s.lastReport, 4096, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(rs) > 0 {
		h.s.lastReport = rs[len(rs)-1].ID
		if err := h.s.applyReports(h.ctx, rs); err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestPartialPlanSeesAgeing: the last full plan's order ages. Jobs o, o2
// and o3 (level 0) have reached the age cap when n (level 5) comes; the
// full plan orders them first. Six seconds later n has aged past them.
// With three fitting jobs per account in a partial plan's head, the head
// would be o, o2 and o3 while n goes first now (the partial plan would
// place o and reserve for o2, both before its cut, with no room left for
// n): the partial plan fails its check, and the full plan starts n.
func TestPartialPlanSeesAgeing(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Policy.Weights.Level, c.Policy.Weights.Age, c.Policy.MaxAge = 1, 3600, 12 // a level a second, at most 12
	})
	h.s.headFit, h.s.partialMin = 3, 1
	h.nodes.add(cpuNode("n1", 1, 4096))
	acct := func(j *jobs.Job) { j.Account, j.Request.Account = "a", "a" }
	h.submit(h.newJob("r", 1, 1, withPriority(9)))
	h.submit(h.newJob("o", 1, 1, acct, withPriority(0)))
	h.submit(h.newJob("o2", 1, 1, acct, withPriority(0)))
	h.submit(h.newJob("o3", 1, 1, acct, withPriority(0)))
	h.mustCycle()
	h.agentStart("r")
	h.mustCycle()
	h.clk.Advance(12 * time.Second) // o: 0 + 12 levels
	h.submit(h.newJob("n", 1, 1, acct, withPriority(5)))
	h.clk.Advance(2 * time.Second) // n: 5 + 2 < o's 12
	h.s.mu.Lock()
	h.s.replan = true // a full plan now, so that n is in its order
	h.s.mu.Unlock()
	h.mustCycle()
	h.s.mu.Lock()
	order := []string{}
	for _, t := range h.s.queues["a"].jobs {
		order = append(order, t.id())
	}
	h.s.mu.Unlock()
	if !reflect.DeepEqual(order, []string{"o", "o2", "o3", "n"}) {
		t.Fatalf("the full plan's order %v, want [o o2 o3 n]", order)
	}
	h.clk.Advance(6 * time.Second) // n: 5 + 8 = 13 > o's 12
	h.agentEnd("r", wire.JobSucceeded)
	h.takeReports()
	h.s.mu.Lock()
	psnap, ps, ok := h.s.partialSnapshotLocked(1)
	if ok {
		plan, _ := engine.Schedule(h.s.state, psnap)
		ok = h.s.partialValidLocked(plan, ps)
	}
	h.s.mu.Unlock()
	if ok {
		t.Error("a partial plan over o alone passed its check, but n goes first now")
	}
	h.mustCycle()
	if p, _ := h.phase("n"); p != PhaseAssigned {
		t.Errorf("n is %s, want assigned (it goes first)", p)
	}
	if p, _ := h.phase("o"); p != PhasePending {
		t.Errorf("o is %s, want pending", p)
	}
}

// queuedOnOneNode is a harness whose node of 8 cores has n one-core jobs of
// four accounts queued for it, after one cycle (8 of them assigned).
func queuedOnOneNode(tb testing.TB, n int) *harness {
	h := newHarness(tb, nil)
	h.nodes.add(cpuNode("n", 8, 65536))
	for i := range n {
		a := []string{"a", "b", "c", "d"}[i%4]
		h.submit(h.newJob(fmt.Sprintf("j%04d", i), 1, 1, func(j *jobs.Job) { j.Account, j.Request.Account = a, a }))
	}
	h.mustCycle()
	return h
}

// TestAfterFullPlan: Config.AfterFullPlan hears of every full plan, with
// the number of jobs it planned, and of no partial plan (the adapter
// releases a deep queue's plan memory there).
func TestAfterFullPlan(t *testing.T) {
	var got []int
	h := newHarness(t, func(c *Config) { c.AfterFullPlan = func(n int) { got = append(got, n) } })
	h.nodes.add(cpuNode("n", 8, 65536))
	for i := range 400 {
		h.submit(h.newJob(fmt.Sprintf("j%04d", i), 1, 1))
	}
	h.mustCycle() // the first plan is a full one: 8 placed
	if !slices.Equal(got, []int{400}) {
		t.Fatalf("after the first plan: AfterFullPlan heard %v, want [400]", got)
	}
	for _, a := range h.orders.allAssigned() {
		h.agentStart(a.JobID)
	}
	h.mustCycle()
	for range 3 { // an end, and the partial plan that starts the next job
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseRunning && h.store.rec(a.JobID).Status == wire.JobRunning {
				h.agentEnd(a.JobID, wire.JobSucceeded)
				break
			}
		}
		before := h.s.stats.partial
		h.mustCycle()
		if h.s.stats.partial != before+1 {
			t.Fatalf("an end made no partial plan (%d partial plans)", h.s.stats.partial)
		}
		for _, a := range h.orders.allAssigned() {
			if p, ok := h.phase(a.JobID); ok && p == PhaseAssigned && h.store.rec(a.JobID).Status == wire.JobQueued {
				h.agentStart(a.JobID)
			}
		}
	}
	if !slices.Equal(got, []int{400}) {
		t.Fatalf("after partial plans: AfterFullPlan heard %v, want [400] still", got)
	}
	h.clk.Advance(h.s.cfg.FullReplan)
	h.mustCycle()
	if !slices.Equal(got, []int{400, 389}) { // 8 + 3 placed
		t.Fatalf("after FullReplan: AfterFullPlan heard %v, want [400 389]", got)
	}
}
