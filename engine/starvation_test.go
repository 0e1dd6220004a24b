package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// starvationBound is the default policy's ranking bound (README, "Starvation
// bound"): a job never ranks behind a job submitted more than
// (9·W_level + W_fs + W_dl + Band)/W_age = (9 + 2 + 1 + 1)/0.5 = 26 hours
// after it, whatever either's level, fair share or deadline.
const starvationBound = 26 * time.Hour

// TestNoStarvationDefault is the property behind the bound, on a simulated
// clock: one level-0 job J (its account heavily used, so its fair-share
// factor is low) behind a level-9 backlog that is refilled whenever one of
// its jobs starts (a closed loop: the backlog never shrinks), from accounts
// with random shares, some with deadlines already missed (urgency 1), on a
// random node that is full when J arrives. Estimates are exact. Checked:
//
//   - at every cycle, every job ranked ahead of J was submitted less than
//     26 h after J;
//   - J starts at the latest one planning horizon (the longest job, 3 h)
//     after both 26 h have passed and every level-9 job submitted before
//     then has started: by then J is first in the order, holds the EASY
//     reservation, and nothing may delay it.
//
// Before the fix the age term was capped at 9 levels: J only tied a fresh
// level-9 job and never started (nor within 10 simulated days here).
func TestNoStarvationDefault(t *testing.T) {
	if got := engine.StarvationBound(engine.Policy{}); got != starvationBound {
		t.Fatalf("StarvationBound(default) = %s, want %s", got, starvationBound)
	}
	n := uint64(24)
	if testing.Short() {
		n = 6
	}
	worst := time.Duration(0)
	for seed := range n {
		w := runStarvation(t, seed)
		worst = max(worst, w)
	}
	t.Logf("longest wait of the level-0 job: %s (ranking bound %s)", worst, starvationBound)
}

