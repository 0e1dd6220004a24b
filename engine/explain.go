package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
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
}

// Factors are the terms of the priority formula for one job, before weights
// (except where noted).
type Factors struct {
	Level        int           // Job.Priority, 0..9
	AgeHours     float64       // hours waited
	Age          float64       // age term in levels: min(rate·hours, MaxAge)
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
		p.Backfilled = c.resv != nil && c.out[pl.ji].pos > resvPos
		c.plan.Placements = append(c.plan.Placements, p)
	}
	// Jobs in order position; jobs outside the order (invalid) last, in input order.
	idx := make([]int, len(pend))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		pa, pb := c.out[a].pos, c.out[b].pos
		if pa == 0 {
			pa = math.MaxInt
		}
		if pb == 0 {
			pb = math.MaxInt
		}
		return cmp.Compare(pa, pb)
	})
	var want []*jobReq
	for i := range pend {
		o := &c.out[i]
		if !o.placed && !o.rej.Final && pend[i].GangID == "" && c.valid[i] {
			want = append(want, &c.reqs[i])
		}
	}
	est := c.estimates(want)
	c.plan.Explanations = make([]Explanation, 0, len(pend))
	for _, i := range idx {
		o := &c.out[i]
		j := &pend[i]
		ex := Explanation{
			JobID:    j.ID,
			Account:  c.accountName(j),
			Position: o.pos,
			Priority: c.prio[i],
			Factors:  c.factors[i],
		}
		if e := c.entryOf(i); e != nil {
			ex.Factors.Guaranteed = e.f.Guaranteed
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
		default:
			rej := o.rej
			if !o.set {
				rej = reject(j.ID, ReasonNoFit, false, "not considered")
			}
			c.plan.Rejected = append(c.plan.Rejected, rej)
			ex.Reason, ex.Message = rej.Reason, rej.Message
			if ex.Factors.DeadlineMiss && rej.Reason != ReasonDeadlineInfeasible {
				ex.Message += fmt.Sprintf("; deadline %s cannot be met (slack %s)", j.Deadline.Format(time.RFC3339), ex.Factors.Slack)
			}
			switch {
			case rej.Final:
			case c.resv != nil && c.resvHolds(i):
				ex.EstStart = resvStart
			case j.GangID == "":
				ex.EstStart = est[c.reqs[i].shape()]
			}
		}
		c.plan.Explanations = append(c.plan.Explanations, ex)
	}
}

func (c *cycle) posOf(id string) int {
	for _, e := range c.order {
		if c.snap.Pending[e.jobs[0]].ID == id {
			return c.out[e.jobs[0]].pos
		}
	}
	return 0
}

func (c *cycle) resvHolds(i int) bool {
	e := c.entryOf(i)
	return e != nil && c.snap.Pending[e.jobs[0]].ID == c.resv.jobID
}

func (c *cycle) entryOf(i int) *entry {
	if c.entryIdx == nil {
		c.entryIdx = make(map[int]*entry, len(c.snap.Pending))
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
// node checks per cycle (zero time = unknown).
func (c *cycle) estimates(want []*jobReq) map[shapeKey]time.Time {
	out := map[shapeKey]time.Time{}
	if c.p.MaxEstimates < 0 {
		return out
	}
	var open []*jobReq
	seen := map[shapeKey]bool{}
	for _, r := range want {
		k := r.shape()
		if !seen[k] && len(open) < c.p.MaxEstimates {
			seen[k] = true
			open = append(open, r)
		}
	}
	if len(open) == 0 {
		return out
	}
	evs := c.releases()
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
