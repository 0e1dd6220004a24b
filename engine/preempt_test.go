package engine_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// The invariants of preemption, checked over generated snapshots (the seed
// handling of properties_test.go): crowded clusters, many running jobs,
// every policy, random guard rails and a random eviction history.

func genPreemptSnap(seed uint64) (engine.State, engine.Snapshot) {
	nodes := 1 + int(seed%9)
	snap := et.Generate(et.GenConfig{Seed: seed, Nodes: nodes, Pending: 5 + int(seed*7%40), Running: 10 + int(seed*3%60), Accounts: 1 + int(seed%4)})
	pols := engine.PreemptPolicies
	pc := engine.PreemptionConfig{Policy: pols[seed%uint64(len(pols))]}
	switch seed / 6 % 4 {
	case 0: // defaults
	case 1:
		pc.MinRuntime = -1
		pc.BudgetPerHour = 1 + int(seed%3)
	case 2:
		pc.MinRuntime = 30 * time.Minute
		pc.AccountBudgetPerHour = 1 + int(seed%2)
		pc.Cooldown = -1
	case 3:
		pc.MaxVictims = 1 + int(seed%3)
		pc.DefaultMode = []engine.EvictionMode{engine.ModeCancel, engine.ModeCheckpoint, engine.ModeSuspend}[seed%3]
		pc.Weights = engine.HybridWeights{Priority: 2, Cost: 1}
	}
	if seed%5 == 0 {
		// Only the even-numbered nodes form a preempting pool.
		for i := range snap.Nodes {
			if i%2 == 0 {
				snap.Nodes[i].Labels = map[string]string{"pool": "hot"}
			}
		}
		pc.PoolPolicy = map[string]engine.PreemptPolicy{"hot": pc.Policy}
		pc.Policy = engine.PreemptOff
	}
	snap.Preemption = pc
	modes := []engine.EvictionMode{"", engine.ModeCheckpoint, engine.ModeSuspend, engine.ModeRequeue, engine.ModeCancel}
	for k := range snap.Running {
		r := &snap.Running[k]
		h := seed + uint64(k)*2654435761
		r.NonPreemptible = h%7 == 0
		r.PreemptMode = modes[h%5]
		if h%3 == 0 {
			r.PreemptModes = []engine.EvictionMode{engine.ModeRequeue, engine.ModeCancel}
		}
		if h%4 == 0 {
			r.LastCheckpoint = snap.Now.Add(-time.Duration(h%30) * time.Minute)
		}
		if h%11 == 0 {
			r.Deadline = snap.Now.Add(time.Duration(h%300) * time.Minute)
		}
	}
	for i := range snap.Nodes {
		snap.Nodes[i].Cost = float64(i % 3)
	}
	// A history: some running and pending jobs evicted (or evicting)
	// within the last two hours.
	var st engine.State
	for k := range snap.Running {
		if (seed+uint64(k))%6 != 0 {
			continue
		}
		by := "old"
		if len(snap.Pending) > 0 {
			by = snap.Pending[k%len(snap.Pending)].ID
		}
		st.Preemptions = append(st.Preemptions, engine.PreemptionRecord{
			At: snap.Now.Add(-time.Duration((seed+uint64(k))%120) * time.Minute), Job: snap.Running[k].ID, By: by, Account: snap.Running[k].Account,
		})
	}
	slices.SortStableFunc(st.Preemptions, func(a, b engine.PreemptionRecord) int { return a.At.Compare(b.At) })
	return st, snap
}

func TestPreemptionProperties(t *testing.T) {
	n := uint64(360)
	if testing.Short() {
		n = 90
	}
	evictions := map[engine.PreemptPolicy]int{}
	for seed := range n {
		st, snap := genPreemptSnap(seed)
		plan := checkPreemption(t, st, snap)
		for _, ev := range plan.Evictions {
			evictions[ev.Policy]++
		}
	}
	// The generator must exercise every policy.
	for _, p := range engine.PreemptPolicies {
		if evictions[p] == 0 {
			t.Errorf("no eviction under %s in %d snapshots: the property test checks nothing there", p, n)
		}
	}
	t.Logf("evictions by policy: %v", evictions)
}