func runStarvation(t *testing.T, seed uint64) time.Duration {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5747))
	cores := 2 + rng.IntN(15)
	backlog := 1 + rng.IntN(3*cores)
	jCores := 1 + rng.IntN(cores)
	const maxDur = 3 * time.Hour
	dur := func() time.Duration { return 10*time.Minute + time.Duration(rng.Int64N(int64(maxDur-10*time.Minute))) }

	snap := engine.Snapshot{Now: et.Epoch}
	snap.Nodes = []engine.Node{et.Node("n").CPU(int64(cores)).Mem(int64(4 * cores)).Obj()}
	nAccts := 1 + rng.IntN(3)
	for i := range nAccts {
		snap.Accounts = append(snap.Accounts, engine.Account{Name: fmt.Sprint("hi", i), Shares: float64(1 + rng.IntN(5))})
	}
	snap.Accounts = append(snap.Accounts, engine.Account{Name: "low", Shares: 1})
	// low has used the machine heavily: its fair-share factor starts near 0.
	st := engine.State{LastNow: et.Epoch, Accounts: map[string]engine.AccountState{"low": {Usage: 1e9, UsageAt: et.Epoch}}}

	type run struct {
		r   engine.Running
		end time.Time
	}
	var running []run
	var ended []engine.Running
	submitted := map[string]time.Time{}
	seq := 0
	newHigh := func() engine.Job {
		seq++
		d := dur()
		b := et.Job(fmt.Sprintf("h%05d", seq)).Account(fmt.Sprint("hi", rng.IntN(nAccts))).Priority(9).CPU(1).Mem(1).Est(d).Submitted(snap.Now)
		if rng.IntN(4) == 0 {
			b.Deadline(snap.Now.Add(d / 2)) // already infeasible: urgency 1
		}
		j := b.Obj()
		submitted[j.ID] = j.Submitted
		return j
	}
	start := func(j engine.Job, node string) {
		running = append(running, run{r: engine.Running{Job: j, Node: node, Started: snap.Now}, end: snap.Now.Add(j.EstDuration)})
		snap.Nodes[0].Allocated = snap.Nodes[0].Allocated.Add(j.Request)
	}
	// The node is full of level-9 work when J arrives, and the backlog waits.
	for snap.Nodes[0].Allocated[engine.DimCPU] < int64(cores)*1000 {
		start(newHigh(), "n")
	}
	for range backlog {
		snap.Pending = append(snap.Pending, newHigh())
	}
	jSub := snap.Now
	j := et.Job("J").Account("low").Priority(0).CPU(float64(jCores)).Mem(1).Est(time.Hour).Submitted(jSub).Obj()
	snap.Pending = append(snap.Pending, j)

	// due is when J must have started: the horizon after both the ranking
	// bound and the start of the last level-9 job submitted before it.
	lastEarly := jSub.Add(starvationBound)
	limit := et.Epoch.Add(10 * 24 * time.Hour)
	for c := 0; ; c++ {
		if snap.Now.After(limit) {
			t.Fatalf("seed %d: J (%d of %d cores, backlog %d) has not started after %s", seed, jCores, cores, backlog, snap.Now.Sub(jSub))
		}
		snap.Seed = uint64(c)
		snap.Running = snap.Running[:0]
		for _, r := range running {
			snap.Running = append(snap.Running, r.r)
		}
		snap.Running = append(snap.Running, ended...)
		ended = ended[:0]
		plan, next := engine.Schedule(st, snap)
		st = next
		pos := slices.IndexFunc(plan.Explanations, func(e engine.Explanation) bool { return e.JobID == "J" })
		if pos < 0 {
			t.Fatalf("seed %d: J not explained", seed)
		}
		for _, e := range plan.Explanations[:pos] {
			if sub := submitted[e.JobID]; !sub.Before(jSub.Add(starvationBound)) {
				t.Fatalf("seed %d, %s: %s (submitted %s after J) ranks ahead of J (P %.2f vs %.2f)",
					seed, snap.Now.Sub(jSub), e.JobID, sub.Sub(jSub), e.Priority, plan.Explanations[pos].Priority)
			}
		}
		byID := map[string]engine.Job{}
		for _, p := range snap.Pending {
			byID[p.ID] = p
		}
		for _, p := range plan.Placements {
			pj := byID[p.JobID]
			snap.Pending = slices.DeleteFunc(snap.Pending, func(x engine.Job) bool { return x.ID == p.JobID })
			if p.JobID == "J" {
				wait := snap.Now.Sub(jSub)
				if due := lastEarly.Add(maxDur); snap.Now.After(due) {
					t.Fatalf("seed %d: J started after %s, later than %s", seed, wait, due.Sub(jSub))
				}
				return wait
			}
			start(pj, p.Node)
			if submitted[pj.ID].Before(jSub.Add(starvationBound)) && snap.Now.After(lastEarly) {
				lastEarly = snap.Now
			}
			snap.Pending = append(snap.Pending, newHigh()) // the closed loop
		}
		// Advance to the next completion.
		if len(running) == 0 {
			t.Fatalf("seed %d: nothing running and J not placed", seed)
		}
		nextEnd := running[0].end
		for _, r := range running {
			if r.end.Before(nextEnd) {
				nextEnd = r.end
			}
		}
		snap.Now = nextEnd
		kept := running[:0]
		for _, r := range running {
			if !r.end.After(snap.Now) {
				r.r.Ended = r.end
				ended = append(ended, r.r)
				snap.Nodes[0].Allocated = snap.Nodes[0].Allocated.Sub(r.r.Request)
				continue
			}
			kept = append(kept, r)
		}
		running = kept
	}
}

// Only an explicit configuration gives up the bound.
func TestStarvationBound(t *testing.T) {
	tests := map[string]struct {
		p    engine.Policy
		want time.Duration
	}{
		"default":         {want: 26 * time.Hour},
		"uncapped":        {p: engine.Policy{MaxAge: -1}, want: 26 * time.Hour},
		"age 1/h, band 2": {p: engine.Policy{Weights: engine.Weights{Level: 1, Age: 1, FairShare: 2, Deadline: 1}, Band: 2}, want: 14 * time.Hour},
		"no fair share":   {p: engine.Policy{Weights: engine.Weights{Level: 1, Age: 0.5, Deadline: 1}}, want: 22 * time.Hour},
		"capped":          {p: engine.Policy{MaxAge: 100}},
		"ageing off":      {p: engine.Policy{NoAging: true}},
		"zero age weight": {p: engine.Policy{Weights: engine.Weights{Level: 1, FairShare: 2}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := engine.StarvationBound(tc.p); got != tc.want {
				t.Errorf("StarvationBound = %s, want %s", got, tc.want)
			}
		})
	}
}
