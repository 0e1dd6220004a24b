package engine_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

func TestFeasible(t *testing.T) {
	nodes := []engine.Node{
		et.Node("a").CPU(8).Mem(32).GPUs("A100", 2, 40).Storage("ssd", 100).Label("zone", "z1").Obj(),
		et.Node("b").CPU(16).Mem(64).MIGGPU("A100", 80, "1g.10gb", "3g.40gb").Obj(),
	}
	tests := map[string]struct {
		job        engine.Job
		wantReason engine.Code // "" = feasible
	}{
		"fits":              {job: et.Job("j").CPU(4).Obj()},
		"fits when busy":    {job: et.Job("j").CPU(16).Obj()},
		"too big":           {job: et.Job("j").CPU(17).Obj(), wantReason: engine.ReasonImpossible},
		"cpu and mem":       {job: et.Job("j").CPU(16).Mem(40).Obj()},
		"cpu and mem apart": {job: et.Job("j").CPU(9).Mem(65).Obj(), wantReason: engine.ReasonImpossible},
		"selector":          {job: et.Job("j").CPU(1).Selector("zone", "z2").Obj(), wantReason: engine.ReasonNoSuchNode},
		"gpu model":         {job: et.Job("j").GPU(1).GPUModel("H100").Obj(), wantReason: engine.ReasonNoSuchGPU},
		"gpu count":         {job: et.Job("j").GPU(3).Obj(), wantReason: engine.ReasonNoSuchGPU},
		"gpu memory":        {job: et.Job("j").GPU(1).GPUMem(80).Obj(), wantReason: engine.ReasonNoSuchGPU},
		"mig":               {job: et.Job("j").MIG("3g.40gb", 1).Obj()},
		"mig missing":       {job: et.Job("j").MIG("7g.80gb", 1).Obj(), wantReason: engine.ReasonNoSuchMIG},
		"mig count":         {job: et.Job("j").MIG("1g.10gb", 2).Obj(), wantReason: engine.ReasonNoSuchMIG},
		"tier":              {job: et.Job("j").Storage("nvme", 1).Obj(), wantReason: engine.ReasonNoSuchTier},
		"tier size":         {job: et.Job("j").Storage("ssd", 100).Obj()},
		"bad priority":      {job: et.Job("j").Priority(10).Obj(), wantReason: engine.ReasonInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := engine.Feasible(nodes, tc.job)
			switch {
			case tc.wantReason == "" && got != nil:
				t.Errorf("Feasible = %+v, want nil", got)
			case tc.wantReason != "" && (got == nil || got.Reason != tc.wantReason || !got.Final || got.JobID != "j"):
				t.Errorf("Feasible = %+v, want final %s", got, tc.wantReason)
			}
		})
	}
}

func TestPriorityFormula(t *testing.T) {
	now := et.Epoch.Add(10 * time.Hour)
	tests := map[string]struct {
		job        engine.Job
		policy     engine.Policy
		fs         float64
		wantP      float64
		wantUrg    float64
		wantMissed bool
	}{
		"level only": {job: et.Job("j").Priority(7).Submitted(now).Obj(), wantP: 7},
		"age 0.5/h":  {job: et.Job("j").Priority(0).Submitted(now.Add(-4 * time.Hour)).Obj(), wantP: 2},
		// No cap by default (the starvation bound needs the age term to grow).
		"age uncapped": {job: et.Job("j").Priority(0).Submitted(et.Epoch.Add(-100 * time.Hour)).Obj(), wantP: 55},
		"age capped": {job: et.Job("j").Priority(0).Submitted(et.Epoch.Add(-100 * time.Hour)).Obj(),
			policy: engine.Policy{MaxAge: 9}, wantP: 9},
		"fair share": {job: et.Job("j").Priority(3).Submitted(now).Obj(), fs: 0.5, wantP: 4},
		"slack = horizon": {job: et.Job("j").Priority(0).Submitted(now).Est(time.Hour).Deadline(now.Add(2 * time.Hour)).Obj(),
			wantP: 0.5, wantUrg: 0.5},
		"overdue": {job: et.Job("j").Priority(0).Submitted(now).Deadline(now.Add(-time.Minute)).Obj(),
			wantP: 1, wantUrg: 1, wantMissed: true},
		"custom weights": {job: et.Job("j").Priority(2).Submitted(now.Add(-2 * time.Hour)).Obj(), fs: 1,
			policy: engine.Policy{Weights: engine.Weights{Level: 10, Age: 1, FairShare: 5}}, wantP: 27},
		"no aging": {job: et.Job("j").Priority(1).Submitted(et.Epoch).Obj(), policy: engine.Policy{NoAging: true}, wantP: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, f := engine.Priority(tc.job, now, tc.policy, tc.fs)
			if !near(p, tc.wantP, 1e-9) || !near(f.Urgency, tc.wantUrg, 1e-9) || f.DeadlineMiss != tc.wantMissed {
				t.Errorf("Priority = %v %+v, want %v urgency %v missed %v", p, f, tc.wantP, tc.wantUrg, tc.wantMissed)
			}
		})
	}
}