func checkPreemption(t *testing.T, st engine.State, snap engine.Snapshot) engine.Plan {
	t.Helper()
	before := deepCopy(t, snap)
	stBefore := st.Clone()
	plan, next := engine.Schedule(st, snap)
	seed := snap.Seed

	// Pure and deterministic.
	if !reflect.DeepEqual(deepCopy(t, snap), before) || !reflect.DeepEqual(st, stBefore) {
		t.Fatalf("seed %d: Schedule modified its input", seed)
	}
	again, next2 := engine.Schedule(stBefore, before)
	if !samePlan(plan, again) || !reflect.DeepEqual(next, next2) {
		t.Fatalf("seed %d: two runs on the same input differ", seed)
	}

	pc := snap.Preemption
	minRun := pc.MinRuntime
	if minRun == 0 {
		minRun = 5 * time.Minute
	}
	cooldown := pc.Cooldown
	if cooldown == 0 {
		cooldown = 10 * time.Minute
	}
	maxVictims := pc.MaxVictims
	if maxVictims == 0 {
		maxVictims = 8
	}
	running := map[string]engine.Running{}
	for _, r := range snap.Running {
		running[r.ID] = r
	}
	pending := map[string]engine.Job{}
	for _, j := range snap.Pending {
		pending[j.ID] = j
	}
	placedOn := map[string]string{}
	for _, p := range plan.Placements {
		placedOn[p.JobID] = p.Node
	}
	nodes := map[string]*engine.Node{}
	for i := range before.Nodes {
		nodes[before.Nodes[i].Name] = &before.Nodes[i]
	}
	// The accounts' fair-share factors this cycle, from the explanations
	// of their pending jobs (an account with none is not checked).
	fs := map[string]float64{}
	for _, ex := range plan.Explanations {
		fs[ex.Account] = ex.Factors.FairShare
	}
	factor := func(acct string) (float64, bool) {
		if acct == "" {
			acct = "default"
		}
		f, ok := fs[acct]
		return f, ok
	}
	recent := func(job string, within time.Duration) bool {
		for _, r := range st.Preemptions {
			if r.Job == job && snap.Now.Sub(r.At) < within {
				return true
			}
		}
		return false
	}

	evicted := map[string]bool{}
	byPreemptor := map[string][]string{}
	freed := map[string]engine.Resources{}
	freedGPU := map[string]bool{}
	poolCount, acctCount := map[string]int{}, map[string]int{}
	for _, ev := range plan.Evictions {
		r, ok := running[ev.JobID]
		if !ok || (!r.Ended.IsZero() && !r.Ended.After(snap.Now)) {
			t.Fatalf("seed %d: evicted %s is not running", seed, ev.JobID)
		}
		if evicted[ev.JobID] {
			t.Fatalf("seed %d: %s evicted twice", seed, ev.JobID)
		}
		evicted[ev.JobID] = true
		p, ok := pending[ev.Preemptor]
		if !ok {
			t.Fatalf("seed %d: eviction of %s for unknown preemptor %s", seed, ev.JobID, ev.Preemptor)
		}
		// No eviction unless the preemptor is placed, in this plan, on
		// the node freed.
		if placedOn[ev.Preemptor] != ev.Node || r.Node != ev.Node {
			t.Fatalf("seed %d: %s evicted from %s (runs on %s) for %s, placed on %q", seed, ev.JobID, ev.Node, r.Node, ev.Preemptor, placedOn[ev.Preemptor])
		}
		// A CRITICAL job is never evicted for a lower one; only a higher
		// level evicts (or, under fair-share, a job of another account
		// further over its share, of the same level).
		if r.Priority >= engine.CriticalLevel && p.Priority < r.Priority {
			t.Fatalf("seed %d: CRITICAL %s (level %d) evicted for %s (level %d)", seed, r.ID, r.Priority, p.ID, p.Priority)
		}
		if ev.Policy == engine.PreemptFairShare {
			fr, okr := factor(r.Account)
			fp, okp := factor(p.Account)
			if r.Priority > p.Priority || r.Priority == p.Priority && (r.Account == p.Account || okr && okp && fr >= fp) {
				t.Fatalf("seed %d: fair-share evicted %s (level %d, factor %.3f) for %s (level %d, factor %.3f)",
					seed, r.ID, r.Priority, fr, p.ID, p.Priority, fp)
			}
		} else if r.Priority >= p.Priority {
			t.Fatalf("seed %d: %s (level %d) evicted for %s (level %d)", seed, r.ID, r.Priority, p.ID, p.Priority)
		}
		if minRun > 0 && snap.Now.Sub(r.Started) < minRun {
			t.Fatalf("seed %d: %s evicted after %s, minimum runtime %s", seed, r.ID, snap.Now.Sub(r.Started), minRun)
		}
		if r.NonPreemptible || r.GangID != "" {
			t.Fatalf("seed %d: non-preemptible or gang job %s evicted", seed, r.ID)
		}
		if cooldown > 0 && (recent(r.ID, cooldown) || recent(p.ID, cooldown)) {
			t.Fatalf("seed %d: %s evicted for %s within the cool-down", seed, r.ID, p.ID)
		}
		for _, rec := range st.Preemptions {
			if rec.Job == p.ID && rec.By == r.ID && snap.Now.Sub(rec.At) < max(time.Hour, cooldown) {
				t.Fatalf("seed %d: ping-pong: %s evicts %s, which evicted it at %s", seed, p.ID, r.ID, rec.At)
			}
		}
		if want := engine.ResolveMode(cmpOr(r.PreemptMode, pc.DefaultMode, engine.ModeRequeue), r.PreemptModes); ev.Mode != want {
			t.Fatalf("seed %d: %s evicted with mode %s, want %s", seed, r.ID, ev.Mode, want)
		}
		if len(r.PreemptModes) > 0 && ev.Mode != engine.ModeCancel && !slices.Contains(r.PreemptModes, ev.Mode) {
			t.Fatalf("seed %d: %s evicted with unsupported mode %s", seed, r.ID, ev.Mode)
		}
		byPreemptor[p.ID] = append(byPreemptor[p.ID], r.ID)
		freed[ev.Node] = freed[ev.Node].Add(holdVec(r.Job))
		for _, id := range r.GPUs {
			freedGPU[id] = true
		}
		for _, id := range r.MIG {
			freedGPU[id] = true
		}
		poolCount[nodes[ev.Node].Labels["pool"]]++
		acctCount[r.Account]++
	}
	// Budgets, over the rolling hour.
	for _, rec := range st.Preemptions {
		if snap.Now.Sub(rec.At) < time.Hour {
			poolCount[rec.Pool]++
			acctCount[rec.Account]++
		}
	}
	if len(plan.Evictions) > 0 {
		for pool, c := range poolCount {
			if pc.BudgetPerHour > 0 && c > pc.BudgetPerHour && countIn(plan.Evictions, func(ev engine.Eviction) bool { return nodes[ev.Node].Labels["pool"] == pool }) > 0 {
				t.Fatalf("seed %d: pool %q: %d evictions in the hour, budget %d", seed, pool, c, pc.BudgetPerHour)
			}
		}
		for acct, c := range acctCount {
			if pc.AccountBudgetPerHour > 0 && c > pc.AccountBudgetPerHour && countIn(plan.Evictions, func(ev engine.Eviction) bool { return running[ev.JobID].Account == acct }) > 0 {
				t.Fatalf("seed %d: account %q: %d evictions in the hour, budget %d", seed, acct, c, pc.AccountBudgetPerHour)
			}
		}
	}
	for id, vs := range byPreemptor {
		if len(vs) > maxVictims {
			t.Fatalf("seed %d: %s evicts %d jobs, at most %d", seed, id, len(vs), maxVictims)
		}
	}
	// Explanations name the victims.
	for _, ex := range plan.Explanations {
		if !slices.Equal(ex.Evicts, byPreemptor[ex.JobID]) {
			t.Fatalf("seed %d: %s explains evicts %v, plan evicts %v", seed, ex.JobID, ex.Evicts, byPreemptor[ex.JobID])
		}
	}
	// No node over-committed once the victims are gone; devices are free or
	// freed by a victim, and given once.
	used := map[string]engine.Resources{}
	taken := map[string]bool{}
	for _, p := range plan.Placements {
		j := pending[p.JobID]
		used[p.Node] = used[p.Node].Add(holdVec(j))
		n := nodes[p.Node]
		for _, id := range p.GPUs {
			g := findGPU(n, id)
			if g == nil || (g.InUse && !freedGPU[id]) || taken[id] {
				t.Fatalf("seed %d: %s got unavailable GPU %s", seed, p.JobID, id)
			}
			taken[id] = true
		}
		for _, id := range p.MIG {
			if taken[id] {
				t.Fatalf("seed %d: MIG instance %s given twice", seed, id)
			}
			taken[id] = true
		}
	}
	for name, u := range used {
		free := nodes[name].Free().Add(freed[name])
		if !u.Fits(free) {
			t.Fatalf("seed %d: node %s over-committed: free %s + freed %s, placed %s", seed, name, nodes[name].Free(), freed[name], u)
		}
	}
	// The next State remembers every eviction, and nothing older than the
	// pair window.
	for _, ev := range plan.Evictions {
		if !slices.ContainsFunc(next.Preemptions, func(r engine.PreemptionRecord) bool {
			return r.Job == ev.JobID && r.By == ev.Preemptor && r.At.Equal(snap.Now)
		}) {
			t.Fatalf("seed %d: eviction of %s not in the next State", seed, ev.JobID)
		}
	}
	for _, r := range next.Preemptions {
		if snap.Now.Sub(r.At) >= max(time.Hour, cooldown) {
			t.Fatalf("seed %d: State keeps a record from %s", seed, r.At)
		}
	}
	return plan
}

