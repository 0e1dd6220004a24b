package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/computeboard/computeboard/engine"
)

// This file is preemption in the simulator: the engine plans evictions
// (engine/preempt.go), the simulator applies them before the plan's
// placements and measures what they cost and buy.
//
// An evicted job stops at once and its resources are freed. By mode:
//
//   - cancel: the job is dropped (reason "preempted"); all its work is lost;
//   - requeue: it waits again from scratch: the work since it started is lost;
//   - checkpoint: it checkpoints every checkpoint_interval (default 60 s)
//     while it runs (Running.LastCheckpoint tells the engine); evicted, it
//     waits again and resumes from its last checkpoint: the work since then
//     is lost;
//   - suspend: modelled as an ideal swap-out: the job's resources are all
//     freed, nothing is lost, and it resumes where it stopped once placed
//     again (a real suspend may keep the node's memory; the model ignores
//     that).
//
// A requeued job keeps its submission time (it ages from its arrival) and
// is told the estimate of the work left. Lost work is counted in
// billing-seconds (the engine's usage unit: rate × seconds).

// PreemptionReport is what preemption did in one run.
type PreemptionReport struct {
	Policy    string         `json:"policy"` // off or the policy name
	Evictions int            `json:"evictions"`
	PerHour   float64        `json:"per_hour"` // evictions per simulated hour (over the makespan)
	ByMode    map[string]int `json:"by_mode,omitempty"`
	// LostWork is the work the evictions threw away, in billing-seconds.
	LostWork float64 `json:"lost_work"`
	// Urgent jobs are those of priority ≥ UrgentLevel; their waits run
	// from arrival to first start.
	UrgentLevel    int     `json:"urgent_level"`
	UrgentJobs     int     `json:"urgent_jobs"` // that started
	UrgentMeanWait float64 `json:"urgent_mean_wait_s"`
	UrgentP95Wait  float64 `json:"urgent_p95_wait_s"`
	// MaxEvictionsPerJob is the most times one job was evicted; PingPong
	// counts evictions of a job by one it had itself been evicted for
	// (A evicts B, then B evicts A).
	MaxEvictionsPerJob int `json:"max_evictions_per_job"`
	PingPong           int `json:"ping_pong"`
}

// PolicyResult is one run of ComparePreemption.
type PolicyResult struct {
	Policy     string           `json:"policy"`
	Preemption PreemptionReport `json:"preemption"`
	Report     Report           `json:"report"`
}

// ComparePreemption runs the trace once per preemption policy ("off" or
// "" = none; else an engine.PreemptPolicy name), each over the trace's
// own engine policy and preemption settings, and reports what each cost
// and bought. It is RunWith with Options.Preemption set, one run after
// the other.
func ComparePreemption(tr *Trace, policies []string) ([]PolicyResult, error) {
	return ComparePreemptionWith(tr, policies, Options{})
}

// ComparePreemptionWith is ComparePreemption with Options (their
// Preemption field is set per run).
func ComparePreemptionWith(tr *Trace, policies []string, o Options) ([]PolicyResult, error) {
	out := make([]PolicyResult, 0, len(policies))
	for _, p := range policies {
		o.Preemption = cmp.Or(p, string(engine.PreemptOff))
		r, err := RunWith(tr, "", o)
		if err != nil {
			return nil, err
		}
		out = append(out, PolicyResult{Policy: o.Preemption, Preemption: *r.Preemption, Report: r})
	}
	return out, nil
}

// PreemptionPolicyNames are "off" and every engine policy, the list
// ComparePreemption takes for "all".
func PreemptionPolicyNames() []string {
	out := []string{string(engine.PreemptOff)}
	for _, p := range engine.PreemptPolicies {
		out = append(out, string(p))
	}
	return out
}

func validMode(m string) bool {
	switch engine.EvictionMode(m) {
	case "", engine.ModeCancel, engine.ModeRequeue, engine.ModeSuspend, engine.ModeCheckpoint:
		return true
	}
	return false
}

