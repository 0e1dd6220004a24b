package sim

import (
	"reflect"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/engine"
)

// TestComparePreemption runs testdata/preempt.json (a day of long
// low-priority batch jobs filling the pool, urgent short jobs arriving
// every 10 minutes or so, two bursts) with preemption off and under each
// policy, and checks the aims of preemption.
func TestComparePreemption(t *testing.T) {
	tr, err := Load("testdata/preempt.json")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ComparePreemption(tr, PreemptionPolicyNames())
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]PreemptionReport{}
	for _, r := range rs {
		p := r.Preemption
		by[r.Policy] = p
		t.Logf("%-15s evictions %4d (%.2f/h)  lost %10.0f billing-s  urgent %d: mean wait %6.1f s, p95 %6.1f s  max evictions/job %d  ping-pong %d  modes %v",
			r.Policy, p.Evictions, p.PerHour, p.LostWork, p.UrgentJobs, p.UrgentMeanWait, p.UrgentP95Wait, p.MaxEvictionsPerJob, p.PingPong, p.ByMode)
	}
	off, prio, cost := by["off"], by[string(engine.PreemptPriority)], by[string(engine.PreemptCost)]
	if off.Evictions != 0 || off.LostWork != 0 {
		t.Errorf("off: %d evictions, %.0f lost", off.Evictions, off.LostWork)
	}
	if off.UrgentJobs < 100 || off.UrgentMeanWait <= 0 {
		t.Fatalf("the trace does not make urgent jobs wait without preemption: %+v", off)
	}
	// Urgent (level ≥ 8) jobs wait at least 5× less under priority.
	if 5*prio.UrgentMeanWait > off.UrgentMeanWait {
		t.Errorf("urgent mean wait %.1f s under priority, %.1f s off: want at least 5× less", prio.UrgentMeanWait, off.UrgentMeanWait)
	}
	// Cost-based loses at most half the work priority does.
	if prio.LostWork <= 0 || cost.LostWork > prio.LostWork/2 {
		t.Errorf("lost work %.0f under cost-based, %.0f under priority: want at most half", cost.LostWork, prio.LostWork)
	}
	for _, name := range PreemptionPolicyNames()[1:] {
		p := by[name]
		if p.Evictions == 0 {
			t.Errorf("%s: no evictions", name)
		}
		if 5*p.UrgentMeanWait > off.UrgentMeanWait {
			t.Errorf("%s: urgent mean wait %.1f s, off %.1f s", name, p.UrgentMeanWait, off.UrgentMeanWait)
		}
		// No ping-pong over the day, and no job evicted over and over
		// (the cool-down and minimum runtime bound it at 96 a day; the
		// policies stay far below).
		if p.PingPong != 0 || p.MaxEvictionsPerJob > 12 {
			t.Errorf("%s: ping-pong %d, a job evicted %d times", name, p.PingPong, p.MaxEvictionsPerJob)
		}
	}
}

