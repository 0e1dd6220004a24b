package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Explanation is the engine's answer to "why is my job where it is": one per
// pending job, in order position.
type Explanation struct {
	JobID    string
	Account  string
	Position int     // 1-based position in the cycle's order
	Priority float64 // the priority formula's value (see Factors)
	Factors  Factors
	Placed   bool
	Node     string    `json:",omitempty"` // when placed
	Reason   Code      `json:",omitempty"` // why not placed; on a placed job only ReasonDeadlineInfeasible (running anyway)
	Message  string    `json:",omitempty"`
	EstStart time.Time // Now when placed; the reservation start for the reserved job; else a lower bound from running jobs' estimated ends (zero = unknown)
	// Evicts are the running jobs evicted to make room for this job (its
	// Message says why them); see Plan.Evictions.
	Evicts []string `json:",omitempty"`
}

// Factors are the terms of the priority formula for one job, before weights
// (except where noted).
type Factors struct {
	Level        int           // Job.Priority, 0..9
	AgeHours     float64       // hours waited
	Age          float64       // age term in levels: W_age·hours (capped at MaxAge only when MaxAge > 0)
	FairShare    float64       // fair-share factor in [0,1]; 0.5 = used exactly its share
	Urgency      float64       // deadline urgency in [0,1]; 0 without a deadline
	Slack        time.Duration // deadline − now − estimated duration; 0 without a deadline
	HasDeadline  bool
	DeadlineMiss bool // the deadline can no longer be met
	Guaranteed   bool // ahead of everything: within the account's guaranteed minimum
}

