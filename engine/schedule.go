package engine

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Schedule runs one scheduling cycle. It is a pure function: no I/O, no
// goroutines, no clock reads; its randomness comes from snap.Seed; the same
// (st, snap) gives an identical Plan and State; neither input is modified.
//
// The cycle (doc.go has the formulas):
//
//  1. Validate the pending jobs; bring usage up to snap.Now (decay, then
//     charge running jobs); compute the fair-share factors (fairshare.go).
//  2. Compute each job's priority and sort each account's queue once
//     (queue.go); gang members form one entry.
//  3. Interleave the accounts with the selection algorithm into one order
//     (fairshare.go).
//  4. Walk the order: check deadline, quota and share cap; place the entry
//     on the best node of its strategy through the node index (binpack.go).
//     A job that fits nowhere may evict lower running jobs, if preemption
//     is on, and is then placed on the node freed (preempt.go). The first
//     entry that does not fit gets a reservation; later entries may start
//     only if they do not delay it (EASY backfill, backfill.go).
//  5. Explain every pending job and estimate start times (explain.go);
//     return the plan and the next State (state.go).
func Schedule(st State, snap Snapshot) (Plan, State) {
	return ScheduleEach(st, snap, nil)
}

// ScheduleEach is Schedule that hands each pending job's explanation, and
// its rejection when it was not placed (else nil), to each as they are
// made, in the order Plan.Explanations would hold them; it leaves
// Plan.Explanations and Plan.Rejected nil. With a nil each it is Schedule.
// The plan is otherwise the same. The pointers are valid only during the
// call: a caller keeps what it needs in its own form, so that a deep
// queue's plan does not hold a second copy of every explanation and
// rejection (about 270 bytes a pending job at the plan's peak).
func ScheduleEach(st State, snap Snapshot, each func(*Explanation, *Rejection)) (Plan, State) {
	c := newCycle(st, &snap)
	c.sink = each
	c.validate()
	c.accrue()
	c.buildEntries()
	c.orderEntries()
	c.place()
	c.explain()
	c.commit()
	return c.plan, c.state
}

// outcome is what happened to one pending job.
type outcome struct {
	node   int32 // when placed
	pos    int32
	rej    int32 // why not placed: an index in cycle.rejs (0 = none)
	placed bool
	set    bool
}

// placed is a placement made this cycle, kept for reservations and undo.
type placed struct {
	ji   int
	node int
	pk   picks
	end  time.Time
}

type cycle struct {
	snap  *Snapshot
	p     Policy
	now   time.Time
	in    State
	state State
	plan  Plan

	nodes  []nodeWork
	byName map[string]int
	ix     *nodeIndex
	total  Resources // cluster capacity, for DRF and the share cap

	shapes  []jobReq // the distinct requests of the pending jobs
	reqOf   []int32  // pending index → its request in shapes (see req)
	acctOf  []int
	prio    []float64
	factors []Factors
	out     []outcome
	// rejs are the cycle's distinct rejections, without job IDs, for
	// outcome.rej: the jobs turned down for one reason share it.
	rejs   []Rejection
	rejIdx map[Rejection]int32
	valid  []bool

	as      *accounts
	entries []*entry
	order   []*entry
	sel     *selector

	placements []placed
	resv       *reservation
	resvTries  int
	blocked    bool // NoBackfill: a job is blocked, nothing after it starts

	failShape  map[shapeKey]*Rejection // shapes known not to fit anywhere this cycle
	failVecs   []Resources             // plain requests known not to fit (dominance check)
	analyzed   map[shapeKey]*Rejection // per-shape failure analysis
	scratch    []int
	entryIdx   []*entry         // pending index → its entry (nil: invalid)
	resvEntry  *entry           // the reservation holder's entry (explain)
	cursor     map[shapeKey]int // where the last search for a shape ended (next-fit start)
	trial      bool             // placing the second or later member of a gang: failures are not cached
	resvFound  bool
	sink       func(*Explanation, *Rejection) // ScheduleEach's each; nil = into Plan.Explanations and Rejected
	gangStart  map[int]time.Time              // a quota-held gang's first member → its estimated start (explain)
	quotaEvs   []release                      // the releases, for quota estimates (explain)
	quotaEst   map[quotaKey]time.Time
	quotaSteps int // work spent on quota estimates (budget: estimateBudget)

	pre       *preemptState    // preemption bookkeeping; nil until a job may preempt (preempt.go)
	preempted map[int][]string // pending index → the jobs evicted for it
}

