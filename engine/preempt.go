package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// This file is step 4b of the cycle: preemption. When a pending job does
// not fit on any node now (ReasonNoFit: not merely held back by the EASY
// reservation, a quota, a share cap or a blocked job ahead), the engine may
// plan evictions of running jobs to make room for it, the preemptor.
//
// Search. For every node it takes the running jobs eligible as victims
// (guard rails below), sorts them by the node's pool's policy (ordering
// rules below), and on a trial copy of the node releases them in that order
// until the preemptor fits (including the reservation's view of the node,
// as for any placement); it then drops, last first, every victim the fit
// does not need, so the set is minimal. The node whose set is best by the
// policy's set order wins (ties: node index order, i.e. name). Then, on the
// cycle's working copy, the victims are released, the fit is checked once
// more, and the preemptor is placed on that node (Plan.Placements) in the
// same plan; if the check fails the node is restored (undo) and nothing is
// evicted. Capacity only grows by an eviction, so the cycle's "fits
// nowhere" memos (failed shapes, dominated requests, no-fit analyses) are
// dropped after each one. Gangs: gang members are never victims, and a gang
// does not preempt (not supported yet).
//
// Policies (PreemptPolicy; per pool with PreemptionConfig.PoolPolicy). Each
// orders the candidate victims on a node (first evicted first) and
// compares the victim sets of different nodes (lower wins). "Lost work"
// is L = billing rate × seconds since max(Started, LastCheckpoint) ×
// Node.Cost (cancel: since Started; suspend: 0); ties always end with
// lower L, later start, then job ID.
//
//   - priority: victims by level ascending, then the latest started; sets
//     by highest victim level, then fewest victims, then Σ levels, Σ L.
//   - fair-share: victims by their account's fair-share factor ascending
//     (the account furthest over its share by decayed usage first), then
//     level; sets by the highest factor among the victims, the highest
//     level, fewest, Σ L.
//   - deadline-aware: victims whose deadline the eviction would make them
//     miss last (they met it if left running, and now + remaining estimate
//     > deadline), then level, then most slack first; sets by the number of
//     such misses (so a victim that misses only goes when no other set
//     exists), then highest level, fewest, Σ L.
//   - resource-based: victims by how much of the missing room they free
//     (Σ over short dimensions of min(victim, short)/short) descending, then
//     level; sets by fewest victims, then highest level, Σ L.
//   - cost-based: victims by L ascending; sets by Σ L, then fewest, highest
//     level.
//   - hybrid: victims by the weighted mean of five scores in [0, 1], lower
//     evicted first:
//
//     h = (w_p·level/9 + w_f·F + w_d·D + w_r·(1 − u) + w_c·L/L_max) / Σw
//
//     with F the victim's account fair-share factor, D = 1 if the eviction
//     makes it miss its deadline, else its deadline urgency (0 without), u
//     the fraction of the missing room it frees (as resource-based, capped
//     at 1), L_max the largest L among the preemptor's candidates;
//     HybridWeights default to 1 each. Sets by Σ h, then fewest.
//
// Guard rails (PreemptionConfig; each configurable):
//
//   - a victim has a strictly lower level than its preemptor (so a
//     CRITICAL job, level ≥ CriticalLevel, is never evicted for a lower
//     one). Under fair-share a victim may also have the preemptor's level,
//     if its account is further over its share than the preemptor's
//     (lower fair-share factor, another account) and, after the
//     evictions, the preemptor's account holds a weighted dominant share
//     (dominant share of the pool's capacity / normalized shares, current
//     allocations) no larger than the victim's account: the two cannot
//     then trade places back and forth;
//   - it has run at least MinRuntime;
//   - it is not NonPreemptible and not a gang member;
//   - budgets: at most BudgetPerHour evictions per pool and
//     AccountBudgetPerHour per victim account in any rolling hour, counted
//     from State.Preemptions plus this cycle's;
//   - no ping-pong: a job evicted less than Cooldown ago is neither evicted
//     again nor preempts; and a job never evicts a job that evicted it in
//     the last max(1h, Cooldown);
//   - only jobs of level MinPreemptorLevel or more preempt (e.g. 8: only
//     CRITICAL jobs; stops batch levels churning each other);
//   - at most MaxVictims victims per preemptor, and at most MaxPreemptors
//     preemptors tried per cycle (a bound on the search's cost);
//   - the preemptor is placed in the same plan on the node freed, or
//     nothing is evicted.
//
// Modes. An eviction's mode is the victim's Job.PreemptMode, else
// DefaultMode (requeue). If the victim's provider does not support it
// (Job.PreemptModes lists what it supports; empty = all), the first
// supported mode of its fallback chain is used: checkpoint → requeue →
// cancel; suspend → requeue → cancel; requeue → cancel. Cancel is always
// possible. The engine only records the mode; the caller stops the job.
// The engine treats every mode as freeing all of the victim's resources.
// For suspend that is the plan's upper bound, not what happens: a paused
// process keeps its memory and devices, so the live scheduler
// (dispatch/suspend.go) checks that the preemptor fits beside them and
// turns the eviction into a requeue where it would not.

