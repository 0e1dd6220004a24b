package engine

import (
	"cmp"
	"slices"
	"time"
)

// This file is the EASY-backfill half of step 4. When the first entry in
// the order does not fit, it gets a reservation: the earliest time T at which,
// by the estimated ends of running jobs and of jobs placed earlier in this
// cycle, it fits, and the nodes and devices it would take then. A later job
// K may start now only if
//
//	now + est(K) ≤ T, or
//	on every reserved node it uses, K fits in extra = free_at_T − reserved
//	and avoids the reserved devices
//
// so K never delays the reserved job (by estimates). Running jobs whose
// estimated end has passed are expected to end now; jobs with no estimate
// are planned with Policy.DefaultDuration, but a pending job with no estimate
// never counts as ending before T.

type reservation struct {
	jobID string
	start time.Time
	nodes map[int]*resvNode
	names []string
}

// resvNode is what the reservation holds on one node at its start.
type resvNode struct {
	extra   Resources // free at the reservation's start minus the reserved amount
	gpuResv []bool
	migResv [][]bool
	numa    int
}

// view returns the node as a job that would still run at the reservation's
// start may use it: free capped at extra, reserved devices removed.
func (rn *resvNode) view(nw *nodeWork) *nodeWork {
	v := nw.clone()
	for d := range NumDims {
		v.free[d] = min(v.free[d], rn.extra[d])
	}
	for i, r := range rn.gpuResv {
		if r {
			v.gpuFree[i] = false
		}
	}
	for i, m := range rn.migResv {
		for k, r := range m {
			if r {
				v.migFree[i][k] = false
			}
		}
	}
	if rn.numa >= 0 {
		v.numa[rn.numa] = NUMADomain{ID: v.numa[rn.numa].ID}
	}
	return &v
}

// release is one estimated end: resources coming back to a node.
type release struct {
	t    time.Time
	node int
	acct int // the job's account (quota estimates)
	vec  Resources
	pk   picks
	seq  int
}

// releases lists the planned ends of running jobs and of this cycle's
// placements, in time order: with latest, at their time limit when they
// have one (reservations: the latest they can end), else at their expected
// end (estimated starts).
func (c *cycle) releases(latest bool) []release {
	plan := c.p.expected
	if latest {
		plan = c.p.latest
	}
	var evs []release
	for k := range c.snap.Running {
		r := &c.snap.Running[k]
		if !r.Ended.IsZero() && !r.Ended.After(c.now) || c.pre != nil && c.pre.evicted[k] {
			continue
		}
		n, ok := c.byName[r.Node]
		if !ok {
			continue
		}
		end := r.Started.Add(plan(&r.Job))
		if end.Before(c.now) {
			end = c.now
		}
		req := newJobReq(&r.Job)
		evs = append(evs, release{t: end, node: n, acct: c.as.lookup(c.accountName(&r.Job)), vec: req.vec, pk: devicePicks(c.nodes[n].node, r), seq: len(evs)})
	}
	for _, pl := range c.placements {
		j := &c.snap.Pending[pl.ji]
		evs = append(evs, release{t: c.now.Add(plan(j)), node: pl.node, acct: c.acctOf[pl.ji], vec: c.req(pl.ji).vec, pk: pl.pk, seq: len(evs)})
	}
	slices.SortFunc(evs, func(a, b release) int {
		return cmp.Or(a.t.Compare(b.t), cmp.Compare(a.node, b.node), cmp.Compare(a.seq, b.seq))
	})
	return evs
}

// devicePicks maps a running job's GPU and MIG IDs to device indices.
func devicePicks(n *Node, r *Running) picks {
	pk := picks{numa: -1}
	for _, id := range r.GPUs {
		for i := range n.GPUs {
			if n.GPUs[i].ID == id && len(n.GPUs[i].MIG) == 0 {
				pk.gpus = append(pk.gpus, i)
			}
		}
	}
	for _, id := range r.MIG {
		for i := range n.GPUs {
			for k := range n.GPUs[i].MIG {
				if n.GPUs[i].MIG[k].ID == id {
					pk.mig = append(pk.mig, i, k)
				}
			}
		}
	}
	return pk
}

// future is the nodes as they will be after some releases: a copy on write
// over the cycle's nodes.
type future struct {
	c       *cycle
	touched map[int]*nodeWork
}

