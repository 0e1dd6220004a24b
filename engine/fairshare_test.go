package engine_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
)

// TestSlurmClassicExample reproduces the worked example of Slurm's classic
// fair-share documentation (doc/html/classic_fair_share.shtml): accounts A
// (40 shares) and D (60); A splits into B (30) and C (10), D into E (25) and
// F (35); user1 is alone in B, users 2 and 3 hold one share each in C, user4
// is alone in E, user5 alone in F. Usage is given as a fraction of the
// machine (0.2, 0.25, 0, 0.25, 0); the other 0.3 is charged elsewhere.
func TestSlurmClassicExample(t *testing.T) {
	accts := []engine.Account{
		{Name: "A", Shares: 40}, {Name: "D", Shares: 60},
		{Name: "B", Parent: "A", Shares: 30}, {Name: "C", Parent: "A", Shares: 10},
		{Name: "E", Parent: "D", Shares: 25}, {Name: "F", Parent: "D", Shares: 35},
		{Name: "user1", Parent: "B", Shares: 1},
		{Name: "user2", Parent: "C", Shares: 1}, {Name: "user3", Parent: "C", Shares: 1},
		{Name: "user4", Parent: "E", Shares: 1},
		{Name: "user5", Parent: "F", Shares: 1},
	}
	usage := map[string]float64{"user1": 0.2, "user2": 0.25, "user4": 0.25, "elsewhere": 0.3}
	got := map[string]engine.Share{}
	for _, s := range engine.FairShares(accts, usage, engine.FairShareClassic) {
		got[s.Name] = s
	}
	tests := map[string]struct{ wantS, wantUE, wantF float64 }{
		"A":     {0.4, 0.45, math.NaN()},
		"D":     {0.6, 0.25, math.NaN()},
		"B":     {0.3, 0.3875, math.NaN()},
		"C":     {0.1, 0.3, math.NaN()},
		"E":     {0.25, 0.25, math.NaN()},
		"F":     {0.35, 0.1458, math.NaN()},
		"user1": {0.3, 0.3875, 0.408479},
		"user2": {0.05, 0.275, 0.022097},
		"user3": {0.05, 0.15, 0.125000},
		"user4": {0.25, 0.25, 0.500000},
		"user5": {0.35, 0.1458, 0.749154},
	}
	for name, tc := range tests {
		s := got[name]
		if !near(s.NormShares, tc.wantS, 1e-9) {
			t.Errorf("%s: S = %v, want %v", name, s.NormShares, tc.wantS)
		}
		if !near(s.EffUsage, tc.wantUE, 1e-4) {
			t.Errorf("%s: U_E = %v, want %v", name, s.EffUsage, tc.wantUE)
		}
		if !math.IsNaN(tc.wantF) && !near(s.Factor, tc.wantF, 5e-4) {
			t.Errorf("%s: F = %.6f, want %.6f", name, s.Factor, tc.wantF)
		}
	}
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestFairShareEdges(t *testing.T) {
	tests := map[string]struct {
		accts []engine.Account
		usage map[string]float64
		want  map[string]float64 // factor
	}{
		"no usage anywhere": {
			accts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 3}},
			want:  map[string]float64{"a": 1, "b": 1},
		},
		"exactly its share": {
			accts: []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}},
			usage: map[string]float64{"a": 50, "b": 50},
			want:  map[string]float64{"a": 0.5, "b": 0.5},
		},
		"zero shares": {
			accts: []engine.Account{{Name: "a", Shares: 0}, {Name: "b", Shares: 1}},
			usage: map[string]float64{"b": 1},
			want:  map[string]float64{"a": 0, "b": 0.5},
		},
		"cycle attaches to root": {
			accts: []engine.Account{{Name: "a", Parent: "b", Shares: 1}, {Name: "b", Parent: "a", Shares: 1}},
			want:  map[string]float64{"a": 1, "b": 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, s := range engine.FairShares(tc.accts, tc.usage, engine.FairShareClassic) {
				if w, ok := tc.want[s.Name]; ok && !near(s.Factor, w, 1e-9) {
					t.Errorf("%s: F = %v, want %v", s.Name, s.Factor, w)
				}
			}
		})
	}
}

// TestEffectivePriorityMode checks the original's formula, scaled to [0,1]:
// min(1, 0.1·shares/usage).
func TestEffectivePriorityMode(t *testing.T) {
	accts := []engine.Account{{Name: "a", Shares: 2}, {Name: "b", Shares: 1}}
	usage := map[string]float64{"a": 4, "b": 0.05}
	want := map[string]float64{"a": 0.05, "b": 1}
	for _, s := range engine.FairShares(accts, usage, engine.FairShareEffectivePriority) {
		if !near(s.Factor, want[s.Name], 1e-12) {
			t.Errorf("%s: F = %v, want %v", s.Name, s.Factor, want[s.Name])
		}
	}
}

// TestDefaultHalfLife checks that the default decay reproduces the
// original's 0.9 per hour.
func TestDefaultHalfLife(t *testing.T) {
	got := math.Exp2(-float64(time.Hour) / float64(engine.DefaultHalfLife))
	if !near(got, 0.9, 1e-9) {
		t.Errorf("decay per hour = %v, want 0.9", got)
	}
}

// TestUsageDecay runs a job for an hour, then idles; usage decays by 0.9
// per hour with no history kept.
func TestUsageDecay(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := engine.Job{ID: "j", Account: "a", Request: engine.Resources{engine.DimCPU: 1000}}
	snap := engine.Snapshot{Now: start.Add(time.Hour), Running: []engine.Running{{Job: job, Node: "n", Started: start}}}
	_, st := engine.Schedule(engine.State{LastNow: start}, snap)
	// ∫0..1h 1·0.9^(1h−t) dt = (1−0.9)/ln(1/0.9) hours × 3600 s
	want := 3600 * (1 - 0.9) / -math.Log(0.9)
	if got := st.Accounts["a"].Usage; !near(got, want, 1e-6) {
		t.Fatalf("usage after 1h = %v, want %v", got, want)
	}
	// The job ends at 1h (reported once with Ended), then 2h pass.
	snap.Running[0].Ended = start.Add(time.Hour)
	snap.Now = start.Add(3 * time.Hour)
	_, st2 := engine.Schedule(st, snap)
	if got := st2.Accounts["a"].Usage; !near(got, want*0.81, 1e-6) {
		t.Errorf("usage after 2 idle hours = %v, want %v", got, want*0.81)
	}
}

func ExampleFairShares() {
	accts := []engine.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 3}}
	for _, s := range engine.FairShares(accts, map[string]float64{"a": 10, "b": 10}, engine.FairShareClassic) {
		fmt.Printf("%s S=%.2f U=%.2f F=%.3f\n", s.Name, s.NormShares, s.NormUsage, s.Factor)
	}
	// Output:
	// a S=0.25 U=0.50 F=0.250
	// b S=0.75 U=0.50 F=0.630
}