// CriticalLevel is the lowest level of the CRITICAL band (the wire format
// maps the CRITICAL entry priority to 8): such jobs are evicted only for a
// job of a higher level.
const CriticalLevel = 8

// PreemptPolicy names a victim-selection policy.
type PreemptPolicy string

// Preemption policies (see the top of preempt.go for the exact rules).
const (
	PreemptOff       PreemptPolicy = "off"            // no evictions (as "")
	PreemptPriority  PreemptPolicy = "priority"       // lowest level first
	PreemptFairShare PreemptPolicy = "fair-share"     // the account furthest over its share first
	PreemptDeadline  PreemptPolicy = "deadline-aware" // never make a victim miss its deadline if another set exists
	PreemptResource  PreemptPolicy = "resource-based" // fewest victims
	PreemptCost      PreemptPolicy = "cost-based"     // least lost work
	PreemptHybrid    PreemptPolicy = "hybrid"         // weighted sum of normalised scores
)

// PreemptPolicies lists the policies that evict, in documentation order.
var PreemptPolicies = []PreemptPolicy{PreemptPriority, PreemptFairShare, PreemptDeadline, PreemptResource, PreemptCost, PreemptHybrid}

// ValidPreemptPolicy reports whether p names a policy ("" and "off" included).
func ValidPreemptPolicy(p PreemptPolicy) bool {
	return p == "" || p == PreemptOff || slices.Contains(PreemptPolicies, p)
}

// EvictionMode says how a victim is stopped.
type EvictionMode string

// Eviction modes.
const (
	ModeCancel     EvictionMode = "cancel"     // stop it for good
	ModeRequeue    EvictionMode = "requeue"    // stop it and put it back in the queue (work since its last checkpoint is lost)
	ModeSuspend    EvictionMode = "suspend"    // pause it in place, its CPU handed over; it resumes on its node with its progress
	ModeCheckpoint EvictionMode = "checkpoint" // checkpoint, stop, requeue; it restarts from the checkpoint
)

// ResolveMode returns the mode to use for a victim that wants mode want
// ("" = requeue) when its provider supports the modes in supported (empty =
// all): want if supported, else the first supported mode of its fallback
// chain (checkpoint → requeue → cancel, suspend → requeue → cancel,
// requeue → cancel). Cancel is always possible.
func ResolveMode(want EvictionMode, supported []EvictionMode) EvictionMode {
	var chain []EvictionMode
	switch want {
	case ModeCheckpoint:
		chain = []EvictionMode{ModeCheckpoint, ModeRequeue}
	case ModeSuspend:
		chain = []EvictionMode{ModeSuspend, ModeRequeue}
	case ModeCancel:
	default:
		chain = []EvictionMode{ModeRequeue}
	}
	for _, m := range chain {
		if len(supported) == 0 || slices.Contains(supported, m) {
			return m
		}
	}
	return ModeCancel
}

// HybridWeights weigh the hybrid policy's scores. The zero value gives each
// weight 1; otherwise the weights are used as given (negative = 0).
type HybridWeights struct {
	Priority  float64 `json:",omitempty"`
	FairShare float64 `json:",omitempty"`
	Deadline  float64 `json:",omitempty"`
	Resource  float64 `json:",omitempty"`
	Cost      float64 `json:",omitempty"`
}

