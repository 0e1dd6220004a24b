package dispatch

import (
	"maps"
	"math"
	"slices"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/wire"
)

// Stats is the scheduler's figures for telemetry: a copy taken under its
// own short lock, never under a blackboard lock.
type Stats struct {
	Utilization map[string]float64 `json:"utilization"` // allocated fraction of the pool, by resource
	Jobs        wire.JobStatusData `json:"jobs"`
	Metrics     map[string]float64 `json:"metrics"` // named gauges for compute.metrics
	Nodes       int                `json:"nodes"`   // registered nodes
	Healthy     int                `json:"healthy"` // of which healthy
}

// Stats returns the current figures; inboxDepth is the broker's.
func (s *Scheduler) Stats(inboxDepth int) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneEvictionsLocked(s.cfg.Clock.Now())
	u := s.ledger.Utilization()
	util := map[string]float64{}
	for _, dim := range []engine.Dim{engine.DimCPU, engine.DimMemory, engine.DimGPU} {
		// CPU and memory always (0 on an empty pool); GPU where the pool has some.
		if dim != engine.DimGPU || u[dim] > 0 || s.hasCapacityLocked(dim) {
			util[dim.String()] = math.Min(1, u[dim])
		}
	}
	st := s.stats
	avg := func(sum float64, n int) float64 {
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	var assigned, running int
	for _, t := range s.jobs_ {
		switch t.phase {
		case PhaseAssigned:
			assigned++
		case PhaseRunning:
			running++
		}
	}
	healthy := 0
	for _, h := range s.health {
		if !h.unhealthy {
			healthy++
		}
	}
	return Stats{
		Utilization: util,
		Nodes:       len(s.health),
		Healthy:     healthy,
		Jobs: wire.JobStatusData{
			PendingJobs: s.pendingN, RunningJobs: running + assigned,
			CompletedJobs: st.completed, FailedJobs: st.failed, CancelledJobs: st.cancelled, InboxDepth: inboxDepth,
			Statistics: wire.JobStatistics{
				JobsSubmitted: st.submitted, JobsCompleted: st.completed, JobsFailed: st.failed, JobsCancelled: st.cancelled,
				AverageWaitTime: avg(st.waitSum, st.waitN), AverageTurnaroundTime: avg(st.turnSum, st.turnN),
			},
		},
		Metrics: map[string]float64{
			"scheduler_epoch":  float64(s.fence.Epoch),
			"scheduler_cycles": float64(st.cycles),
			// Of those, the partial plans (partial.go): over the heads of
			// the queues only.
			"scheduler_partial_plans":   float64(st.partial),
			"scheduler_placements":      float64(st.placements),
			"scheduler_last_cycle_ms":   float64(st.lastCycle.Microseconds()) / 1000,
			"scheduler_ledger_refusals": float64(st.refusedApply),
			"scheduler_reassigned":      float64(st.reassigned),
			"scheduler_lost_jobs":       float64(st.lost),
			"scheduler_requeued_jobs":   float64(st.requeued),
			"scheduler_assigned_jobs":   float64(assigned),
			// Evictions ordered in this term, in the last hour, and the
			// run time they threw away (seconds since the victims' starts).
			"scheduler_preemptions":            float64(st.preemptions),
			"scheduler_preemptions_last_hour":  float64(len(s.evictLog)),
			"scheduler_preemption_lost_work_s": math.Round(st.lostWork*1000) / 1000,
			// Run time (and core- and GPU-seconds) lost with lost nodes:
			// since each job's last verified checkpoint, or its start.
			"scheduler_node_lost_work_s": round3(s.progress.lostWork),
			"scheduler_node_lost_cpu_s":  round3(s.progress.lostCPU),
			"scheduler_node_lost_gpu_s":  round3(s.progress.lostGPU),
			"pool_nodes":                 float64(len(s.health)),
			"pool_healthy_nodes":         float64(healthy),
			"inbox_depth":                float64(inboxDepth),
		},
	}
}

func (s *Scheduler) hasCapacityLocked(d engine.Dim) bool {
	for _, name := range s.ledger.Names() {
		if n, ok := s.ledger.Node(name); ok && n.Capacity[d] > 0 {
			return true
		}
	}
	return false
}

// FutureStamps counts requests whose entry timestamp was after their
// acceptance (clamped).
func (s *Scheduler) FutureStamps() int64 { return s.futureStamps.Load() }

// NodeView is one node as the scheduler sees it, for the HTTP API.
type NodeView struct {
	Name      string            `json:"name"`
	Agent     string            `json:"agent"`
	Provider  string            `json:"provider"`
	Fake      bool              `json:"fake,omitempty"`
	Healthy   bool              `json:"healthy"`
	Why       string            `json:"unhealthy_reason,omitempty"` // the agent's own reason, when it took the node out
	Lost      bool              `json:"lost,omitempty"`
	LastBeat  *float64          `json:"last_heartbeat"`
	Labels    map[string]string `json:"labels,omitempty"`
	Capacity  map[string]int64  `json:"capacity"`
	Allocated map[string]int64  `json:"allocated"`
	GPUs      []GPUView         `json:"gpus,omitempty"`
	Confined  []string          `json:"confined,omitempty"`
	Jobs      int               `json:"jobs"`
}

