package engine_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// explanationOf returns the explanation and rejection of job id.
func explanationOf(t *testing.T, p engine.Plan, id string) (engine.Explanation, *engine.Rejection) {
	t.Helper()
	var ex *engine.Explanation
	for i := range p.Explanations {
		if p.Explanations[i].JobID == id {
			ex = &p.Explanations[i]
		}
	}
	if ex == nil {
		t.Fatalf("%s not explained", id)
	}
	for i := range p.Rejected {
		if p.Rejected[i].JobID == id {
			return *ex, &p.Rejected[i]
		}
	}
	return *ex, nil
}

// A job that can no longer meet its deadline and is not placed says so in
// its reason code (transient under the default DeadlineRun), whatever else
// holds it back, so that filters on the code find it; the other reason
// stays in the message. Before the fix it kept no-fit (or reserved, quota,
// …) and only the message mentioned the deadline.
func TestDeadlineInfeasibleReason(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch,
		Accounts: []engine.Account{{Name: "q", Shares: 1, Quota: engine.Resources{engine.DimCPU: 1000}}},
		Nodes:    []engine.Node{et.Node("n").CPU(2).Alloc(engine.Resources{engine.DimCPU: 2000}).Obj()},
		Running: []engine.Running{
			et.Job("r1").Account("q").CPU(1).Est(time.Hour).Running("n", et.Epoch),
			et.Job("r2").CPU(1).Est(time.Hour).Running("n", et.Epoch),
		},
		Pending: []engine.Job{
			et.Job("late-nofit").Priority(9).CPU(2).Est(time.Hour).Deadline(et.Epoch.Add(30 * time.Minute)).Obj(),
			et.Job("late-quota").Account("q").Priority(5).CPU(1).Est(time.Hour).Deadline(et.Epoch.Add(30 * time.Minute)).Obj(),
			et.Job("ok-nofit").Priority(5).CPU(1).Est(time.Hour).Deadline(et.Epoch.Add(10 * time.Hour)).Obj(),
		},
	}
	plan, _ := engine.Schedule(engine.State{}, snap)
	tests := map[string]struct {
		wantReason engine.Code
		wantInMsg  string
	}{
		"late-nofit": {engine.ReasonDeadlineInfeasible, "reserved"},
		"late-quota": {engine.ReasonDeadlineInfeasible, "quota"},
		"ok-nofit":   {engine.ReasonNoFit, ""},
	}
	for id, tc := range tests {
		ex, rej := explanationOf(t, plan, id)
		if rej == nil || rej.Reason != tc.wantReason || rej.Final || ex.Reason != tc.wantReason {
			t.Errorf("%s: rejection %+v, explanation reason %q; want transient %s", id, rej, ex.Reason, tc.wantReason)
			continue
		}
		if !strings.Contains(rej.Message, tc.wantInMsg) || !strings.Contains(ex.Message, tc.wantInMsg) {
			t.Errorf("%s: message %q does not mention %q", id, rej.Message, tc.wantInMsg)
		}
	}
}

// A job held by its account's quota cannot start before the account's
// running jobs free enough of it, whatever the nodes have: its estimated
// start counts the quota. q may hold 2 cores and holds them until +3h; the
// node frees a core of another account at +1h, where the estimate used to
// be.
func TestQuotaEstStart(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch,
		Accounts: []engine.Account{
			{Name: "team", Shares: 1, Quota: engine.Resources{engine.DimCPU: 3000}},
			{Name: "q", Parent: "team", Shares: 1, Quota: engine.Resources{engine.DimCPU: 2000}},
			{Name: "o", Parent: "team", Shares: 1},
		},
		Nodes: []engine.Node{et.Node("n").CPU(4).Alloc(engine.Resources{engine.DimCPU: 4000}).Obj()},
		Running: []engine.Running{
			et.Job("q-long").Account("q").CPU(2).Est(3*time.Hour).Running("n", et.Epoch),
			et.Job("o-mid").Account("o").CPU(1).Est(2*time.Hour).Running("n", et.Epoch),
			et.Job("x-short").Account("x").CPU(1).Est(time.Hour).Running("n", et.Epoch),
		},
		Pending: []engine.Job{
			et.Job("q1").Account("q").CPU(1).Est(time.Hour).Obj(), // q's own quota: +3h
			et.Job("o1").Account("o").CPU(1).Est(time.Hour).Obj(), // team's quota (3 of 3 cores): +2h
		},
	}
	plan, _ := engine.Schedule(engine.State{}, snap)
	for id, want := range map[string]time.Duration{"q1": 3 * time.Hour, "o1": 2 * time.Hour} {
		ex, rej := explanationOf(t, plan, id)
		if rej == nil || rej.Reason != engine.ReasonQuota {
			t.Fatalf("%s: %+v, want quota", id, rej)
		}
		if got := ex.EstStart.Sub(et.Epoch); got != want {
			t.Errorf("%s: estimated start +%s, want +%s (%s)", id, got, want, ex.Message)
		}
	}
}