func (p *PreemptionSpec) validate() error {
	if p == nil {
		return nil
	}
	if !engine.ValidPreemptPolicy(engine.PreemptPolicy(p.Policy)) {
		return fmt.Errorf("unknown policy %q", p.Policy)
	}
	for _, pool := range slices.Sorted(maps.Keys(p.PoolPolicy)) {
		if !engine.ValidPreemptPolicy(engine.PreemptPolicy(p.PoolPolicy[pool])) {
			return fmt.Errorf("pool %q: unknown policy %q", pool, p.PoolPolicy[pool])
		}
	}
	if !validMode(p.DefaultMode) {
		return fmt.Errorf("unknown default_mode %q", p.DefaultMode)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Weights)) {
		switch k {
		case "priority", "fair_share", "deadline", "resource", "cost":
		default:
			return fmt.Errorf("weights: unknown score %q", k)
		}
	}
	if p.CheckpointInterval < 0 || p.BudgetPerHour < 0 || p.AccountBudgetPerHour < 0 || p.MaxVictims < 0 {
		return errors.New("negative checkpoint_interval, budget or max_victims")
	}
	if p.UrgentLevel < 0 || p.UrgentLevel > 9 {
		return fmt.Errorf("urgent_level %d outside 0..9", p.UrgentLevel)
	}
	return nil
}

// config is the engine's PreemptionConfig for the spec, with the policy
// replaced by override unless it is "".
func (p *PreemptionSpec) config(override string) (engine.PreemptionConfig, error) {
	var pc engine.PreemptionConfig
	if p != nil {
		pc = engine.PreemptionConfig{
			Policy:               engine.PreemptPolicy(p.Policy),
			MinRuntime:           secs(p.MinRuntime),
			Cooldown:             secs(p.Cooldown),
			BudgetPerHour:        p.BudgetPerHour,
			AccountBudgetPerHour: p.AccountBudgetPerHour,
			MaxVictims:           p.MaxVictims,
			MinPreemptorLevel:    p.MinPreemptorLevel,
			DefaultMode:          engine.EvictionMode(p.DefaultMode),
		}
		if len(p.PoolPolicy) > 0 {
			pc.PoolPolicy = map[string]engine.PreemptPolicy{}
			for k, v := range p.PoolPolicy {
				pc.PoolPolicy[k] = engine.PreemptPolicy(v)
			}
		}
		w := p.Weights
		pc.Weights = engine.HybridWeights{Priority: w["priority"], FairShare: w["fair_share"], Deadline: w["deadline"], Resource: w["resource"], Cost: w["cost"]}
	}
	if override != "" {
		if !engine.ValidPreemptPolicy(engine.PreemptPolicy(override)) {
			return pc, fmt.Errorf("unknown preemption policy %q: want off or one of %v", override, engine.PreemptPolicies)
		}
		pc.Policy, pc.PoolPolicy = engine.PreemptPolicy(override), nil
	}
	return pc, nil
}

// preemptStats is the simulator's running tally.
type preemptStats struct {
	interval  int64 // checkpoint interval, ns
	urgent    int
	evictions int
	byMode    map[string]int
	lost      float64
	pairs     map[[2]string]bool // (victim, preemptor) seen
	pingPong  int
}

func (s *sim) initPreemption(override string) error {
	pc, err := s.tr.Preemption.config(override)
	if err != nil {
		return err
	}
	s.preCfg = pc
	s.pre = preemptStats{interval: s.ns(60), urgent: engine.CriticalLevel, byMode: map[string]int{}, pairs: map[[2]string]bool{}}
	if p := s.tr.Preemption; p != nil {
		if p.CheckpointInterval > 0 {
			s.pre.interval = s.ns(p.CheckpointInterval)
		}
		if p.UrgentLevel > 0 {
			s.pre.urgent = p.UrgentLevel
		}
	}
	return nil
}

// mode is the eviction mode job j would get (and so whether it
// checkpoints).
func (s *sim) mode(j *job) engine.EvictionMode {
	m := &j.members[0]
	return engine.ResolveMode(cmp.Or(m.PreemptMode, s.preCfg.DefaultMode), m.PreemptModes)
}

