package engine

import (
	"cmp"
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
	Reason   Code      `json:",omitempty"` // when not placed
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
	est := c.newEstimator()
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
		default:
			rej := o.rej
			if !o.set {
				rej = reject(j.ID, ReasonNoFit, false, "not considered")
			}
			c.plan.Rejected = append(c.plan.Rejected, rej)
			ex.Reason, ex.Message = rej.Reason, rej.Message
			switch {
			case rej.Final:
			case c.resv != nil && c.resvHolds(i):
				ex.EstStart = resvStart
			case j.GangID == "":
				ex.EstStart = est.start(&c.reqs[i])
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

// estimator gives the earliest time a request fits on some node by the
// estimated ends of running and just-placed jobs, ignoring the queue ahead
// of it: a lower bound on its start. One walk per distinct shape, up to
// Policy.MaxEstimates shapes and a total budget of release steps.
type estimator struct {
	c      *cycle
	evs    []release
	cache  map[shapeKey]time.Time
	budget int
}

const estimateBudget = 4 << 20 // release steps per cycle

func (c *cycle) newEstimator() *estimator {
	return &estimator{c: c, cache: map[shapeKey]time.Time{}, budget: estimateBudget}
}

func (es *estimator) start(r *jobReq) time.Time {
	key := r.shape()
	if t, ok := es.cache[key]; ok {
		return t
	}
	if es.c.p.MaxEstimates < 0 || len(es.cache) >= es.c.p.MaxEstimates || es.budget <= 0 {
		return time.Time{}
	}
	if es.evs == nil {
		es.evs = es.c.releases()
	}
	fut := &future{c: es.c, touched: map[int]*nodeWork{}}
	var t time.Time
walk:
	for k := 0; k < len(es.evs) && es.budget > 0; {
		at, b := es.evs[k].t, k
		for ; k < len(es.evs) && es.evs[k].t.Equal(at); k++ {
			ev := &es.evs[k]
			fut.node(ev.node).release(ev.vec, ev.pk)
		}
		es.budget -= k - b
		for m := b; m < k; m++ {
			if fut.get(es.evs[m].node).fits(r, es.c.scratch) {
				t = at
				break walk
			}
		}
	}
	es.cache[key] = t
	return t
}