// TestPreemptionNoPingPong: fair-share preemption with equal levels, the
// case where two accounts could evict each other's jobs in turn.
func TestPreemptionNoPingPong(t *testing.T) {
	tr, err := Load("testdata/preempt_churn.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := RunWith(tr, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Preemption
	t.Logf("evictions %d (%.2f/h), lost %.0f, max evictions/job %d, ping-pong %d", p.Evictions, p.PerHour, p.LostWork, p.MaxEvictionsPerJob, p.PingPong)
	if p.Evictions == 0 {
		t.Fatal("no evictions: the trace tests nothing")
	}
	if p.PingPong != 0 || p.MaxEvictionsPerJob > 8 || p.PerHour > 10 {
		t.Errorf("churn: ping-pong %d, a job evicted %d times, %.1f evictions an hour", p.PingPong, p.MaxEvictionsPerJob, p.PerHour)
	}
}

// TestEvictionModes checks by hand what each mode does to a victim: one
// 4-core node; low (1000 s of work, level 1) starts at 0; urgent (level 9,
// 100 s) arrives at 400 and evicts it; checkpoints every 60 s.
func TestEvictionModes(t *testing.T) {
	tests := map[string]struct {
		mode             string
		wantLost         float64 // billing-seconds: 4 cores × 1 + 1 GiB × 0.25 = 4.25 a second
		wantMakespan     float64
		wantDropped      int
		wantLowRestarted bool
	}{
		"checkpoint: loses the 40 s since the checkpoint at 360": {"checkpoint", 4.25 * 40, 500 + 640, 0, true},
		"requeue: loses all 400 s":                               {"requeue", 4.25 * 400, 500 + 1000, 0, true},
		"suspend: loses nothing":                                 {"suspend", 0, 500 + 600, 0, true},
		"cancel: loses all and is dropped":                       {"cancel", 4.25 * 400, 500, 1, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tr, err := Parse([]byte(`{"name":"modes","nodes":[{"name":"n","cpu":4,"memory":16}],
				"preemption":{"policy":"priority","checkpoint_interval":60},
				"jobs":[{"id":"low","priority":1,"cpu":4,"memory":1,"duration":1000,"preempt_mode":"` + tc.mode + `"},
				        {"id":"urgent","arrival":400,"priority":9,"cpu":4,"memory":1,"duration":100}]}`))
			if err != nil {
				t.Fatal(err)
			}
			r, err := RunWith(tr, "", Options{})
			if err != nil {
				t.Fatal(err)
			}
			p := r.Preemption
			if p.Evictions != 1 || p.ByMode[tc.mode] != 1 {
				t.Fatalf("evictions %d by mode %v, want 1 %s", p.Evictions, p.ByMode, tc.mode)
			}
			if d := p.LostWork - tc.wantLost; d > 1e-6 || d < -1e-6 {
				t.Errorf("lost work %.3f, want %.3f", p.LostWork, tc.wantLost)
			}
			if r.Makespan != tc.wantMakespan {
				t.Errorf("makespan %.0f, want %.0f", r.Makespan, tc.wantMakespan)
			}
			if r.Jobs.Dropped != tc.wantDropped || tc.wantDropped > 0 && r.Jobs.DroppedBy["preempted"] != 1 {
				t.Errorf("dropped %d %v, want %d", r.Jobs.Dropped, r.Jobs.DroppedBy, tc.wantDropped)
			}
			if p.UrgentJobs != 1 || p.UrgentMeanWait != 0 {
				t.Errorf("urgent: %d jobs, wait %.1f; want 1 starting at once", p.UrgentJobs, p.UrgentMeanWait)
			}
		})
	}
}

// TestPreemptionOffOption: Options.Preemption "off" runs the trace as if it
// had no preemption section, and a trace without one reports nothing.
func TestPreemptionOffOption(t *testing.T) {
	tr, err := Load("testdata/preempt.json")
	if err != nil {
		t.Fatal(err)
	}
	off, err := RunWith(tr, "", Options{Preemption: "off"})
	if err != nil {
		t.Fatal(err)
	}
	plain := *tr
	plain.Preemption = nil
	want, err := RunWith(&plain, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want.Preemption != nil {
		t.Fatalf("a trace without preemption reports %+v", want.Preemption)
	}
	off.Preemption = nil
	if !reflect.DeepEqual(off.WithoutTimings(), want.WithoutTimings()) {
		t.Errorf("preemption off differs from no preemption")
	}
	if _, err := RunWith(tr, "", Options{Preemption: "bogus"}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown policy: err %v", err)
	}
	// Deterministic: the same run twice gives the same report.
	a, _ := RunWith(tr, "", Options{Preemption: string(engine.PreemptHybrid)})
	b, _ := RunWith(tr, "", Options{Preemption: string(engine.PreemptHybrid)})
	if !reflect.DeepEqual(a.WithoutTimings(), b.WithoutTimings()) {
		t.Errorf("two runs differ")
	}
}

// TestWritePreemption: the text forms mention the figures.
func TestWritePreemption(t *testing.T) {
	tr, err := Load("testdata/preempt.json")
	if err != nil {
		t.Fatal(err)
	}
	tr.Horizon = 7200
	rs, err := ComparePreemption(tr, []string{"off", "cost-based"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WritePreemptionComparison(&b, rs); err != nil {
		t.Fatal(err)
	}
	if err := WriteText(&b, &rs[1].Report); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PREEMPTION", "cost-based", "Preemption cost-based:", "lost work"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