// checkpoints stamps each running checkpointing job's last checkpoint.
func (s *sim) checkpoints() {
	if !s.preCfg.Enabled() || s.pre.interval <= 0 {
		return
	}
	for k := range s.running {
		rr := &s.running[k]
		j := rr.j
		if s.mode(j) != engine.ModeCheckpoint {
			continue
		}
		if n := (s.now - j.start) / s.pre.interval; n > 0 {
			rr.r.LastCheckpoint = s.at(j.start + n*s.pre.interval)
		}
	}
}

// evict applies one eviction of the plan.
func (s *sim) evict(ev engine.Eviction) error {
	ref, ok := s.members[ev.JobID]
	if !ok || ref.j.state != jobRunning {
		return fmt.Errorf("engine evicted %s, which is not running", ev.JobID)
	}
	j := ref.j
	if len(j.members) != 1 {
		return fmt.Errorf("engine evicted gang member %s", ev.JobID)
	}
	ran := s.now - j.start
	saved := int64(0)
	switch ev.Mode {
	case engine.ModeSuspend:
		saved = ran
	case engine.ModeCheckpoint:
		if s.pre.interval > 0 {
			saved = ran / s.pre.interval * s.pre.interval
		}
	}
	bill, _ := s.jobRate(j)
	s.pre.lost += bill * s.sec(ran-saved)
	s.pre.evictions++
	s.pre.byMode[string(ev.Mode)]++
	if s.pre.pairs[[2]string{ev.Preemptor, ev.JobID}] {
		s.pre.pingPong++
	}
	s.pre.pairs[[2]string{ev.JobID, ev.Preemptor}] = true
	j.evictions++
	j.runs++ // its completion event is void
	j.remaining -= saved
	s.release(j, 0)
	j.placed[0] = false
	kept := s.running[:0]
	for _, r := range s.running {
		if r.j == j {
			r.r.Ended = s.at(s.now)
			s.ended = append(s.ended, r.r)
			continue
		}
		kept = append(kept, r)
	}
	clear(s.running[len(kept):])
	s.running = kept
	if ev.Mode == engine.ModeCancel {
		j.state = jobDropped
		s.endedN++
		j.dropCode, j.dropMsg = "preempted", ev.Reason
		j.end = s.now
		return nil
	}
	m := &j.members[0]
	if m.EstDuration > 0 {
		m.EstDuration = max(m.EstDuration-time.Duration(saved), time.Second)
	}
	j.state = jobPending
	s.pending = append(s.pending, j)
	s.accts[j.acct].backlog++
	return nil
}

// jobRate is one job's billing rate and dominant share, as rates computes
// them for an account.
func (s *sim) jobRate(j *job) (float64, float64) {
	a := &acctStat{alloc: j.vec, mig: j.migSlices}
	return s.rates(a)
}

func (s *sim) preemptionReport(makespan float64) *PreemptionReport {
	r := &PreemptionReport{Policy: cmp.Or(string(s.preCfg.Policy), string(engine.PreemptOff)), Evictions: s.pre.evictions,
		LostWork: s.pre.lost, UrgentLevel: s.pre.urgent, PingPong: s.pre.pingPong}
	if !s.preCfg.Enabled() {
		r.Policy = string(engine.PreemptOff)
	} else if r.Policy == string(engine.PreemptOff) {
		r.Policy = "per-pool"
	}
	if len(s.pre.byMode) > 0 {
		r.ByMode = maps.Clone(s.pre.byMode)
	}
	if makespan > 0 {
		r.PerHour = float64(s.pre.evictions) / (makespan / 3600)
	}
	var w []float64
	for _, j := range s.jobs {
		r.MaxEvictionsPerJob = max(r.MaxEvictionsPerJob, j.evictions)
		if j.priority >= s.pre.urgent && j.first >= 0 {
			w = append(w, s.sec(j.first-j.arrival))
		}
	}
	if len(w) > 0 {
		slices.Sort(w)
		sum := 0.0
		for _, x := range w {
			sum += x
		}
		r.UrgentJobs = len(w)
		r.UrgentMeanWait = sum / float64(len(w))
		r.UrgentP95Wait = percentile(w, 95)
	}
	if math.IsNaN(r.PerHour) {
		r.PerHour = 0
	}
	return r
}