func TestResourcesJSON(t *testing.T) {
	r := engine.Resources{engine.DimCPU: 2000, engine.DimGPU: 1, engine.DimHDD: 5}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"cpu":2000,"gpu":1,"hdd":5}`; string(b) != want {
		t.Errorf("marshal = %s, want %s", b, want)
	}
	var back engine.Resources
	if err := json.Unmarshal(b, &back); err != nil || back != r {
		t.Errorf("round trip = %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"tpu":1}`), &back); err == nil {
		t.Error("unknown dimension accepted")
	}
	if got := r.String(); got != "cpu=2000 gpu=1 hdd=5" {
		t.Errorf("String = %q", got)
	}
}

// orderOf returns the job IDs in order position.
func orderOf(p engine.Plan) []string {
	var ids []string
	for _, e := range p.Explanations {
		if e.Position > 0 {
			ids = append(ids, e.JobID)
		}
	}
	return ids
}

func backlog(accounts []string, per int) []engine.Job {
	var jobs []engine.Job
	for _, a := range accounts {
		for k := range per {
			jobs = append(jobs, et.Job(fmt.Sprintf("%s%03d", a, k)).Account(a).Priority(5).CPU(1).Est(time.Hour).Obj())
		}
	}
	return jobs
}

func accountsOf(ids []string) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteByte(id[0])
	}
	return b.String()
}

// The original's DRR always returned the first candidate; ours rotates.
func TestDRRRotates(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectDRR},
		Accounts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}, {Name: "c", Shares: 1}},
		Pending:  backlog([]string{"a", "b", "c"}, 4)}
	plan, _ := engine.Schedule(engine.State{}, snap)
	if got := accountsOf(orderOf(plan)); got != "abcabcabcabc" {
		t.Errorf("DRR order %s, want abcabcabcabc", got)
	}
}

// The original's WFQ set virtual time to the wall clock, so a newcomer
// starved; ours starts a newcomer at the current virtual time: it neither
// starves nor gets a burst of credit.
func TestWFQNewcomer(t *testing.T) {
	st := engine.State{VirtualTime: 1e6, Accounts: map[string]engine.AccountState{"old": {Finish: 1e6, UsageAt: et.Epoch}}}
	snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectWFQ},
		Accounts: []engine.Account{{Name: "old", Shares: 1}, {Name: "new", Shares: 1}},
		Pending:  backlog([]string{"old", "new"}, 5)}
	plan, _ := engine.Schedule(st, snap)
	if got := accountsOf(orderOf(plan)); got != "nononononono"[:10] {
		t.Errorf("WFQ order %s, want alternating", got)
	}
}

// Lottery draws are seeded: the same seed gives the same order; over many
// draws each account wins in proportion to its shares.
func TestLottery(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch, Seed: 9, Policy: engine.Policy{Selection: engine.SelectLottery},
		Accounts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 3}},
		Pending:  backlog([]string{"a", "b"}, 2000)}
	p1, _ := engine.Schedule(engine.State{}, snap)
	p2, _ := engine.Schedule(engine.State{}, snap)
	o1 := orderOf(p1)
	if !slices.Equal(o1, orderOf(p2)) {
		t.Fatal("same seed, different order")
	}
	snap.Seed = 10
	p3, _ := engine.Schedule(engine.State{}, snap)
	if slices.Equal(o1, orderOf(p3)) {
		t.Error("different seeds gave the same order")
	}
	// Among the first 2000 positions b should hold about 3/4.
	b := strings.Count(accountsOf(o1[:2000]), "b")
	if b < 1440 || b > 1560 {
		t.Errorf("b won %d of 2000 draws, want about 1500", b)
	}
}

// Equal priority and equal submission time must not break anything (the
// original's heap compared Job objects and raised TypeError).
func TestTiesAreStable(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch, Nodes: []engine.Node{et.Node("n").CPU(2).Mem(4).Obj()}}
	for _, id := range []string{"c", "a", "b"} {
		snap.Pending = append(snap.Pending, et.Job(id).CPU(1).Obj())
	}
	plan, _ := engine.Schedule(engine.State{}, snap)
	if got := orderOf(plan); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("order %v, want by ID", got)
	}
}