func cmpOr(ms ...engine.EvictionMode) engine.EvictionMode {
	for _, m := range ms {
		if m != "" {
			return m
		}
	}
	return ""
}

func countIn(evs []engine.Eviction, f func(engine.Eviction) bool) int {
	n := 0
	for _, ev := range evs {
		if f(ev) {
			n++
		}
	}
	return n
}

// TestPreemptionOffChangesNothing: with preemption off (the zero config,
// "off", or a pool map of "off" only), the preemption fields of jobs and
// nodes change nothing: the plan is the one of the plain snapshot.
func TestPreemptionOffChangesNothing(t *testing.T) {
	n := uint64(120)
	if testing.Short() {
		n = 30
	}
	offs := []engine.PreemptionConfig{
		{},
		{Policy: engine.PreemptOff, BudgetPerHour: 1, MinRuntime: time.Hour},
		{PoolPolicy: map[string]engine.PreemptPolicy{"hot": engine.PreemptOff}, Policy: ""},
	}
	for seed := range n {
		plain := genSnap(seed)
		want, wantSt := engine.Schedule(engine.State{}, plain)
		st, snap := genPreemptSnap(seed)
		snap.Policy = plain.Policy
		// The plain snapshot's jobs and nodes with the preemption fields
		// of the generated one.
		snap.Pending, snap.Running, snap.Nodes, snap.Accounts, snap.Now = plain.Pending, plain.Running, plain.Nodes, plain.Accounts, plain.Now
		snap = deepCopy(t, snap)
		for k := range snap.Running {
			snap.Running[k].NonPreemptible = k%2 == 0
			snap.Running[k].LastCheckpoint = snap.Now.Add(-time.Minute)
			snap.Running[k].PreemptMode = engine.ModeCheckpoint
		}
		for i := range snap.Nodes {
			snap.Nodes[i].Cost = 3
		}
		for k, pc := range offs {
			snap.Preemption = pc
			got, gotSt := engine.Schedule(engine.State{}, snap)
			if len(got.Evictions) > 0 {
				t.Fatalf("seed %d, off config %d: %d evictions", seed, k, len(got.Evictions))
			}
			if !samePlan(want, got) || !reflect.DeepEqual(wantSt, gotSt) {
				t.Fatalf("seed %d, off config %d: the plan differs from the plain snapshot's", seed, k)
			}
		}
		// A history of evictions ages out, and nothing else changes.
		snap.Preemption = engine.PreemptionConfig{}
		got, gotSt := engine.Schedule(st, snap)
		if len(got.Evictions) > 0 || len(got.Placements) != len(want.Placements) {
			t.Fatalf("seed %d: with a history and preemption off, the plan changed", seed)
		}
		for _, r := range gotSt.Preemptions {
			if snap.Now.Sub(r.At) >= time.Hour {
				t.Fatalf("seed %d: record from %s kept", seed, r.At)
			}
		}
	}
}