// explain fills the Plan: placements in decision order, then a rejection
// and an explanation for every pending job (step 5).
func (c *cycle) explain() {
	pend := c.snap.Pending
	resvStart := time.Time{}
	if c.resv != nil {
		resvStart = c.resv.start
		c.plan.Reservation = &Reservation{JobID: c.resv.jobID, Start: c.resv.start, Nodes: c.resv.names}
	}
	resvPos := 0
	if c.resv != nil {
		resvPos = c.posOf(c.resv.jobID)
	}
	for _, pl := range c.placements {
		p := c.nodes[pl.node].placement(pend[pl.ji].ID, pl.pk)
		p.Backfilled = c.resv != nil && int(c.out[pl.ji].pos) > resvPos
		c.plan.Placements = append(c.plan.Placements, p)
	}
	// Jobs in order position; jobs outside the order (invalid) last, in
	// input order. Positions are 1, 2, … once each (orderEntries), so
	// this is a counting sort, not a comparison sort (a tenth of a deep
	// queue's cycle).
	idx := make([]int, 0, len(pend))
	byPos := make([]int, len(pend)+1) // position → pending index + 1
	for i := range pend {
		if p := c.out[i].pos; p > 0 {
			byPos[p] = i + 1
		}
	}
	for _, k := range byPos {
		if k > 0 {
			idx = append(idx, k-1)
		}
	}
	for i := range pend {
		if c.out[i].pos == 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) != len(pend) { // never: orderEntries numbers each job once
		idx = idx[:0]
		for i := range pend {
			idx = append(idx, i)
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			pa, pb := c.out[a].pos, c.out[b].pos
			if pa == 0 {
				pa = math.MaxInt32
			}
			if pb == 0 {
				pb = math.MaxInt32
			}
			return cmp.Compare(pa, pb)
		})
	}
	// Each shape once, in the order of its first waiting job (estimates
	// takes the first MaxEstimates).
	var want []*jobReq
	wanted := make([]bool, len(c.shapes))
	for i := range pend {
		o := &c.out[i]
		if !o.placed && !c.rejs[o.rej].Final && pend[i].GangID == "" && c.valid[i] && !wanted[c.reqOf[i]] {
			wanted[c.reqOf[i]] = true
			want = append(want, c.req(i))
		}
	}
	est := c.estimates(want)
	if c.sink == nil {
		c.plan.Explanations = make([]Explanation, 0, len(pend))
	}
	// Rejected at its final size: grown by appends, a deep queue's
	// rejections were made two or three times over in one plan.
	if n := len(pend) - len(c.placements); n > 0 && c.sink == nil {
		c.plan.Rejected = make([]Rejection, 0, n)
	}
	// One Explanation and one Rejection reused: a sink's pointers would
	// move each one made inside the loop to the heap.
	ex, rej := new(Explanation), new(Rejection)
	for _, i := range idx {
		o := &c.out[i]
		j := &pend[i]
		*ex = Explanation{
			JobID:    j.ID,
			Account:  c.accountName(j),
			Position: int(o.pos),
			Priority: c.prio[i],
			Factors:  c.factors[i],
		}
		if e := c.entryOf(i); e != nil {
			ex.Factors.Guaranteed = e.guaranteed
		}
		switch {
		case o.placed:
			ex.Placed = true
			ex.Node = c.nodes[o.node].node.Name
			ex.EstStart = c.now
			if ex.Factors.DeadlineMiss {
				ex.Reason = ReasonDeadlineInfeasible
				ex.Message = fmt.Sprintf("deadline %s cannot be met (slack %s); running anyway", j.Deadline.Format(time.RFC3339), ex.Factors.Slack)
			}
			if vs := c.preempted[i]; len(vs) > 0 {
				ex.Evicts = vs
				msg := fmt.Sprintf("evicts %s on %s (%s policy)", strings.Join(vs, ", "), ex.Node, c.policyOf(int(o.node)))
				if ex.Message != "" {
					msg = ex.Message + "; " + msg
				}
				ex.Message = msg
			}
		default:
			*rej = c.rejs[o.rej]
			rej.JobID = j.ID
			if !o.set {
				*rej = reject(j.ID, ReasonNoFit, false, "not considered")
			}
			if ex.Factors.DeadlineMiss && !rej.Final {
				// Its own code, so that filters see it; what else holds it
				// back stays in the message (and NoFit). Only the Plan says
				// so: the commit still sees the job waiting for capacity.
				rej.Message = fmt.Sprintf("deadline %s cannot be met (slack %s); waiting: %s: %s",
					j.Deadline.Format(time.RFC3339), ex.Factors.Slack, rej.Reason, rej.Message)
				rej.Reason = ReasonDeadlineInfeasible
			}
			if c.sink == nil {
				c.plan.Rejected = append(c.plan.Rejected, *rej)
			}
			ex.Reason, ex.Message = rej.Reason, rej.Message
			switch {
			case rej.Final:
			case c.resv != nil && c.resvHolds(i):
				ex.EstStart = resvStart
			case c.rejs[o.rej].Reason == ReasonQuota:
				// A gang's members are in order position one after
				// another, its first member first (orderEntries).
				if e := c.entryOf(i); e != nil && e.jobs[0] == i {
					ex.EstStart = c.quotaEstimate(e, est)
					if len(e.jobs) > 1 {
						if c.gangStart == nil {
							c.gangStart = map[int]time.Time{}
						}
						c.gangStart[i] = ex.EstStart
					}
				} else if e != nil {
					ex.EstStart = c.gangStart[e.jobs[0]]
				}
				ex.Message += "; estimated start counts the quota (still a lower bound: the queue ahead is ignored)"
			case j.GangID == "":
				ex.EstStart = est[c.req(i).shape()]
			}
		}
		if c.sink != nil {
			if o.placed {
				c.sink(ex, nil)
			} else {
				c.sink(ex, rej)
			}
		} else {
			c.plan.Explanations = append(c.plan.Explanations, *ex)
		}
	}
}

// quotaEstimate is the estimated start of an entry held by a quota: the
// first estimated release after which every limited account above it
// (its own and its ancestors') has room for it, and not before its shape
// fits on a node (a single job's capacity estimate; now for a gang). Zero
// when either is unknown, or once estimateBudget steps have gone into
// these estimates this cycle (cached per account and shape).
func (c *cycle) quotaEstimate(e *entry, est map[shapeKey]time.Time) time.Time {
	if len(e.jobs) > 1 {
		return c.quotaEstimateUncached(e, est)
	}
	k := quotaKey{e.acct, c.req(e.jobs[0]).shape()}
	if t, ok := c.quotaEst[k]; ok {
		return t
	}
	if c.quotaEst == nil {
		c.quotaEst = map[quotaKey]time.Time{}
	}
	t := c.quotaEstimateUncached(e, est)
	c.quotaEst[k] = t
	return t
}

type quotaKey struct {
	acct  int
	shape shapeKey
}