func (f *future) node(i int) *nodeWork {
	if nw, ok := f.touched[i]; ok {
		return nw
	}
	nw := f.c.nodes[i].clone()
	f.touched[i] = &nw
	return &nw
}

func (f *future) get(i int) *nodeWork {
	if nw, ok := f.touched[i]; ok {
		return nw
	}
	return &f.c.nodes[i]
}

const maxGangChecks = 256

// reserve computes the reservation for e, or nil if no known release lets
// it fit.
func (c *cycle) reserve(e *entry) *reservation {
	evs := c.releases(true)
	fut := &future{c: c, touched: map[int]*nodeWork{}}
	checks := 0
	for k := 0; k < len(evs); {
		t := evs[k].t
		var batch []int
		for ; k < len(evs) && evs[k].t.Equal(t); k++ {
			ev := &evs[k]
			fut.node(ev.node).release(ev.vec, ev.pk)
			if len(batch) == 0 || batch[len(batch)-1] != ev.node {
				batch = append(batch, ev.node)
			}
		}
		if len(e.jobs) == 1 {
			// Only the nodes that just gained resources can newly fit.
			r := c.req(e.jobs[0])
			slices.Sort(batch)
			for _, n := range slices.Compact(batch) {
				nw := fut.get(n)
				if nw.fits(r, c.scratch) {
					return c.makeReservation(e, t, fut, []int{n})
				}
			}
			continue
		}
		if checks++; checks > maxGangChecks {
			return nil
		}
		if nodes := c.gangFits(e, fut); nodes != nil {
			return c.makeReservation(e, t, fut, nodes)
		}
	}
	return nil
}

// gangFits places e's members one by one (first fit) on a scratch copy of
// the future state; it returns the member nodes, or nil.
func (c *cycle) gangFits(e *entry, fut *future) []int {
	trial := map[int]*nodeWork{}
	get := func(i int) *nodeWork {
		if nw, ok := trial[i]; ok {
			return nw
		}
		nw := fut.get(i).clone()
		trial[i] = &nw
		return &nw
	}
	nodes := make([]int, 0, len(e.jobs))
	for _, ji := range e.jobs {
		r := c.req(ji)
		found := -1
		for n := range c.nodes {
			var nw *nodeWork
			if t, ok := trial[n]; ok {
				nw = t
			} else {
				nw = fut.get(n)
			}
			if nw.fits(r, c.scratch) {
				found = n
				break
			}
		}
		if found < 0 {
			return nil
		}
		nw := get(found)
		nw.apply(r, nw.pick(r))
		nodes = append(nodes, found)
	}
	return nodes
}

// makeReservation records, per member node, the devices the members would
// take at t and the extra left beside them.
func (c *cycle) makeReservation(e *entry, t time.Time, fut *future, nodes []int) *reservation {
	rv := &reservation{jobID: c.snap.Pending[e.jobs[0]].ID, start: t, nodes: map[int]*resvNode{}}
	trial := map[int]*nodeWork{}
	for k, ji := range e.jobs {
		n := nodes[k]
		nw, ok := trial[n]
		if !ok {
			cl := fut.get(n).clone()
			nw = &cl
			trial[n] = nw
		}
		r := c.req(ji)
		pk := nw.pick(r)
		nw.apply(r, pk)
		rn := rv.nodes[n]
		if rn == nil {
			rn = &resvNode{numa: -1}
			if len(nw.gpuFree) > 0 {
				rn.gpuResv = make([]bool, len(nw.gpuFree))
			}
			if nw.migFree != nil {
				rn.migResv = make([][]bool, len(nw.migFree))
				for i := range nw.migFree {
					rn.migResv[i] = make([]bool, len(nw.migFree[i]))
				}
			}
			rv.nodes[n] = rn
			rv.names = append(rv.names, nw.node.Name)
		}
		for _, g := range pk.gpus {
			rn.gpuResv[g] = true
		}
		for i := 0; i < len(pk.mig); i += 2 {
			rn.migResv[pk.mig[i]][pk.mig[i+1]] = true
		}
		if pk.numa >= 0 {
			rn.numa = pk.numa
		}
	}
	for n, rn := range rv.nodes {
		rn.extra = trial[n].free
	}
	slices.Sort(rv.names)
	return rv
}