// TestResolveMode pins the fallback order.
func TestResolveMode(t *testing.T) {
	c, r, s, k := engine.ModeCancel, engine.ModeRequeue, engine.ModeSuspend, engine.ModeCheckpoint
	tests := map[string]struct {
		want      engine.EvictionMode
		supported []engine.EvictionMode
		wantMode  engine.EvictionMode
	}{
		"default is requeue":           {"", nil, r},
		"checkpoint supported":         {k, []engine.EvictionMode{k, r}, k},
		"checkpoint falls to requeue":  {k, []engine.EvictionMode{r, c}, r},
		"checkpoint falls to cancel":   {k, []engine.EvictionMode{s}, c},
		"suspend supported by default": {s, nil, s},
		"suspend falls to requeue":     {s, []engine.EvictionMode{r}, r},
		"suspend falls to cancel":      {s, []engine.EvictionMode{c}, c},
		"requeue falls to cancel":      {r, []engine.EvictionMode{k}, c},
		"cancel is always possible":    {c, []engine.EvictionMode{r}, c},
	}
	for name, tc := range tests {
		if got := engine.ResolveMode(tc.want, tc.supported); got != tc.wantMode {
			t.Errorf("%s: ResolveMode(%q, %v) = %q, want %q", name, tc.want, tc.supported, got, tc.wantMode)
		}
	}
}