func (c *cycle) quotaEstimateUncached(e *entry, est map[shapeKey]time.Time) time.Time {
	capT := c.now
	if len(e.jobs) == 1 {
		r := c.req(e.jobs[0])
		if !c.fitsNow(r) {
			if capT = est[r.shape()]; capT.IsZero() {
				return time.Time{}
			}
		}
	}
	// The limited accounts on the chain and their allocation now.
	var chain []int
	var alloc []Resources
	for a := e.acct; a >= 0; a = c.as.list[a].parent {
		if !c.as.list[a].quota.IsZero() {
			chain = append(chain, a)
			alloc = append(alloc, c.as.list[a].alloc)
		}
	}
	room := func() bool {
		for k, a := range chain {
			q := c.as.list[a].quota
			for d := range NumDims {
				if q[d] > 0 && alloc[k][d]+e.use[d] > q[d] {
					return false
				}
			}
		}
		return true
	}
	if room() {
		return capT
	}
	if c.quotaEvs == nil {
		c.quotaEvs = c.releases(false)
	}
	evs := c.quotaEvs
	for k := 0; k < len(evs); {
		if c.quotaSteps++; c.quotaSteps > estimateBudget {
			return time.Time{}
		}
		t := evs[k].t
		for ; k < len(evs) && evs[k].t.Equal(t); k++ {
			for a := evs[k].acct; a >= 0; a = c.as.list[a].parent {
				if i := slices.Index(chain, a); i >= 0 {
					alloc[i] = alloc[i].Sub(evs[k].vec)
				}
			}
		}
		if room() {
			if t.Before(capT) {
				return capT
			}
			return t
		}
	}
	return time.Time{}
}

// fitsNow reports whether some node has room for r now.
func (c *cycle) fitsNow(r *jobReq) bool {
	for i := range c.nodes {
		if c.quotaSteps++; c.quotaSteps > estimateBudget {
			return false
		}
		if c.nodes[i].fits(r, c.scratch) {
			return true
		}
	}
	return false
}

func (c *cycle) posOf(id string) int {
	for _, e := range c.order {
		if c.snap.Pending[e.jobs[0]].ID == id {
			return int(c.out[e.jobs[0]].pos)
		}
	}
	return 0
}

func (c *cycle) resvHolds(i int) bool {
	e := c.entryOf(i)
	if e == nil {
		return false
	}
	if !c.resvFound {
		// The holder's entry, found once (comparing IDs for every job
		// was a tenth of a deep queue's cycle).
		c.resvFound = true
		for _, x := range c.entries {
			if c.snap.Pending[x.jobs[0]].ID == c.resv.jobID {
				c.resvEntry = x
				break
			}
		}
	}
	return e == c.resvEntry
}

func (c *cycle) entryOf(i int) *entry {
	if c.entryIdx == nil {
		c.entryIdx = make([]*entry, len(c.snap.Pending))
		for _, e := range c.entries {
			for _, k := range e.jobs {
				c.entryIdx[k] = e
			}
		}
	}
	return c.entryIdx[i]
}

// estimates gives, per request shape, the earliest time it fits on some
// node by the estimated ends of running and just-placed jobs, ignoring the
// queue ahead of it: a lower bound on its start. One sweep over the releases
// serves every shape; at most Policy.MaxEstimates shapes and estimateBudget
// node checks per cycle (zero time = unknown). want holds each shape once
// (explain takes the cycle's interned requests).
func (c *cycle) estimates(want []*jobReq) map[shapeKey]time.Time {
	out := map[shapeKey]time.Time{}
	if c.p.MaxEstimates < 0 {
		return out
	}
	open := want[:min(len(want), c.p.MaxEstimates)]
	if len(open) == 0 {
		return out
	}
	evs := c.releases(false)
	fut := &future{c: c, touched: make(map[int]*nodeWork)}
	budget := estimateBudget
	var batch []int
	for k := 0; k < len(evs) && len(open) > 0 && budget > 0; {
		at := evs[k].t
		batch = batch[:0]
		for ; k < len(evs) && evs[k].t.Equal(at); k++ {
			ev := &evs[k]
			fut.node(ev.node).release(ev.vec, ev.pk)
			if len(batch) == 0 || batch[len(batch)-1] != ev.node {
				batch = append(batch, ev.node)
			}
		}
		kept := open[:0]
		for _, r := range open {
			found := false
			for _, n := range batch {
				budget--
				if fut.get(n).fits(r, c.scratch) {
					found = true
					break
				}
			}
			if found {
				out[r.shape()] = at
			} else {
				kept = append(kept, r)
			}
		}
		open = kept
	}
	return out
}

const estimateBudget = 4 << 20 // node checks per cycle
