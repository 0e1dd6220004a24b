package sim

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/computeboard/computeboard/engine"
)

// Share measures.
const (
	// MeasureBilling weighs a running job by its billing rate (the engine's
	// usage unit: Σ Billing[d]·amount_d per second, a MIG instance priced at
	// slices/MIGSlices of a GPU). Proportional, lottery, WFQ and DRR balance
	// usage in this unit.
	MeasureBilling = "billing"
	// MeasureDominant weighs an account by its dominant share of the pool:
	// max over resources of (held / pool capacity), MIG compute slices
	// counting as one resource. DRF balances this.
	MeasureDominant = "dominant"
)

// Report is the outcome of one simulation. Times are seconds.
type Report struct {
	Trace    string     `json:"trace"`
	Policy   PolicyInfo `json:"policy"`
	Measure  string     `json:"measure"` // the measure of Achieved and of Jain's index
	Nodes    int        `json:"nodes"`
	Jobs     JobCounts  `json:"jobs"`
	Makespan float64    `json:"makespan_s"` // trace start to the last job's end (or the horizon)
	Window   WindowInfo `json:"window"`
	// Shares has one row per account that ran jobs, by name.
	Shares []AccountShare `json:"shares"`
	// Jain is Jain's fairness index over x_i = achieved_i/target_i:
	// (Σx)²/(n·Σx²); 1 is perfectly proportional, 1/n is one account
	// taking everything.
	Jain float64 `json:"jain"`
	// MaxDeviation is max |achieved_i/target_i − 1|.
	MaxDeviation float64       `json:"max_deviation"`
	Wait         WaitStats     `json:"wait"`  // every job that started (priority -1)
	Waits        []WaitStats   `json:"waits"` // by priority level, most urgent first
	Utilization  []Utilization `json:"utilization"`
	Deadlines    DeadlineStats `json:"deadlines"`
	Engine       EngineStats   `json:"engine"`
	// Preemption is set when the run had preemption configured (see
	// Options.Preemption).
	Preemption *PreemptionReport `json:"preemption,omitempty"`
}

// PolicyInfo names the policy a report ran under.
type PolicyInfo struct {
	Name           string      `json:"name"` // as asked: a selection algorithm or a trace variant
	Selection      string      `json:"selection"`
	Strategy       string      `json:"strategy"`
	FairShareMode  string      `json:"fair_share_mode"`
	Backfill       bool        `json:"backfill"`
	DeadlineAction string      `json:"deadline_action"`
	Weights        WeightsSpec `json:"weights"` // of the priority formula
}

// JobCounts count trace jobs (a gang is one job).
type JobCounts struct {
	Submitted int            `json:"submitted"`
	Finished  int            `json:"finished"`
	Dropped   int            `json:"dropped"`                    // final rejections, e.g. deadline-infeasible under deadline_action reject
	Stopped   int            `json:"stopped_at_limit,omitempty"` // of Finished: stopped at their time limit
	Waiting   int            `json:"waiting"`                    // still waiting at the end (never placed)
	NotYet    int            `json:"not_arrived"`                // arriving after the horizon
	Running   int            `json:"running"`                    // still running at the horizon
	DroppedBy map[string]int `json:"dropped_by,omitempty"`
}

// WindowInfo is the interval over which shares are measured.
type WindowInfo struct {
	// Kind is "contended" (the time during which every account with jobs
	// had a job waiting), "fixed" (the trace's window) or "whole run" (no
	// contended time at all: shares over the whole run).
	Kind     string  `json:"kind"`
	From     float64 `json:"from_s"` // start of the first contended interval
	To       float64 `json:"to_s"`   // end of the last one
	Seconds  float64 `json:"seconds"`
	Fraction float64 `json:"fraction"` // of the makespan
}

// AccountShare is one account's share of the measured resource-seconds.
type AccountShare struct {
	Account string  `json:"account"`
	Shares  float64 `json:"shares"`
	// Target is the normalized share in the fair-share tree pruned to the
	// accounts that ran jobs (shares multiply down the tree; Σ = 1). An
	// account with active sub-accounts gets none (Inner).
	Target   float64 `json:"target"`
	Achieved float64 `json:"achieved"` // fraction of the window's resource-seconds, in Report.Measure
	Ratio    float64 `json:"ratio"`    // Achieved / Target
	Billing  float64 `json:"billing"`  // achieved share by billing
	Dominant float64 `json:"dominant"` // achieved share by dominant share
	Finished int     `json:"finished"`
	MeanWait float64 `json:"mean_wait_s"`
	Inner    bool    `json:"inner,omitempty"`
}

// WaitStats are the waits (start − arrival) of the jobs of one priority
// level that started.
type WaitStats struct {
	Priority int     `json:"priority"`
	Jobs     int     `json:"jobs"`
	Mean     float64 `json:"mean_s"`
	P50      float64 `json:"p50_s"`
	P90      float64 `json:"p90_s"`
	P99      float64 `json:"p99_s"`
	Max      float64 `json:"max_s"`
}