// TestPreemptOnlyWhenNothingFits: a job that fits now (or waits only
// behind the reservation, which backfill handles) never evicts.
func TestPreemptOnlyWhenNothingFits(t *testing.T) {
	now := et.Epoch
	snap := engine.Snapshot{Now: now, Preemption: engine.PreemptionConfig{Policy: engine.PreemptPriority}}
	snap.Nodes = []engine.Node{et.Node("a").CPU(8).Mem(32).Obj(), et.Node("b").CPU(8).Mem(32).Obj()}
	low := et.Job("low").Priority(0).CPU(8).Est(3*time.Hour).Running("a", now.Add(-time.Hour))
	snap.Running = []engine.Running{low}
	snap.Nodes[0].Allocated = low.Request
	snap.Pending = []engine.Job{et.Job("hi").Priority(9).CPU(4).Obj()}
	plan, _ := engine.Schedule(engine.State{}, snap)
	if len(plan.Evictions) > 0 || len(plan.Placements) != 1 || plan.Placements[0].Node != "b" {
		t.Fatalf("a job that fits on b evicted or went elsewhere: %+v", plan)
	}
	// Two level-9 jobs of 8 cores: the first takes b, the second evicts low.
	snap.Pending = append(snap.Pending, et.Job("hi2").Priority(9).CPU(8).Obj())
	snap.Pending[0] = et.Job("hi").Priority(9).CPU(8).Obj()
	plan, st := engine.Schedule(engine.State{}, snap)
	got := fmt.Sprint(plan.Evictions)
	if len(plan.Evictions) != 1 || plan.Evictions[0].JobID != "low" || plan.Evictions[0].Preemptor != "hi2" {
		t.Fatalf("want hi2 to evict low, got %s", got)
	}
	if len(st.Preemptions) != 1 || st.Preemptions[0].By != "hi2" {
		t.Fatalf("State records %+v", st.Preemptions)
	}
}