// WFQ's virtual time V after a cycle: never above the start tag of an
// account still waiting for capacity in the top class (so a waiting account
// keeps its credit), but not held back by accounts that could not be served
// anyway, and not left behind when nothing waits (no credit for being idle
// or light while everyone was served). Every job costs 3600 billing-seconds;
// with equal shares that is 7200 per job in virtual time.
func TestWFQVirtualTime(t *testing.T) {
	job := func(id, acct string, prio int) engine.Job {
		return et.Job(id).Account(acct).Priority(prio).CPU(1).Est(time.Hour).Obj()
	}
	tests := map[string]struct {
		st      engine.State
		accts   []engine.Account
		node    engine.Node
		running []engine.Running
		pending []engine.Job
		wantV   float64
	}{
		// a (3 shares: 4800 a job) places a1 and a2, at start tags 0 and
		// 4800; b1 still waits with start tag 0, so V stays 0.
		"waiting account holds V": {
			accts:   []engine.Account{{Name: "a", Shares: 3}, {Name: "b", Shares: 1}},
			node:    et.Node("n").CPU(2).Obj(),
			pending: []engine.Job{job("a1", "a", 5), job("a2", "a", 5), job("a3", "a", 5), job("b1", "b", 5)},
			wantV:   0,
		},
		// q is at its quota: it waits on itself, not for capacity.
		"quota-blocked account does not hold V": {
			accts:   []engine.Account{{Name: "b", Shares: 1}, {Name: "q", Shares: 1, Quota: engine.Resources{engine.DimCPU: 1000}}},
			node:    et.Node("n").CPU(2).Alloc(engine.Resources{engine.DimCPU: 1000}).Obj(),
			running: []engine.Running{et.Job("r").Account("q").CPU(1).Est(time.Hour).Running("n", et.Epoch)},
			pending: []engine.Job{job("b1", "b", 5), job("b2", "b", 5), job("q1", "q", 5)},
			wantV:   7200, // b's start tag for b2
		},
		// l's job is in a lower band than h's: it could not have gone.
		"lower band does not hold V": {
			accts:   []engine.Account{{Name: "h", Shares: 1}, {Name: "l", Shares: 1}},
			node:    et.Node("n").CPU(1).Obj(),
			pending: []engine.Job{job("h1", "h", 5), job("h2", "h", 5), job("l1", "l", 1)},
			wantV:   7200,
		},
		// Everything placed: V is the largest start tag placed (a2's).
		"nothing waits": {
			accts:   []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}},
			node:    et.Node("n").CPU(4).Obj(),
			pending: []engine.Job{job("a1", "a", 5), job("a2", "a", 5), job("b1", "b", 5)},
			wantV:   7200,
		},
		// V never moves back, whatever the tags of the accounts waiting.
		"monotone": {
			st:      engine.State{VirtualTime: 1e5},
			accts:   []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}},
			node:    et.Node("n").CPU(1).Obj(),
			pending: []engine.Job{job("a1", "a", 5), job("b1", "b", 5)},
			wantV:   1e5,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectWFQ},
				Accounts: tc.accts, Nodes: []engine.Node{tc.node}, Running: tc.running, Pending: tc.pending}
			plan, st := engine.Schedule(tc.st, snap)
			if len(plan.Placements) == 0 {
				t.Fatal("nothing placed")
			}
			if st.VirtualTime != tc.wantV {
				t.Errorf("V = %v, want %v (order %v, state %+v)", st.VirtualTime, tc.wantV, orderOf(plan), st.Accounts)
			}
		})
	}
}

// DRR's memory over cycles that place one job each: the account waiting
// receives its quantum every round that goes by and keeps it, so it goes
// as soon as its credit covers its head, and the pointer carries on.
// Shares 1:3, quantum 1800: a gets 600 a round, b 1800; jobs cost 3600, so
// b goes every other round (2, 4, 6, 8, …) and a every sixth (6, 12, …,
// ahead of b in its name order): b b a b, repeated. Before the fix, the
// credit a earned while b ran was dropped and b took every cycle.
func TestDRRKeepsCreditAcrossCycles(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectDRR, Quantum: 1800},
		Accounts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 3}},
		Nodes:    []engine.Node{et.Node("n").CPU(1).Obj()},
		Pending:  backlog([]string{"a", "b"}, 8)}
	var st engine.State
	var got strings.Builder
	for range 8 {
		plan, next := engine.Schedule(st, snap)
		st = next
		if len(plan.Placements) != 1 {
			t.Fatalf("%d placements, want 1", len(plan.Placements))
		}
		id := plan.Placements[0].JobID
		got.WriteByte(id[0])
		// The job runs and ends at once: the slot is free again next cycle.
		snap.Pending = slices.DeleteFunc(snap.Pending, func(j engine.Job) bool { return j.ID == id })
	}
	if got.String() != "bbabbbab" {
		t.Errorf("one job per cycle went to %s, want bbabbbab", got.String())
	}
}