// Utilization is the time-averaged use of one resource over the makespan,
// in trace units (cores, GiB, GPUs, Mbps, MIG compute slices).
type Utilization struct {
	Resource string  `json:"resource"`
	Unit     string  `json:"unit"`
	Capacity float64 `json:"capacity"`
	MeanUsed float64 `json:"mean_used"`
	Fraction float64 `json:"fraction"`
}

// DeadlineStats count the jobs that had a deadline.
type DeadlineStats struct {
	Jobs         int     `json:"jobs"`
	Met          int     `json:"met"`
	Late         int     `json:"late"`       // finished after the deadline
	Dropped      int     `json:"dropped"`    // rejected as final
	Unfinished   int     `json:"unfinished"` // not finished when the simulation ended
	Missed       int     `json:"missed"`     // late + dropped + unfinished past the deadline
	MissRate     float64 `json:"miss_rate"`
	MeanLateness float64 `json:"mean_lateness_s"` // over the late jobs
	MaxLateness  float64 `json:"max_lateness_s"`
}

// EngineStats describe the engine's work. Seconds and rates are wall-clock
// measurements and vary between runs; everything else is deterministic.
type EngineStats struct {
	Cycles          int     `json:"cycles"`
	Decisions       int     `json:"decisions"` // Σ pending jobs over the cycles (each is placed or rejected)
	Placements      int     `json:"placements"`
	Backfilled      int     `json:"backfilled"`
	Seconds         float64 `json:"seconds"` // inside engine.Schedule
	DecisionsPerSec float64 `json:"decisions_per_s"`
	WallSeconds     float64 `json:"wall_seconds"` // the whole simulation
	Speedup         float64 `json:"speedup"`      // simulated seconds per wall second
}

// WithoutTimings returns the report with the wall-clock fields zeroed, for
// comparing runs.
func (r Report) WithoutTimings() Report {
	r.Engine.Seconds, r.Engine.DecisionsPerSec, r.Engine.WallSeconds, r.Engine.Speedup = 0, 0, 0, 0
	return r
}

func (s *sim) measure() string {
	switch s.tr.Measure {
	case MeasureBilling, MeasureDominant:
		return s.tr.Measure
	}
	if s.pol.Selection == engine.SelectDRF {
		return MeasureDominant
	}
	return MeasureBilling
}