// Deadline order within a band: least slack first (the default, what the
// engine always did, though the docs called it earliest deadline first), or
// earliest deadline first when asked. a: deadline +3h, 2h45m of work (slack
// 15m); b: deadline +2h, 10m of work (slack 1h50m); c, d overdue. Both
// pairs are alone in their band (8 for c, d; 7 for a, b).
func TestDeadlineOrder(t *testing.T) {
	job := func(id string, deadline, est time.Duration) engine.Job {
		return et.Job(id).Priority(5).CPU(1).Est(est).Deadline(et.Epoch.Add(deadline)).Obj()
	}
	pending := []engine.Job{
		job("a", 3*time.Hour, 165*time.Minute),
		job("b", 2*time.Hour, 10*time.Minute),
		job("c", -time.Hour, 10*time.Minute), // slack −1h10m
		job("d", 5*time.Minute, time.Hour),   // slack −55m
		et.Job("e").Priority(5).CPU(1).Obj(), // no deadline: last in its band
	}
	tests := map[string]struct {
		order engine.DeadlineOrder
		want  []string
	}{
		"default":           {want: []string{"c", "d", "a", "b", "e"}},
		"least-slack":       {order: engine.LeastSlackFirst, want: []string{"c", "d", "a", "b", "e"}},
		"earliest-deadline": {order: engine.EarliestDeadlineFirst, want: []string{"c", "d", "b", "a", "e"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{DeadlineOrder: tc.order}, Pending: pending}
			plan, _ := engine.Schedule(engine.State{}, snap)
			if got := orderOf(plan); !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

// Backfill plans with time limits (as Slurm's does): a job with a
// TimeLimit is killed by then, so it surely ends by Started + TimeLimit
// (and may run until then whatever its estimate). B (4 cores) waits for R;
// C's estimate ends before B's reservation but its limit does not, so it
// may not start on B's cores (before the fix it did, and delayed B when it
// overran its estimate); D's limit ends in time. A running job's release is
// planned at its limit when it has one: B's reservation is at R's limit
// (+1h), not at its estimate (+30m), nor at its estimate when that is
// longer than the limit (+2h; it is killed at +1h).
func TestBackfillUsesTimeLimit(t *testing.T) {
	tests := map[string]struct {
		runEst, runLimit time.Duration
		wantResv         time.Duration
	}{
		"no limit":           {runEst: time.Hour, wantResv: time.Hour},
		"limit after est":    {runEst: 30 * time.Minute, runLimit: time.Hour, wantResv: time.Hour},
		"limit before est":   {runEst: 2 * time.Hour, runLimit: time.Hour, wantResv: time.Hour},
		"limit equal to est": {runEst: time.Hour, runLimit: time.Hour, wantResv: time.Hour},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := et.Job("R").CPU(2).Est(tc.runEst).Running("n", et.Epoch)
			r.TimeLimit = tc.runLimit
			c := et.Job("C").Priority(5).CPU(2).Est(30 * time.Minute).Obj()
			c.TimeLimit = 2 * time.Hour
			d := et.Job("D").Priority(4).CPU(2).Est(30 * time.Minute).Obj()
			d.TimeLimit = 45 * time.Minute
			snap := engine.Snapshot{Now: et.Epoch,
				Nodes:   []engine.Node{et.Node("n").CPU(4).Alloc(engine.Resources{engine.DimCPU: 2000}).Obj()},
				Running: []engine.Running{r},
				Pending: []engine.Job{et.Job("B").Priority(9).CPU(4).Est(time.Hour).Obj(), c, d},
			}
			plan, _ := engine.Schedule(engine.State{}, snap)
			if plan.Reservation == nil || plan.Reservation.JobID != "B" || plan.Reservation.Start.Sub(et.Epoch) != tc.wantResv {
				t.Fatalf("reservation %+v, want B at +%s", plan.Reservation, tc.wantResv)
			}
			_, rc := explanationOf(t, plan, "C")
			if rc == nil || rc.Reason != engine.ReasonBackfillBlocked {
				t.Errorf("C: %+v, want backfill-blocked (its limit ends after B's start)", rc)
			}
			if len(plan.Placements) != 1 || plan.Placements[0].JobID != "D" || !plan.Placements[0].Backfilled {
				t.Errorf("placements %+v, want D backfilled", plan.Placements)
			}
		})
	}
}