// An account held back by its own quota is not waiting for the cluster:
// like an idle queue it keeps no DRR credit (it would otherwise collect a
// quantum every round for as long as its quota is full).
func TestDRRNoCreditOverQuota(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectDRR},
		Accounts: []engine.Account{{Name: "a", Shares: 1, Quota: engine.Resources{engine.DimCPU: 1000}}, {Name: "b", Shares: 1}},
		Nodes:    []engine.Node{et.Node("n").CPU(2).Alloc(engine.Resources{engine.DimCPU: 1000}).Obj()},
		Running:  []engine.Running{et.Job("r").Account("a").CPU(1).Est(time.Hour).Running("n", et.Epoch)},
		Pending:  backlog([]string{"a", "b"}, 3)}
	plan, st := engine.Schedule(engine.State{}, snap)
	if len(plan.Placements) != 1 || plan.Placements[0].JobID != "b000" {
		t.Fatalf("placed %+v, want b000", plan.Placements)
	}
	if d := st.Accounts["a"].Deficit; d != 0 {
		t.Errorf("a, over its quota, kept deficit %v, want 0", d)
	}
}

// Proportional counts the work its running jobs have still to run: an
// account whose job has just started (no usage yet) is not underserved.
func TestProportionalCountsStartedWork(t *testing.T) {
	snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectProportional},
		Accounts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}},
		Nodes:    []engine.Node{et.Node("n").CPU(2).Alloc(engine.Resources{engine.DimCPU: 1000}).Obj()},
		Running:  []engine.Running{et.Job("r").Account("a").CPU(1).Est(time.Hour).Running("n", et.Epoch)},
		Pending:  backlog([]string{"a", "b"}, 1)}
	plan, _ := engine.Schedule(engine.State{}, snap)
	if len(plan.Placements) != 1 || plan.Placements[0].JobID != "b000" {
		t.Errorf("placed %+v, want b000 (a's running job has all its hour left)", plan.Placements)
	}
}

// DRR's bound holds when an account's head is affordable but does not fit:
// the commit's replay passes its entries without charge, and it must not
// then collect a further quantum every cycle for as long as its jobs wait
// (it would burst when they fit). a's jobs need the GPU that r holds for
// ten hours; b's one-core jobs go one per cycle (each ends at once). a's
// deficit stays within its quantum plus one job.
func TestDRRDeficitBoundedWhileBlocked(t *testing.T) {
	const quantum = 3600.0 // a's and b's: equal shares
	gpuJob := func(id string) engine.Job {
		return et.Job(id).Account("a").Priority(5).CPU(1).GPU(1).Est(time.Hour).Obj()
	}
	snap := engine.Snapshot{Now: et.Epoch, Policy: engine.Policy{Selection: engine.SelectDRR},
		Accounts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}},
		Nodes:    []engine.Node{et.Node("n").CPU(2).GPUs("A100", 1, 40).Alloc(engine.Resources{engine.DimCPU: 1000, engine.DimGPU: 1}).Obj()},
		Running:  []engine.Running{et.Job("r").Account("c").CPU(1).GPU(1).Est(10*time.Hour).Running("n", et.Epoch)},
		Pending:  append([]engine.Job{gpuJob("a1"), gpuJob("a2")}, backlog([]string{"b"}, 40)...)}
	snap.Nodes[0].GPUs[0].InUse = true
	snap.Running[0].GPUs = []string{snap.Nodes[0].GPUs[0].ID}
	cost := 9.0 * 3600 // a core and a GPU for an hour
	var st engine.State
	for c := range 30 {
		plan, next := engine.Schedule(st, snap)
		st = next
		if len(plan.Placements) != 1 || plan.Placements[0].JobID[0] != 'b' {
			t.Fatalf("cycle %d: placed %+v, want one of b's jobs", c, plan.Placements)
		}
		if d := st.Accounts["a"].Deficit; d > quantum+cost {
			t.Fatalf("cycle %d: a's deficit %.0f > quantum %.0f + job %.0f", c, d, quantum, cost)
		}
		id := plan.Placements[0].JobID
		snap.Pending = slices.DeleteFunc(snap.Pending, func(j engine.Job) bool { return j.ID == id })
	}
}