// GPUView is one GPU of a node, with its MIG instances.
type GPUView struct {
	ID     string    `json:"id"`
	Model  string    `json:"model"`
	InUse  bool      `json:"in_use"`
	MIG    []MIGView `json:"mig,omitempty"`
	Memory int64     `json:"memory_mib"`
}

// MIGView is one MIG instance.
type MIGView struct {
	ID      string `json:"id"`
	Profile string `json:"profile"`
	InUse   bool   `json:"in_use"`
}

// NodeViews returns every node the scheduler knows, by name.
func (s *Scheduler) NodeViews() []NodeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobsOn := map[string]int{}
	for _, t := range s.jobs_ {
		if t.phase != PhasePending {
			jobsOn[t.node()]++
		}
	}
	var out []NodeView
	for _, n := range s.ledger.Snapshot() {
		h := s.health[n.Name]
		v := NodeView{Name: n.Name, Agent: h.rec.Agent, Provider: h.rec.Provider, Fake: h.rec.Fake,
			Healthy: !n.Unhealthy, Lost: h.lost, Why: h.rec.Unhealthy, Labels: n.Labels, Confined: slices.Clone(h.rec.Confined),
			Capacity: dims(n.Capacity), Allocated: dims(n.Allocated), Jobs: jobsOn[n.Name]}
		if !h.lastBeat.IsZero() {
			f := float64(h.lastBeat.UnixNano()) / 1e9
			v.LastBeat = &f
		}
		for _, g := range n.GPUs {
			gv := GPUView{ID: g.ID, Model: g.Model, InUse: g.InUse, Memory: g.MemoryMiB}
			for _, m := range g.MIG {
				gv.MIG = append(gv.MIG, MIGView{ID: m.ID, Profile: m.Profile, InUse: m.InUse})
			}
			v.GPUs = append(v.GPUs, gv)
		}
		out = append(out, v)
	}
	return out
}

func dims(r engine.Resources) map[string]int64 {
	out := map[string]int64{}
	for d := range engine.NumDims {
		if r[d] != 0 {
			out[engine.Dim(d).String()] = r[d]
		}
	}
	return out
}

// FairShareView is one account of the fair-share tree, for the HTTP API:
// its target (its shares normalized down the tree) against its usage
// (decayed, normalized over all usage), and the factor the scheduler
// computes from them (engine.FairShares).
type FairShareView struct {
	Account     string  `json:"account"`
	Parent      string  `json:"parent,omitempty"` // "" = under the root
	Shares      float64 `json:"shares"`
	Configured  bool    `json:"configured"`   // false: an account jobs name, with the default shares
	Target      float64 `json:"target_share"` // S, in [0, 1]
	Usage       float64 `json:"usage"`        // decayed usage of the subtree, billing-seconds
	UsageShare  float64 `json:"usage_share"`  // U, in [0, 1]
	EffUsage    float64 `json:"effective_usage"`
	Factor      float64 `json:"factor"` // F: 1 well under its share, 0.5 at it, less over it
	Running     int     `json:"running_jobs"`
	PendingJobs int     `json:"pending_jobs"`
}

// FairShares returns the fair-share tree as of the last plan, its usage
// decayed to now: the configured accounts and every account a job or the
// usage names (with the default shares, under the root), by name.
func (s *Scheduler) FairShares() []FairShareView {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	usage := s.state.UsageAt(now, s.cfg.Policy.HalfLife)
	running, pending := map[string]int{}, map[string]int{}
	for _, t := range s.jobs_ {
		if t.phase == PhasePending {
			pending[t.acct]++
		} else {
			running[t.acct]++
		}
	}
	s.mu.Unlock()
	pol := s.cfg.Policy
	def := pol.DefaultShares
	if def <= 0 {
		def = engine.DefaultPolicy().DefaultShares
	}
	accts := slices.Clone(s.cfg.Accounts)
	cfg := map[string]engine.Account{}
	configured := map[string]bool{}
	for _, a := range accts {
		cfg[a.Name], configured[a.Name] = a, true
	}
	names := slices.Sorted(maps.Keys(usage))
	names = append(names, slices.Sorted(maps.Keys(running))...)
	names = append(names, slices.Sorted(maps.Keys(pending))...)
	for _, n := range names {
		if _, ok := cfg[n]; !ok && n != "" {
			cfg[n] = engine.Account{Name: n, Shares: def}
			accts = append(accts, cfg[n])
		}
	}
	mode := pol.FairShareMode
	if mode == "" {
		mode = engine.DefaultPolicy().FairShareMode
	}
	var out []FairShareView
	for _, sh := range engine.FairShares(accts, usage, mode) {
		out = append(out, FairShareView{Account: sh.Name, Parent: cfg[sh.Name].Parent, Shares: sh.Shares, Configured: configured[sh.Name],
			Target: sh.NormShares, Usage: sh.Usage, UsageShare: sh.NormUsage, EffUsage: sh.EffUsage, Factor: sh.Factor,
			Running: running[sh.Name], PendingJobs: pending[sh.Name]})
	}
	return out
}