func (s *sim) report() Report {
	p := s.pol
	r := Report{
		Trace: s.tr.Name,
		Policy: PolicyInfo{
			Name:           s.name,
			Selection:      string(cmp.Or(p.Selection, engine.SelectPriority)),
			Strategy:       string(cmp.Or(p.Strategy, engine.BestFit)),
			FairShareMode:  string(cmp.Or(p.FairShareMode, engine.FairShareClassic)),
			Backfill:       !p.NoBackfill,
			DeadlineAction: string(cmp.Or(p.DeadlineAction, engine.DeadlineRun)),
		},
		Measure: s.measure(),
		Nodes:   len(s.nodeNames),
	}
	w := p.Weights
	if w == (engine.Weights{}) {
		w = engine.DefaultPolicy().Weights
	}
	r.Policy.Weights = WeightsSpec{Level: w.Level, Age: w.Age, FairShare: w.FairShare, Deadline: w.Deadline}

	// Jobs.
	truncated := false
	for _, j := range s.jobs {
		r.Jobs.Submitted++
		switch j.state {
		case jobDone:
			r.Jobs.Finished++
			if j.stopped {
				r.Jobs.Stopped++
			}
		case jobDropped:
			r.Jobs.Dropped++
			if r.Jobs.DroppedBy == nil {
				r.Jobs.DroppedBy = map[string]int{}
			}
			r.Jobs.DroppedBy[string(j.dropCode)]++
		case jobRunning:
			r.Jobs.Running++
			truncated = true
		case jobPending:
			r.Jobs.Waiting++
		case jobFuture:
			r.Jobs.NotYet++
			truncated = true
		}
	}
	end := s.lastEnd
	if truncated && s.horizon > 0 {
		end = s.horizon
	}
	r.Makespan = s.sec(end)

	// Shares.
	r.Window = WindowInfo{Kind: "contended", From: s.winFrom, To: s.winTo, Seconds: s.winSec}
	if s.tr.Window != nil {
		r.Window.Kind = "fixed"
	}
	useWin := s.winSec > 0
	if !useWin {
		r.Window = WindowInfo{Kind: "whole run", From: 0, To: r.Makespan, Seconds: r.Makespan}
	}
	if r.Makespan > 0 {
		r.Window.Fraction = r.Window.Seconds / r.Makespan
	}
	var totB, totD float64
	for _, a := range s.accts {
		if !a.active {
			continue
		}
		b, d := a.billAll, a.domAll
		if useWin {
			b, d = a.billWin, a.domWin
		}
		totB += b
		totD += d
	}
	waits := map[int][]float64{}
	acctWait := make([]float64, len(s.accts))
	acctStarted := make([]int, len(s.accts))
	acctDone := make([]int, len(s.accts))
	for _, j := range s.jobs {
		if j.state == jobRunning || j.state == jobDone {
			w := s.sec(j.first - j.arrival) // to the first start: an evicted job's restart is not a wait
			waits[j.priority] = append(waits[j.priority], w)
			acctWait[j.acct] += w
			acctStarted[j.acct]++
		}
		if j.state == jobDone {
			acctDone[j.acct]++
		}
	}
	var xs []float64
	for i, a := range s.accts {
		if !a.active {
			continue
		}
		b, d := a.billAll, a.domAll
		if useWin {
			b, d = a.billWin, a.domWin
		}
		row := AccountShare{Account: a.name, Shares: a.shares, Target: a.target, Inner: a.inner, Finished: acctDone[i],
			Billing: frac(b, totB), Dominant: frac(d, totD)}
		if acctStarted[i] > 0 {
			row.MeanWait = acctWait[i] / float64(acctStarted[i])
		}
		row.Achieved = row.Billing
		if r.Measure == MeasureDominant {
			row.Achieved = row.Dominant
		}
		if a.target > 0 {
			row.Ratio = row.Achieved / a.target
			xs = append(xs, row.Ratio)
			r.MaxDeviation = max(r.MaxDeviation, math.Abs(row.Ratio-1))
		}
		r.Shares = append(r.Shares, row)
	}
	slices.SortFunc(r.Shares, func(a, b AccountShare) int { return strings.Compare(a.Account, b.Account) })
	r.Jain = jain(xs)

	// Waits by priority, most urgent first.
	var all []float64
	for _, lvl := range slices.Backward(slices.Sorted(maps.Keys(waits))) {
		r.Waits = append(r.Waits, waitStats(lvl, waits[lvl]))
		all = append(all, waits[lvl]...)
	}
	r.Wait = waitStats(-1, all)

	// Utilization.
	units := [engine.NumDims]string{"cores", "GiB", "GPUs", "GiB", "Mbps", "GiB", "GiB", "GiB"}
	for d := range engine.NumDims {
		if s.capacity[d] <= 0 {
			continue
		}
		u := Utilization{Resource: d.String(), Unit: units[d], Capacity: float64(s.capacity[d]) / dimUnit(d)}
		if r.Makespan > 0 {
			u.MeanUsed = s.usedSec[d] / r.Makespan / dimUnit(d)
			u.Fraction = s.usedSec[d] / r.Makespan / float64(s.capacity[d])
		}
		r.Utilization = append(r.Utilization, u)
	}
	if s.migCap > 0 {
		u := Utilization{Resource: "mig", Unit: "slices", Capacity: float64(s.migCap)}
		if r.Makespan > 0 {
			u.MeanUsed = s.migSec / r.Makespan
			u.Fraction = u.MeanUsed / u.Capacity
		}
		r.Utilization = append(r.Utilization, u)
	}

	// Deadlines.
	dl := &r.Deadlines
	lateSum := 0.0
	for _, j := range s.jobs {
		if !j.hasDeadline {
			continue
		}
		dl.Jobs++
		switch j.state {
		case jobDone:
			if j.end > j.deadline {
				dl.Late++
				l := s.sec(j.end - j.deadline)
				lateSum += l
				dl.MaxLateness = max(dl.MaxLateness, l)
			} else {
				dl.Met++
			}
		case jobDropped:
			dl.Dropped++
		default:
			dl.Unfinished++
			if j.deadline < end {
				dl.Missed++
			}
		}
	}
	dl.Missed += dl.Late + dl.Dropped
	if dl.Late > 0 {
		dl.MeanLateness = lateSum / float64(dl.Late)
	}
	if dl.Jobs > 0 {
		dl.MissRate = float64(dl.Missed) / float64(dl.Jobs)
	}

	// Engine.
	e := &r.Engine
	e.Cycles, e.Decisions, e.Placements, e.Backfilled = s.cycles, s.decisions, s.placements, s.backfilled
	e.Seconds = s.engineTime.Seconds()
	if e.Seconds > 0 {
		e.DecisionsPerSec = float64(e.Decisions) / e.Seconds
	}
	e.WallSeconds = s.wall.Seconds()
	if e.WallSeconds > 0 {
		e.Speedup = r.Makespan / e.WallSeconds
	}
	return r
}

func waitStats(level int, w []float64) WaitStats {
	if len(w) == 0 {
		return WaitStats{Priority: level}
	}
	slices.Sort(w)
	sum := 0.0
	for _, x := range w {
		sum += x
	}
	return WaitStats{Priority: level, Jobs: len(w), Mean: sum / float64(len(w)),
		P50: percentile(w, 50), P90: percentile(w, 90), P99: percentile(w, 99), Max: w[len(w)-1]}
}

func frac(x, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return x / total
}

// jain is Jain's fairness index (Σx)²/(n·Σx²); 0 for no values.
func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// percentile is the nearest-rank percentile of sorted xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(xs)))) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}