// PreemptionConfig configures preemption. The zero value is off; zero
// fields take the defaults on each field.
type PreemptionConfig struct {
	Policy     PreemptPolicy            `json:",omitempty"` // "" or "off" = no preemption (default)
	PoolPolicy map[string]PreemptPolicy `json:",omitempty"` // per pool (node label Policy.PoolLabel); overrides Policy there ("off" turns a pool off)
	MinRuntime time.Duration            `json:",omitempty"` // a job runs at least this long before it can be evicted; default 5m; negative = none
	Cooldown   time.Duration            `json:",omitempty"` // see the ping-pong rule; default 10m; negative = none
	// BudgetPerHour caps evictions per pool in any rolling hour;
	// AccountBudgetPerHour caps them per victim account. 0 = no cap.
	BudgetPerHour        int           `json:",omitempty"`
	AccountBudgetPerHour int           `json:",omitempty"`
	MinPreemptorLevel    int           `json:",omitempty"` // only jobs of at least this level preempt; 0 = any level
	MaxVictims           int           `json:",omitempty"` // per preemptor; default 8
	MaxPreemptors        int           `json:",omitempty"` // pending jobs that may try to preempt per cycle; default 16
	Weights              HybridWeights `json:",omitzero"`  // hybrid policy
	DefaultMode          EvictionMode  `json:",omitempty"` // mode of victims whose job names none; default requeue
}

// Enabled reports whether any pool may preempt.
func (pc *PreemptionConfig) Enabled() bool {
	if on(pc.Policy) {
		return true
	}
	for _, p := range pc.PoolPolicy {
		if on(p) {
			return true
		}
	}
	return false
}

func on(p PreemptPolicy) bool { return p != "" && p != PreemptOff }

func (pc PreemptionConfig) withDefaults() PreemptionConfig {
	if pc.MinRuntime == 0 {
		pc.MinRuntime = 5 * time.Minute
	}
	if pc.Cooldown == 0 {
		pc.Cooldown = 10 * time.Minute
	}
	if pc.MaxVictims <= 0 {
		pc.MaxVictims = 8
	}
	if pc.MaxPreemptors <= 0 {
		pc.MaxPreemptors = 16
	}
	if pc.Weights == (HybridWeights{}) {
		pc.Weights = HybridWeights{1, 1, 1, 1, 1}
	}
	if pc.DefaultMode == "" {
		pc.DefaultMode = ModeRequeue
	}
	return pc
}

// pairWindow is how long "X evicted Y" forbids Y from evicting X, and how
// long State keeps a record.
func (pc *PreemptionConfig) pairWindow() time.Duration { return max(time.Hour, pc.Cooldown) }

// Eviction is one running job to stop so that a preemptor fits.
type Eviction struct {
	JobID     string        // the victim
	Node      string        // where it runs; the preemptor's Placement is on this node
	Mode      EvictionMode  // how to stop it (ResolveMode of its wanted mode)
	Preemptor string        // the job it makes room for
	Policy    PreemptPolicy // the policy that chose it (its node's pool's)
	Reason    string        // why this job: names the preemptor and the rule
}

// victim is one candidate victim of the current preemptor.
type victim struct {
	ri    int // index into Snapshot.Running
	node  int
	vec   Resources
	pk    picks
	mode  EvictionMode
	level int
	fs    float64 // its account's fair-share factor
	lost  float64 // L, cost-weighted billing-seconds lost
	miss  bool    // evicting it makes it miss its deadline
	slack time.Duration
	urg   float64 // deadline urgency in [0,1]
	use   float64 // fraction of the missing room it frees (resource-based)
	h     float64 // hybrid score
	acct  string
	pool  string
	same  bool // fair-share: a victim of the preemptor's own level
}

// preemptState is the cycle's preemption bookkeeping, built on first use.
type preemptState struct {
	cfg     PreemptionConfig
	runOn   [][]int // node index → running job indices
	evicted []bool  // per running job
	tries   int
}

func (c *cycle) poolOf(n int) string { return c.nodes[n].node.Labels[c.p.PoolLabel] }

func (c *cycle) policyOf(n int) PreemptPolicy {
	pc := &c.snap.Preemption
	if p, ok := pc.PoolPolicy[c.poolOf(n)]; ok {
		return p
	}
	return pc.Policy
}