func newCycle(st State, snap *Snapshot) *cycle {
	c := &cycle{snap: snap, p: snap.Policy.withDefaults(), now: snap.Now, in: st}
	c.state = st.Clone()
	c.state.Version = StateVersion
	if c.state.Accounts == nil {
		c.state.Accounts = map[string]AccountState{}
	}
	c.plan = Plan{Seed: snap.Seed, Now: snap.Now}
	c.nodes = make([]nodeWork, len(snap.Nodes))
	c.byName = make(map[string]int, len(snap.Nodes))
	order := make([]int, len(snap.Nodes))
	for i := range order {
		order[i] = i
	}
	// Index order: by name, so first-fit and ties are stable.
	slices.SortStableFunc(order, func(a, b int) int {
		return compareStrings(snap.Nodes[a].Name, snap.Nodes[b].Name)
	})
	for k, i := range order {
		n := &snap.Nodes[i]
		c.nodes[k] = newNodeWork(n)
		if _, dup := c.byName[n.Name]; !dup {
			c.byName[n.Name] = k
		} else {
			c.nodes[k].healthy = false // a duplicate name cannot be addressed
		}
		if !n.Unhealthy {
			c.total = c.total.Add(n.Capacity)
		}
	}
	c.ix = newNodeIndex(c.nodes, c.p.MIGSlices)
	c.failShape = map[shapeKey]*Rejection{}
	c.analyzed = map[shapeKey]*Rejection{}
	c.cursor = map[shapeKey]int{}
	c.scratch = make([]int, 0, 64)
	return c
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// validate marks malformed jobs; they are rejected as final and take no
// part in the order.
func (c *cycle) validate() {
	pend := c.snap.Pending
	n := len(pend)
	c.reqOf = make([]int32, n)
	shapeIdx := map[shapeKey]int32{}
	c.valid = make([]bool, n)
	c.out = make([]outcome, n)
	c.rejs = []Rejection{{}}
	// Duplicate IDs: a pending list in ID order (the adapter's) has its
	// duplicates side by side, and needs no set of every ID.
	byID := true
	for i := 1; i < n && byID; i++ {
		byID = pend[i-1].ID <= pend[i].ID
	}
	var seen map[string]bool
	if !byID {
		seen = make(map[string]bool, n)
	}
	gangCount := map[string]int{}
	for i := range pend {
		if pend[i].GangID != "" {
			gangCount[pend[i].GangID]++
		}
	}
	for i := range pend {
		j := &pend[i]
		c.reqOf[i] = c.internReq(shapeIdx, j, i)
		msg := ""
		switch {
		case j.ID == "":
			msg = "empty job ID"
		case byID && i > 0 && pend[i-1].ID == j.ID, seen[j.ID]:
			msg = "duplicate job ID"
		case j.Priority < 0 || j.Priority > 9:
			msg = fmt.Sprintf("priority %d outside 0..9", j.Priority)
		case j.StorageTier != "" && !validTier(j.StorageTier):
			msg = fmt.Sprintf("unknown storage tier %q", j.StorageTier)
		case j.Strategy != "" && !validStrategy(j.Strategy):
			msg = fmt.Sprintf("unknown strategy %q", j.Strategy)
		case j.GangID != "" && j.GangSize < 1:
			msg = "gang without a size"
		case j.GangID != "" && gangCount[j.GangID] > j.GangSize:
			msg = fmt.Sprintf("gang %s has %d pending members, more than its size %d", j.GangID, gangCount[j.GangID], j.GangSize)
		case j.EstDuration < 0:
			msg = "negative estimated duration"
		case j.TimeLimit < 0:
			msg = "negative time limit"
		}
		for d, v := range j.Request {
			if v < 0 && msg == "" {
				msg = fmt.Sprintf("negative %s", Dim(d))
			}
		}
		if !byID {
			seen[j.ID] = true
		}
		if msg != "" {
			c.out[i] = outcome{set: true, rej: c.addRej(reject("", ReasonInvalid, true, "%s", msg))}
			continue
		}
		c.valid[i] = true
	}
}

// internReq returns the index in c.shapes of job j's request, added when
// new. A deep queue is mostly a few shapes many times over: one jobReq
// (152 bytes) per shape, not per job. The job before j is compared first,
// so that a run of one shape costs no hashing.
func (c *cycle) internReq(idx map[shapeKey]int32, j *Job, i int) int32 {
	r := newJobReq(j)
	k := r.shape()
	if i > 0 {
		if p := c.reqOf[i-1]; c.shapes[p].shape() == k {
			return p
		}
	}
	if at, ok := idx[k]; ok {
		return at
	}
	at := int32(len(c.shapes))
	c.shapes = append(c.shapes, r)
	idx[k] = at
	return at
}

// req is pending job i's request. Jobs of one shape share it: it is never
// changed once made.
func (c *cycle) req(i int) *jobReq { return &c.shapes[c.reqOf[i]] }

func validTier(t string) bool { _, ok := TierDim(t); return ok }

func (c *cycle) accountName(j *Job) string {
	if j.Account == "" {
		return c.p.DefaultAccount
	}
	return j.Account
}

// accrue brings every account's usage to Now: decay, then the decayed
// integral of each running (or recently ended) job's billing rate since the
// last cycle. It builds the account table and the fair-share factors.
func (c *cycle) accrue() {
	h := c.p.HalfLife
	usage := make(map[string]float64, len(c.state.Accounts))
	for name, a := range c.state.Accounts {
		if c.now.After(a.UsageAt) && !a.UsageAt.IsZero() {
			a.Usage = decay(a.Usage, c.now.Sub(a.UsageAt), h)
		}
		if c.now.After(a.UsageAt) {
			a.UsageAt = c.now
		}
		c.state.Accounts[name] = a
	}
	from := c.in.LastNow
	extra := make([]string, 0, 32)
	for i := range c.snap.Running {
		r := &c.snap.Running[i]
		name := c.accountName(&r.Job)
		extra = append(extra, name)
		a := r.Started
		if from.After(a) {
			a = from
		}
		b := c.now
		if !r.Ended.IsZero() && r.Ended.Before(b) {
			b = r.Ended
		}
		req := newJobReq(&r.Job)
		u := accrued(c.p.billingRate(&req), a, b, c.now, h)
		if u > 0 {
			as := c.state.Accounts[name]
			as.Usage += u
			as.UsageAt = c.now
			c.state.Accounts[name] = as
		}
	}
	// buildAccounts takes each name once, in any order: each account of
	// the pending jobs is added once (not a name per pending job).
	named := map[string]bool{}
	for i := range c.snap.Pending {
		if n := c.accountName(&c.snap.Pending[i]); !named[n] {
			named[n] = true
			extra = append(extra, n)
		}
	}
	for name, a := range c.state.Accounts {
		usage[name] = a.Usage
	}
	c.as = buildAccounts(c.snap.Accounts, extra, usage, c.p.DefaultShares)
	if c.p.FairShareMode == FairShareEffectivePriority {
		c.as.effectivePriorityFactors()
	}
	// Allocation of running jobs, for quotas, guarantees and DRF; for
	// proportional, the work they have still to run.
	for i := range c.snap.Running {
		r := &c.snap.Running[i]
		if !r.Ended.IsZero() && !r.Ended.After(c.now) {
			continue
		}
		req := newJobReq(&r.Job)
		a := c.as.lookup(c.accountName(&r.Job))
		c.addAlloc(a, req.vec, true)
		if c.p.Selection == SelectProportional {
			if left := r.Started.Add(c.p.expected(&r.Job)).Sub(c.now); left > 0 {
				rem := c.p.billingRate(&req) * left.Seconds()
				for i := a; i >= 0; i = c.as.list[i].parent {
					c.as.list[i].remaining += rem
				}
			}
		}
	}
	for i := range c.as.list {
		a := &c.as.list[i]
		a.alloc0, a.own0 = a.alloc, a.ownAlloc
	}
}

// addAlloc adds v to account a's allocation (and its ancestors'); ordering
// also updates the ordering copies.
func (c *cycle) addAlloc(a int, v Resources, ordering bool) {
	if a < 0 {
		return
	}
	c.as.list[a].ownAlloc = c.as.list[a].ownAlloc.Add(v)
	if ordering {
		c.as.list[a].oOwn = c.as.list[a].oOwn.Add(v)
	}
	for i := a; i >= 0; i = c.as.list[i].parent {
		c.as.list[i].alloc = c.as.list[i].alloc.Add(v)
		if ordering {
			c.as.list[i].oAlloc = c.as.list[i].oAlloc.Add(v)
		}
	}
}

// buildEntries computes priorities and forms the per-account queues.
func (c *cycle) buildEntries() {
	pend := c.snap.Pending
	c.acctOf = make([]int, len(pend))
	c.prio = make([]float64, len(pend))
	c.factors = make([]Factors, len(pend))
	// One allocation for every entry and one for their member lists, not
	// two per job (a full plan over 10,000 jobs made 20,000): entries
	// point into slab, which never grows past its capacity (at most one
	// entry per job), and a job's one-member list is members[i:i+1], with
	// its capacity cut there so that a gang's append copies it out.
	slab := make([]entry, 0, len(pend))
	members := make([]int, len(pend))
	c.entries = make([]*entry, 0, len(pend))
	gangs := map[string]*entry{}
	for i := range pend {
		j := &pend[i]
		a := c.as.lookup(c.accountName(j))
		c.acctOf[i] = a
		c.prio[i], c.factors[i] = priority(j, c.now, &c.p, c.as.list[a].Factor)
		if !c.valid[i] {
			continue
		}
		r := c.req(i)
		cost := c.p.billingRate(r) * c.p.duration(j).Seconds()
		if j.GangID != "" {
			if g, ok := gangs[j.GangID]; ok {
				g.jobs = append(g.jobs, i)
				g.cost += cost
				sum := g.use.Add(r.vec)
				g.use = &sum
				continue
			}
		}
		members[i] = i
		slab = append(slab, entry{jobs: members[i : i+1 : i+1], acct: a, cost: cost, use: &r.vec})
		e := &slab[len(slab)-1]
		if j.GangID != "" {
			gangs[j.GangID] = e
		}
		c.entries = append(c.entries, e)
	}
	for _, e := range c.entries {
		// A gang takes its account and sort keys from its best member.
		best := e.jobs[0]
		e.submitted = pend[best].Submitted
		for _, i := range e.jobs[1:] {
			if c.prio[i] > c.prio[best] || c.prio[i] == c.prio[best] && pend[i].ID < pend[best].ID {
				best = i
			}
			if pend[i].Submitted.Before(e.submitted) {
				e.submitted = pend[i].Submitted
			}
		}
		slices.SortFunc(e.jobs, func(a, b int) int { return compareStrings(pend[a].ID, pend[b].ID) })
		e.acct = c.acctOf[best]
		e.prio = c.prio[best]
		e.hasDeadline = c.factors[best].HasDeadline
		e.band = bandOf(e.prio, c.p.Band)
		if c.p.DeadlineOrder == EarliestDeadlineFirst {
			e.dkey = pend[best].Deadline.UnixNano()
		} else {
			e.dkey = int64(c.factors[best].Slack)
		}
		e.id = pend[e.jobs[0]].ID
		c.as.list[e.acct].queue = append(c.as.list[e.acct].queue, e)
	}
	for i := range c.as.list {
		slices.SortFunc(c.as.list[i].queue, compareEntries)
	}
}

// orderEntries interleaves the account queues into the cycle's order.
func (c *cycle) orderEntries() {
	c.sel = c.newSelector(&c.in)
	c.order = make([]*entry, 0, len(c.entries))
	for {
		a := c.sel.next()
		if a < 0 {
			break
		}
		c.order = append(c.order, c.sel.charge(a))
	}
	pos := 0
	for _, e := range c.order {
		for _, i := range e.jobs {
			pos++
			c.out[i].pos = int32(pos)
		}
	}
}

// newSelector starts a selector from the scheduling memory in st.
func (c *cycle) newSelector(st *State) *selector {
	s := &selector{p: &c.p, as: c.as, capacity: c.total, v0: st.VirtualTime, v: st.VirtualTime, maxS: c.as.maxShare()}
	s.rng = rand.New(rand.NewPCG(c.snap.Seed, 0x636f6d7075746562)) // "computeb"
	for i := range c.as.list {
		a := &c.as.list[i]
		a.head, a.charged = 0, 0
		a.oAlloc, a.oOwn = a.alloc0, a.own0
		prev := st.Accounts[a.Name]
		a.finish, a.deficit, a.comp = prev.Finish, prev.Deficit, prev.Compensation
		if len(a.queue) == 0 {
			a.deficit = 0 // DRR: an idle queue keeps no credit
		}
	}
	if i := c.as.lookup(st.DRRNext); i >= 0 {
		s.drr, s.full = i, st.DRRCredited
	}
	return s
}

// commit stores the decayed usage and what the selection algorithm learns
// from the entries actually placed (the order charged every entry as if
// dispatched; only real dispatches may move the scheduling memory):
//
//   - wfq: each account's finish tag advances over its placed entries, in
//     queue order; V then moves to the smallest start tag among the
//     accounts still waiting for capacity (in the top class), never past it
//     (see wfqVirtualTime);
//   - drr: the order is replayed from the cycle's starting State, charging
//     the placed entries and passing over the others without charge, until
//     the last placed one: every account waiting for capacity meanwhile
//     receives its quanta for the rounds that went by and keeps its credit;
//     the pointer stays where the replay stopped, with whether that account
//     has had its quantum for the visit, so an account whose credit covers
//     more than this cycle's placements goes on next cycle. Deficits are
//     then bounded by a quantum plus one entry (boundDeficits); an account
//     with nothing left waiting for capacity keeps none;
//   - lottery: the compensation of an account's last placed entry.
func (c *cycle) commit() {
	s := c.newSelector(&c.in)
	placed := func(e *entry) bool { return c.out[e.jobs[0]].placed }
	nPlaced := 0
	for _, e := range c.order {
		if placed(e) {
			nPlaced++
		} else if waitsForCapacity(c.rejOf(e.jobs[0]).Reason) {
			// Waiting on its own quota, share cap or gang, or dropped,
			// earns no credit: like an idle queue.
			c.as.list[e.acct].waiting = true
		}
	}
	switch c.p.Selection {
	case SelectWFQ, SelectLottery:
		for a := range c.as.list {
			for _, e := range c.as.list[a].queue {
				if placed(e) {
					s.dispatched(a, e)
				}
			}
		}
	case SelectDRR:
		// Terminates: every step takes one entry off a queue, and a
		// placed entry is left while n > 0.
		for n := nPlaced; n > 0; {
			a := s.next()
			if a < 0 {
				break
			}
			if e := s.head(a); placed(e) {
				s.charge(a)
				n--
			} else {
				s.pass(a)
			}
		}
		s.boundDeficits()
	}
	for i := range c.as.list {
		a := &c.as.list[i]
		as := c.state.Accounts[a.Name]
		as.Finish, as.Compensation, as.Deficit = a.finish, a.comp, a.deficit
		if !a.waiting {
			as.Deficit = 0 // DRR: nothing left waiting for capacity, no credit kept
		}
		if as.UsageAt.IsZero() || c.now.After(as.UsageAt) {
			as.UsageAt = c.now
		}
		if as == (AccountState{UsageAt: as.UsageAt}) && as.Usage == 0 {
			delete(c.state.Accounts, a.Name)
			continue
		}
		c.state.Accounts[a.Name] = as
	}
	// Forget accounts whose usage has decayed to nothing.
	for name, as := range c.state.Accounts {
		if as.Usage < 1e-9 && as.Finish == 0 && as.Deficit == 0 && as.Compensation == 0 {
			delete(c.state.Accounts, name)
		}
	}
	c.state.VirtualTime = c.in.VirtualTime
	if c.p.Selection == SelectWFQ {
		c.state.VirtualTime = c.wfqVirtualTime(s)
	}
	c.state.DRRNext, c.state.DRRCredited = "", false
	if c.p.Selection == SelectDRR && len(c.as.list) > 0 {
		// The pointer stays on the account being served: with its quantum
		// already added, it goes on next cycle while its deficit covers its
		// head. (Moving on here gave every account one job per cycle in
		// turn whenever jobs cost less than a quantum and one slot freed per
		// cycle: 1:1:1 whatever the shares, and unbounded deficits.)
		c.state.DRRNext, c.state.DRRCredited = c.as.list[s.drr].Name, s.full
	}
	c.prunePreemptions()
	if c.now.After(c.state.LastNow) {
		c.state.LastNow = c.now
	}
	if len(c.state.Accounts) == 0 {
		c.state.Accounts = nil
	}
}

// wfqVirtualTime is V for the next cycle, after the placed entries moved
// the finish tags. Start-time fair queuing keeps V at the start tag of the
// request in service, which is never above the start tag of a waiting
// flow; the next cycle starts every account at max(finish, V), so a V above
// a waiting account's finish tag would take away credit it earned while
// waiting (with one slot freeing per cycle the account with the largest
// share would then win every cycle). So V is the smallest next start tag,
// max(finish, V0), among the accounts whose first entry still waiting for
// capacity is in the top class (guaranteed, then band) of those waiting;
// accounts that wait only on their own quota, share cap or gang, or in a
// lower class, could not be served and earn no credit. When nothing waits
// for capacity, V is the largest start tag placed (every account is
// served; as before, an account that was idle or light gains nothing over
// one that ran). V never moves back.
func (c *cycle) wfqVirtualTime(s *selector) float64 {
	v0 := c.in.VirtualTime
	first := make([]*entry, len(c.as.list))
	var top *entry
	for _, e := range c.order {
		o := &c.out[e.jobs[0]]
		if o.placed || first[e.acct] != nil || !waitsForCapacity(c.rejs[o.rej].Reason) {
			continue
		}
		first[e.acct] = e
		if top == nil || higherClass(e, top) {
			top = e
		}
	}
	if top == nil {
		return max(v0, s.v)
	}
	v := math.Inf(1)
	for a, e := range first {
		if e != nil && !higherClass(top, e) {
			v = min(v, max(c.as.list[a].finish, v0))
		}
	}
	return max(v0, v)
}

// higherClass reports whether entry a is in a higher selection class than
// b: within the guaranteed minimum first, then the higher band.
func higherClass(a, b *entry) bool {
	if a.guaranteed != b.guaranteed {
		return a.guaranteed
	}
	return a.band > b.band
}

// waitsForCapacity reports whether a job not placed for reason r waits for
// room on the nodes (rather than on its account's limits, its gang, or
// nothing at all).
func waitsForCapacity(r Code) bool {
	switch r {
	case ReasonNoFit, ReasonGangNoFit, ReasonReserved, ReasonBackfillBlocked, ReasonBlocked:
		return true
	}
	return false
}

// place walks the order and places what fits (step 4).
func (c *cycle) place() {
	for _, e := range c.order {
		if rej, ok := c.admit(e); !ok {
			c.rejectEntry(e, rej)
			continue
		}
		if c.blocked {
			c.rejectEntry(e, reject("", ReasonBlocked, false, "a higher job is blocked and backfill is off"))
			continue
		}
		rej, ok := c.placeEntry(e)
		if ok {
			continue
		}
		if c.mayPreempt(e, rej) && c.preempt(e) {
			continue
		}
		if rej.Reason == ReasonNoFit || rej.Reason == ReasonGangNoFit {
			if c.p.NoBackfill {
				c.blocked = true
			} else if c.resv == nil && c.resvTries < 8 {
				c.resvTries++
				if c.resv = c.reserve(e); c.resv != nil {
					rej.Reason = ReasonReserved
					rej.Message = fmt.Sprintf("holds the reservation from %s on %v; %s", c.resv.start.Format(time.RFC3339), c.resv.names, rej.Message)
				}
			}
		}
		c.rejectEntry(e, rej)
	}
}

// admit applies the checks that do not depend on nodes: deadline, gang
// completeness, quota, share cap.
func (c *cycle) admit(e *entry) (Rejection, bool) {
	pend := c.snap.Pending
	for _, i := range e.jobs {
		if c.factors[i].DeadlineMiss && c.p.DeadlineAction == DeadlineReject {
			j := &pend[i]
			return reject("", ReasonDeadlineInfeasible, true, "deadline %s cannot be met: slack %s", j.Deadline.Format(time.RFC3339), c.factors[i].Slack), false
		}
	}
	if first := &pend[e.jobs[0]]; first.GangID != "" && len(e.jobs) < first.GangSize {
		return reject("", ReasonGangIncomplete, false, "gang %s: %d of %d members pending", first.GangID, len(e.jobs), first.GangSize), false
	}
	for a := e.acct; a >= 0; a = c.as.list[a].parent {
		ac := &c.as.list[a]
		for d := range NumDims {
			q := ac.quota[d]
			if q == 0 {
				continue
			}
			if e.use[d] > q {
				return reject("", ReasonQuota, true, "account %s: request %s %d exceeds the quota %d", ac.Name, Dim(d), e.use[d], q), false
			}
			if ac.alloc[d]+e.use[d] > q {
				return reject("", ReasonQuota, false, "account %s: %s %d in use + %d requested > quota %d", ac.Name, Dim(d), ac.alloc[d], e.use[d], q), false
			}
		}
	}
	if c.p.ShareCap > 0 {
		ac := &c.as.list[e.acct]
		if ds := dominantShare(ac.alloc, c.total); ds > c.p.ShareCap*ac.NormShares {
			return reject("", ReasonOverShare, false, "account %s holds dominant share %.3f > cap %.3g × share %.3f", ac.Name, ds, c.p.ShareCap, ac.NormShares), false
		}
	}
	return Rejection{}, true
}

func (c *cycle) rejectEntry(e *entry, rej Rejection) {
	k := c.addRej(rej)
	for _, i := range e.jobs {
		c.out[i].set = true
		c.out[i].rej = k
	}
}

// addRej returns rej's index in c.rejs, added when new: a deep queue's
// jobs are turned down for a few reasons, many times over.
func (c *cycle) addRej(rej Rejection) int32 {
	rej.JobID = ""
	if k, ok := c.rejIdx[rej]; ok {
		return k
	}
	if c.rejIdx == nil {
		c.rejIdx = map[Rejection]int32{}
	}
	k := int32(len(c.rejs))
	c.rejs = append(c.rejs, rej)
	c.rejIdx[rej] = k
	return k
}

// rejOf is why pending job i was not placed, without its ID (zero: not
// placed for no recorded reason, or placed).
func (c *cycle) rejOf(i int) *Rejection { return &c.rejs[c.out[i].rej] }

// placeEntry places a single job or a whole gang; on failure nothing stays
// allocated.
func (c *cycle) placeEntry(e *entry) (Rejection, bool) {
	mark := len(c.placements)
	var undo []nodeWork
	var undoIdx []int
	for _, i := range e.jobs {
		j := &c.snap.Pending[i]
		r := c.req(i)
		end := c.now.Add(c.p.latest(j))
		if j.EstDuration == 0 && j.TimeLimit == 0 {
			end = farFuture // unknown duration, no limit: never "ends before" a reservation
		}
		n, rej := c.findNode(r, c.p.strategyFor(j), end)
		if n < 0 {
			c.trial = false
			// Roll back the members placed so far.
			for k := len(undo) - 1; k >= 0; k-- {
				c.nodes[undoIdx[k]] = undo[k]
				c.ix.update(undoIdx[k], &c.nodes[undoIdx[k]])
			}
			for _, pl := range c.placements[mark:] {
				c.out[pl.ji] = outcome{pos: c.out[pl.ji].pos}
			}
			c.placements = c.placements[:mark]
			if len(e.jobs) > 1 {
				if !rej.Final {
					rej.Reason = ReasonGangNoFit
				}
				rej.Message = fmt.Sprintf("member %s: %s", j.ID, rej.Message)
			}
			return rej, false
		}
		if len(e.jobs) > 1 {
			undo = append(undo, c.nodes[n].clone())
			undoIdx = append(undoIdx, n)
			c.trial = true
		}
		c.take(i, n, end)
	}
	c.trial = false
	for _, i := range e.jobs {
		c.addAlloc(c.acctOf[i], c.req(i).vec, false)
	}
	return Rejection{}, true
}

var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// take allocates job i on node n.
func (c *cycle) take(i, n int, end time.Time) {
	r := c.req(i)
	nw := &c.nodes[n]
	var pk picks
	if c.resv != nil && end.After(c.resv.start) {
		if rn := c.resv.nodes[n]; rn != nil {
			v := rn.view(nw)
			pk = v.pick(r)
			rn.extra = rn.extra.Sub(r.vec)
		} else {
			pk = nw.pick(r)
		}
	} else {
		pk = nw.pick(r)
	}
	nw.apply(r, pk)
	c.ix.update(n, nw)
	c.placements = append(c.placements, placed{ji: i, node: n, pk: pk, end: end})
	c.out[i].placed = true
	c.out[i].node = int32(n)
	c.out[i].set = true
}

// findNode returns the node for r by strategy s, or -1 and why not.
func (c *cycle) findNode(r *jobReq, s Strategy, end time.Time) (int, Rejection) {
	key := r.shape()
	if rej, ok := c.failShape[key]; ok {
		return -1, *rej
	}
	plain := r.nGPU == 0 && r.nMIG == 0 && r.model == "" && !r.numa && len(r.selector) == 0
	if plain {
		for _, v := range c.failVecs {
			if v.Fits(r.vec) {
				return -1, *c.analyze(r)
			}
		}
	}
	long := c.resv != nil && end.After(c.resv.start)
	fits := func(i int) bool {
		nw := &c.nodes[i]
		if !nw.fits(r, c.scratch) {
			return false
		}
		if long {
			if rn := c.resv.nodes[i]; rn != nil {
				v := rn.view(nw)
				return v.fits(r, c.scratch)
			}
		}
		return true
	}
	best := -1
	if s == Balanced {
		var cands []int
		c.ix.search(r, WorstFit, c.cursor[key], fits, func(i int) bool {
			cands = append(cands, i)
			return len(cands) >= balancedCandidates
		})
		bestScore := 0.0
		for _, i := range cands {
			sc := balanceScore(&c.nodes[i], r)
			if best < 0 || sc < bestScore {
				best, bestScore = i, sc
			}
		}
	} else {
		c.ix.search(r, s, c.cursor[key], fits, func(i int) bool { best = i; return true })
	}
	if best >= 0 {
		c.cursor[key] = best
		return best, Rejection{}
	}
	// Blocked only by the reservation?
	if long {
		for _, i := range slices.Sorted(maps.Keys(c.resv.nodes)) {
			if c.nodes[i].fits(r, c.scratch) {
				rej := reject("", ReasonBackfillBlocked, false, "fits on %s now but would delay %s, reserved from %s", c.nodes[i].node.Name, c.resv.jobID, c.resv.start.Format(time.RFC3339))
				return -1, rej
			}
		}
	}
	rej := c.analyze(r)
	if !c.trial {
		c.failShape[key] = rej
		if plain && len(c.failVecs) < 32 {
			c.failVecs = append(c.failVecs, r.vec)
		}
	}
	return -1, *rej
}

const balancedCandidates = 16

// balanceScore is the variance of the node's utilisation fractions over its
// dimensions with capacity, after placing r; lower is more balanced.
func balanceScore(nw *nodeWork, r *jobReq) float64 {
	var sum, sq float64
	n := 0
	for d := range NumDims {
		cp := nw.node.Capacity[d]
		if cp <= 0 {
			continue
		}
		u := float64(cp-nw.free[d]+r.vec[d]) / float64(cp)
		sum += u
		sq += u * u
		n++
	}
	if n == 0 {
		return 0
	}
	m := sum / float64(n)
	return sq/float64(n) - m*m
}