// mayPreempt reports whether entry e, not placed for reason rej, may try
// to preempt.
func (c *cycle) mayPreempt(e *entry, rej Rejection) bool {
	if rej.Reason != ReasonNoFit || rej.Final || len(e.jobs) != 1 || !c.snap.Preemption.Enabled() {
		return false
	}
	if c.pre == nil {
		c.pre = &preemptState{cfg: c.snap.Preemption.withDefaults(), evicted: make([]bool, len(c.snap.Running))}
		c.pre.runOn = make([][]int, len(c.nodes))
		for k := range c.snap.Running {
			r := &c.snap.Running[k]
			if !r.Ended.IsZero() && !r.Ended.After(c.now) {
				continue
			}
			if n, ok := c.byName[r.Node]; ok {
				c.pre.runOn[n] = append(c.pre.runOn[n], k)
			}
		}
	}
	j := &c.snap.Pending[e.jobs[0]]
	if c.pre.tries >= c.pre.cfg.MaxPreemptors || j.Priority < c.pre.cfg.MinPreemptorLevel {
		return false
	}
	return !c.recentlyEvicted(j.ID)
}

// recentlyEvicted reports whether job id was evicted less than Cooldown ago.
func (c *cycle) recentlyEvicted(id string) bool {
	cd := c.pre.cfg.Cooldown
	if cd <= 0 {
		return false
	}
	for _, rec := range c.state.Preemptions {
		if rec.Job == id && c.now.Sub(rec.At) < cd {
			return true
		}
	}
	return false
}

// evictedBy reports whether victim evicted job in the pair window.
func (c *cycle) evictedBy(job, by string) bool {
	w := c.pre.cfg.pairWindow()
	for _, rec := range c.state.Preemptions {
		if rec.Job == job && rec.By == by && c.now.Sub(rec.At) < w {
			return true
		}
	}
	return false
}

// budgetLeft returns how many more evictions the pool and the account
// allow now (-1 = no cap).
func (c *cycle) budgetLeft(pool, acct string) (int, int) {
	pc := &c.pre.cfg
	np, na := 0, 0
	for _, rec := range c.state.Preemptions {
		if c.now.Sub(rec.At) >= time.Hour {
			continue
		}
		if rec.Pool == pool {
			np++
		}
		if rec.Account == acct {
			na++
		}
	}
	lp, la := -1, -1
	if pc.BudgetPerHour > 0 {
		lp = max(pc.BudgetPerHour-np, 0)
	}
	if pc.AccountBudgetPerHour > 0 {
		la = max(pc.AccountBudgetPerHour-na, 0)
	}
	return lp, la
}

// candidate returns running job k as a victim of pending job i on node n
// under policy pol, or false if a guard rail forbids it.
func (c *cycle) candidate(i, k, n int, pol PreemptPolicy, short Resources) (victim, bool) {
	if c.pre.evicted[k] {
		return victim{}, false
	}
	r := &c.snap.Running[k]
	j := &c.snap.Pending[i]
	pc := &c.pre.cfg
	if r.NonPreemptible || r.GangID != "" || r.ID == j.ID {
		return victim{}, false
	}
	if pc.MinRuntime > 0 && c.now.Sub(r.Started) < pc.MinRuntime {
		return victim{}, false
	}
	acct := c.accountName(&r.Job)
	fs := c.as.list[c.as.lookup(acct)].Factor
	same := false
	if pol == PreemptFairShare && r.Priority == j.Priority {
		// Same level: only from an account further over its share, and
		// only while the shares do not cross (setKeepsShares).
		if acct == c.accountName(j) || fs >= c.as.list[c.acctOf[i]].Factor {
			return victim{}, false
		}
		same = true
	} else if r.Priority >= j.Priority {
		return victim{}, false
	}
	if r.Priority >= CriticalLevel && r.Priority > j.Priority {
		return victim{}, false // never a CRITICAL job for a lower one (implied above; kept explicit)
	}
	if c.recentlyEvicted(r.ID) || c.evictedBy(j.ID, r.ID) {
		return victim{}, false
	}
	req := newJobReq(&r.Job)
	v := victim{ri: k, node: n, vec: req.vec, pk: devicePicks(c.nodes[n].node, r), level: r.Priority, fs: fs, acct: acct, pool: c.poolOf(n), same: same}
	v.mode = ResolveMode(cmp.Or(r.PreemptMode, pc.DefaultMode), r.PreemptModes)
	since := r.Started
	if v.mode != ModeCancel && r.LastCheckpoint.After(since) {
		since = r.LastCheckpoint
	}
	if v.mode != ModeSuspend && c.now.After(since) {
		cost := c.nodes[n].node.Cost
		if cost <= 0 {
			cost = 1
		}
		v.lost = c.p.billingRate(&req) * c.now.Sub(since).Seconds() * cost
	}
	if !r.Deadline.IsZero() {
		est := c.p.expected(&r.Job)
		saved := time.Duration(0)
		switch v.mode {
		case ModeSuspend:
			saved = c.now.Sub(r.Started)
		case ModeCheckpoint, ModeRequeue:
			if r.LastCheckpoint.After(r.Started) {
				saved = r.LastCheckpoint.Sub(r.Started)
			}
		}
		rem := max(est-saved, 0)
		v.slack = r.Deadline.Sub(c.now) - rem
		v.miss = !r.Started.Add(est).After(r.Deadline) && v.slack < 0
		if v.slack <= 0 {
			v.urg = 1
		} else {
			h := float64(c.p.DeadlineHorizon)
			v.urg = h / (h + float64(v.slack))
		}
	} else {
		v.slack = time.Duration(1<<63 - 1)
	}
	var sum float64
	var nd int
	for d := range NumDims {
		if short[d] > 0 {
			sum += float64(min(v.vec[d], short[d])) / float64(short[d])
			nd++
		}
	}
	if nd > 0 {
		v.use = min(sum/float64(nd), 1)
	}
	return v, true
}

// compareVictims orders candidates on one node under pol: lower is
// evicted first.
func (c *cycle) compareVictims(pol PreemptPolicy, a, b *victim) int {
	ra, rb := &c.snap.Running[a.ri], &c.snap.Running[b.ri]
	tail := func() int {
		return cmp.Or(cmp.Compare(a.lost, b.lost), rb.Started.Compare(ra.Started), strings.Compare(ra.ID, rb.ID))
	}
	switch pol {
	case PreemptFairShare:
		return cmp.Or(cmp.Compare(a.fs, b.fs), cmp.Compare(a.level, b.level), tail())
	case PreemptDeadline:
		return cmp.Or(compareBool(a.miss, b.miss), cmp.Compare(a.level, b.level), -cmp.Compare(a.slack, b.slack), tail())
	case PreemptResource:
		return cmp.Or(-cmp.Compare(a.use, b.use), cmp.Compare(a.level, b.level), tail())
	case PreemptCost:
		return cmp.Or(cmp.Compare(a.lost, b.lost), cmp.Compare(a.level, b.level), tail())
	case PreemptHybrid:
		return cmp.Or(cmp.Compare(a.h, b.h), tail())
	}
	return cmp.Or(cmp.Compare(a.level, b.level), rb.Started.Compare(ra.Started), tail())
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// setKey is a victim set's rank under its policy: lower wins.
type setKey [4]float64

func keyOf(pol PreemptPolicy, set []victim) setKey {
	var maxL, sumL, lost, maxF, miss, h float64
	for k := range set {
		v := &set[k]
		maxL = max(maxL, float64(v.level))
		sumL += float64(v.level)
		lost += v.lost
		maxF = max(maxF, v.fs)
		h += v.h
		if v.miss {
			miss++
		}
	}
	n := float64(len(set))
	switch pol {
	case PreemptFairShare:
		return setKey{maxF, maxL, n, lost}
	case PreemptDeadline:
		return setKey{miss, maxL, n, lost}
	case PreemptResource:
		return setKey{n, maxL, lost, sumL}
	case PreemptCost:
		return setKey{lost, n, maxL, sumL}
	case PreemptHybrid:
		return setKey{h, n, lost, maxL}
	}
	return setKey{maxL, n, sumL, lost}
}

func compareKeys(a, b setKey) int {
	for k := range a {
		if c := cmp.Compare(a[k], b[k]); c != 0 {
			return c
		}
	}
	return 0
}

// fitsOn reports whether r fits on nw, node n, as a placement would see it
// (the reservation's view for a job still running at its start).
func (c *cycle) fitsOn(nw *nodeWork, n int, r *jobReq, end time.Time) bool {
	if !nw.fits(r, c.scratch) {
		return false
	}
	if c.resv != nil && end.After(c.resv.start) {
		if rn := c.resv.nodes[n]; rn != nil {
			return rn.view(nw).fits(r, c.scratch)
		}
	}
	return true
}

// trialNode returns a copy of node n with the victims released.
func (c *cycle) trialNode(n int, set []victim) *nodeWork {
	nw := c.nodes[n].clone()
	for k := range set {
		nw.release(set[k].vec, set[k].pk)
	}
	return &nw
}

// preempt tries to make room for entry e (a single job) by evicting running
// jobs; it reports whether e was placed.
func (c *cycle) preempt(e *entry) bool {
	c.pre.tries++
	i := e.jobs[0]
	j := &c.snap.Pending[i]
	r := c.req(i)
	end := c.now.Add(c.p.latest(j))
	if j.EstDuration == 0 && j.TimeLimit == 0 {
		end = farFuture
	}
	pc := &c.pre.cfg
	type option struct {
		node int
		pol  PreemptPolicy
		set  []victim
	}
	var cands [][]victim
	var nodes []int
	lmax := 0.0
	for n := range c.nodes {
		nw := &c.nodes[n]
		pol := c.policyOf(n)
		if !on(pol) || !nw.healthy || len(c.pre.runOn[n]) == 0 || !matchSelector(nw.node, r.selector) {
			continue
		}
		var short Resources
		for d := range NumDims {
			short[d] = max(r.vec[d]-nw.free[d], 0)
		}
		var vs []victim
		for _, k := range c.pre.runOn[n] {
			if v, ok := c.candidate(i, k, n, pol, short); ok {
				vs = append(vs, v)
				lmax = max(lmax, v.lost)
			}
		}
		if len(vs) == 0 || !c.fitsOn(c.trialNode(n, vs), n, r, end) {
			continue
		}
		cands = append(cands, vs)
		nodes = append(nodes, n)
	}
	w := pc.Weights
	w.Priority, w.FairShare, w.Deadline, w.Resource, w.Cost = max(w.Priority, 0), max(w.FairShare, 0), max(w.Deadline, 0), max(w.Resource, 0), max(w.Cost, 0)
	wsum := w.Priority + w.FairShare + w.Deadline + w.Resource + w.Cost
	var best *option
	var bestKey setKey
	for x, vs := range cands {
		n := nodes[x]
		pol := c.policyOf(n)
		for k := range vs {
			v := &vs[k]
			d := v.urg
			if v.miss {
				d = 1
			}
			lc := 0.0
			if lmax > 0 {
				lc = v.lost / lmax
			}
			if wsum > 0 {
				v.h = (w.Priority*float64(v.level)/9 + w.FairShare*v.fs + w.Deadline*d + w.Resource*(1-v.use) + w.Cost*lc) / wsum
			}
		}
		slices.SortFunc(vs, func(a, b victim) int { return c.compareVictims(pol, &a, &b) })
		// Greedy in policy order until it fits, then drop what the fit
		// does not need (last first), so the set is minimal.
		set := make([]victim, 0, len(vs))
		nw := c.nodes[n].clone()
		fit := false
		for _, v := range vs {
			nw.release(v.vec, v.pk)
			set = append(set, v)
			if c.fitsOn(&nw, n, r, end) {
				fit = true
				break
			}
		}
		if !fit {
			continue
		}
		for k := len(set) - 2; k >= 0; k-- {
			without := slices.Delete(slices.Clone(set), k, k+1)
			if c.fitsOn(c.trialNode(n, without), n, r, end) {
				set = without
			}
		}
		if len(set) > pc.MaxVictims || !c.withinBudget(set) || !c.setKeepsShares(i, set) {
			continue
		}
		key := keyOf(pol, set)
		if best == nil || compareKeys(key, bestKey) < 0 {
			best, bestKey = &option{node: n, pol: pol, set: set}, key
		}
	}
	if best == nil {
		return false
	}
	// Apply on the working copy, with an undo if the preemptor does not
	// fit after all (it always should: the trial was the same release).
	n := best.node
	undo := c.nodes[n].clone()
	for k := range best.set {
		c.nodes[n].release(best.set[k].vec, best.set[k].pk)
	}
	if !c.fitsOn(&c.nodes[n], n, r, end) {
		c.nodes[n] = undo
		return false
	}
	c.ix.update(n, &c.nodes[n])
	names := make([]string, 0, len(best.set))
	for k := range best.set {
		v := &best.set[k]
		rj := &c.snap.Running[v.ri]
		c.pre.evicted[v.ri] = true
		neg := Resources{}.Sub(v.vec)
		c.addAlloc(c.as.lookup(v.acct), neg, false)
		names = append(names, rj.ID)
		c.plan.Evictions = append(c.plan.Evictions, Eviction{
			JobID: rj.ID, Node: c.nodes[n].node.Name, Mode: v.mode, Preemptor: j.ID, Policy: best.pol,
			Reason: fmt.Sprintf("evicted (%s) by %s (level %d) to make room on %s: %s", v.mode, j.ID, j.Priority, c.nodes[n].node.Name, c.why(best.pol, v, len(best.set))),
		})
		c.state.Preemptions = append(c.state.Preemptions, PreemptionRecord{At: c.now, Job: rj.ID, By: j.ID, Account: v.acct, Pool: v.pool})
	}
	// Capacity grew: the "fits nowhere" memos no longer hold.
	clear(c.failShape)
	clear(c.analyzed)
	c.failVecs = c.failVecs[:0]
	c.take(i, n, end)
	c.addAlloc(c.acctOf[i], r.vec, false)
	if c.preempted == nil {
		c.preempted = map[int][]string{}
	}
	c.preempted[i] = names
	return true
}

// withinBudget reports whether evicting set keeps the pool and account
// budgets.
func (c *cycle) withinBudget(set []victim) bool {
	pools, accts := map[string]int{}, map[string]int{}
	for k := range set {
		pools[set[k].pool]++
		accts[set[k].acct]++
	}
	for k := range set {
		lp, la := c.budgetLeft(set[k].pool, set[k].acct)
		if lp >= 0 && pools[set[k].pool] > lp || la >= 0 && accts[set[k].acct] > la {
			return false
		}
	}
	return true
}

// setKeepsShares checks the fair-share rule for victims of the
// preemptor's own level: afterwards the preemptor's account holds a
// weighted dominant share (dominant share of the pool / normalized shares)
// no larger than each such victim's account, so the two cannot trade
// places back and forth (Kueue's LessThanOrEqualToFinalShare).
func (c *cycle) setKeepsShares(i int, set []victim) bool {
	freed := map[int]Resources{}
	for k := range set {
		if set[k].same {
			a := c.as.lookup(set[k].acct)
			freed[a] = freed[a].Add(set[k].vec)
		}
	}
	if len(freed) == 0 {
		return true
	}
	ws := func(a int, alloc Resources) float64 {
		s := c.as.list[a].NormShares
		if s <= 0 {
			return math.Inf(1)
		}
		return dominantShare(alloc, c.total) / s
	}
	p := c.acctOf[i]
	after := ws(p, c.as.list[p].alloc.Add(c.req(i).vec))
	for a, v := range freed {
		if after > ws(a, c.as.list[a].alloc.Sub(v)) {
			return false
		}
	}
	return true
}

// why is the policy's reason for one victim.
func (c *cycle) why(pol PreemptPolicy, v *victim, n int) string {
	r := &c.snap.Running[v.ri]
	switch pol {
	case PreemptFairShare:
		return fmt.Sprintf("fair-share policy: account %s is over its share (factor %.3f), level %d", v.acct, v.fs, v.level)
	case PreemptDeadline:
		if v.miss {
			return fmt.Sprintf("deadline-aware policy: no victim set keeps every deadline; level %d", v.level)
		}
		return fmt.Sprintf("deadline-aware policy: keeps its deadline after eviction; level %d", v.level)
	case PreemptResource:
		return fmt.Sprintf("resource-based policy: one of the fewest victims (%d) that free the room", n)
	case PreemptCost:
		return fmt.Sprintf("cost-based policy: least lost work (%.0f billing-seconds since %s)", v.lost, lastSave(r, v.mode).Format(time.RFC3339))
	case PreemptHybrid:
		return fmt.Sprintf("hybrid policy: lowest score %.3f", v.h)
	}
	return fmt.Sprintf("priority policy: lowest level (%d) among the jobs that free the room", v.level)
}

func lastSave(r *Running, m EvictionMode) time.Time {
	if m != ModeCancel && r.LastCheckpoint.After(r.Started) {
		return r.LastCheckpoint
	}
	return r.Started
}

// prunePreemptions keeps the records the next cycle still needs.
func (c *cycle) prunePreemptions() {
	if len(c.state.Preemptions) == 0 {
		return
	}
	pc := c.snap.Preemption.withDefaults()
	w := pc.pairWindow()
	c.state.Preemptions = slices.DeleteFunc(c.state.Preemptions, func(r PreemptionRecord) bool {
		return c.now.Sub(r.At) >= w
	})
	if len(c.state.Preemptions) == 0 {
		c.state.Preemptions = nil
	}
}
