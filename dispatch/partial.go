package dispatch

import (
	"cmp"
	"iter"
	"slices"

	"github.com/computeboard/computeboard/engine"
)

// Partial plans (issue 10: re-plan only what changed).
//
// When only ends (room freed; s.freed) and new jobs changed the engine's
// input since the last plan, the engine need not order and explain every
// pending job again: only the head of each account's queue can take the
// room. A partial plan gives the engine the head of each account's queue
// as the last full plan ordered it (s.queues) — up to headFitNow() jobs
// that fit now, or headMax jobs, or (at least headRoomMin that fit now)
// as many of those that fit now as overflow the room of every node
// together and one more, or headRoomMin jobs when none of the queue fits
// now, and every job up to the last full plan's reservation holder — and
// the jobs added since that plan that go before the first job left out of
// their account (engine.Ranker). The rest are left out, and not even
// walked.
//
// The engine is pure, so the partial plan is checked before anything of it
// is used, and a full plan replaces it when the check fails
// (partialValidLocked). The check makes the partial plan decide what the
// full plan would: the same placements, on the same nodes, the same
// reservation, and the same State. Why: the engine interleaves the
// accounts' queues into one order with a selector that reads only each
// account's head and its own counters, so up to the first position where
// some account's included jobs run out (the cut), the partial order is the
// full order with the left-out jobs removed — and none of them precedes the
// cut, as each account's included jobs are a prefix of its queue. If every
// placement and the reservation come before the cut, both walks make them
// alike. After the cut the full walk places nothing either: a left-out job
// does not fit the room the placements leave (checked, with the devices
// counted as free: an over-estimate; a queue's left-out jobs are read only
// when that room could take its least request), or is held as a job before
// it was (its account's quota or share cap, or a job no harder that found
// no node: engine.NoEasier); and an included one found the same room and
// the same reservation in the partial walk. What the State keeps follows
// the placed entries, and (WFQ) the first job of each account still
// waiting for capacity, which the check requires among the included ones.
// An account's queue order changes with time only when ageing is capped
// (MaxAge): then the heads are checked against every job left out.
// TestPartialPlanIsTheFullPlan compares every partial plan that passes
// with the full plan on random histories.
//
// Where a partial plan is not attempted: the full re-plan is due
// (FullReplan), anything else changed (s.replan: nodes, a job back in the
// queue, a pending job gone, a gang member), preemption is on, a preemptor
// waits, a pending job has a deadline or is a gang member, the selection is
// DRR (its deficits are bounded by the dearest job of the whole queue),
// backfill is off, fewer than partialMinJobs wait, or too many jobs came
// since the last full plan. A partial plan explains no job: the
// explanations are the last full plan's, and a new job that waits is
// explained within explainNewWithin, as before.

// Partial plan bounds.
const (
	headFit        = 16  // per account: included jobs that fit now (at least; see headFitNow)
	headMax        = 256 // per account: included jobs at most
	headRoomMin    = 8   // per account: included jobs that fit now before the room bound may end the head
	partialMaxNew  = 256 // jobs added since the last full plan
	partialMinJobs = 128 // fewer pending jobs than this: a full plan (as cheap)
)

// queue is one account's unplaced jobs of the last full plan, in that
// plan's order (which is the order of the account's queue).
type queue struct {
	jobs    []*tracked
	from    int              // jobs[:from] holds no pending job
	pending int              // its jobs still pending
	min     engine.Resources // the least request of its jobs, in each dimension
}

// partialSet is a partial plan's input, for partialValidLocked.
type partialSet struct {
	nodes []engine.Node
	rank  *engine.Ranker
	acct  map[string]string // included job → its account
	heads map[string]*head  // by account
	out   []*tracked        // jobs added since the last full plan and left out
}

// head is what a partial plan takes of one account's queue: how many of
// its jobs are included, and how many of those fit now; the last included
// and the first left out, by the order of the queue now; where the jobs
// left out of its queue start (rest), and how many of its queue's pending
// jobs were walked.
type head struct {
	fit, n, walked int
	sum            engine.Resources // the request vectors of the included jobs that fit now
	over           int              // included jobs that fit now added with sum past the room
	maxIn, minOut  engine.Rank
	in, out        bool
	q              *queue
	rest           int
}

// left is how many of the account's queued jobs are left out.
func (h *head) left() int {
	if h.q == nil {
		return 0
	}
	return h.q.pending - h.walked
}

// noteFullPlanLocked keeps what partial plans need of a full plan: each
// account's unplaced jobs in order, the reservation holder's position,
// whether the jobs are all plain, and their least request (s.mu held).
func (s *Scheduler) noteFullPlanLocked(plan engine.Plan, expls iter.Seq2[int, engine.Explanation]) {
	for _, q := range s.queues {
		for _, t := range q.jobs {
			t.inOrder = false
		}
	}
	s.queues = map[string]*queue{}
	s.resvPos, s.orderPending, s.orderPlain = 0, 0, true
	for i, e := range expls {
		t, ok := s.jobs_[e.JobID]
		if !ok || e.Placed || t.phase != PhasePending {
			continue
		}
		q := s.queues[t.acct]
		j := t.job()
		v := engine.RequestVector(&j)
		if q == nil {
			q = &queue{min: v}
			s.queues[t.acct] = q
		}
		for d := range v {
			q.min[d] = min(q.min[d], v[d])
		}
		s.orderPlain = s.orderPlain && plain(t)
		t.inOrder, t.pos = true, int32(i+1)
		q.jobs = append(q.jobs, t)
		q.pending++
		s.orderPending++
		if plan.Reservation != nil && e.JobID == plan.Reservation.JobID {
			s.resvPos = i + 1
		}
	}
	s.sinceFull = s.sinceFull[:0]
}

// earlier returns the rank that goes first.
func earlier(a, b engine.Rank) engine.Rank {
	if b.Before(a) {
		return b
	}
	return a
}

// plain reports whether a partial plan may hold t: a single job without a
// deadline, not a preemptor waiting for its victims.
func plain(t *tracked) bool { return t.gangID == "" && t.deadline == 0 && t.hold == nil }

// ageingReorders reports whether the queue order of an account's jobs can
// change with time alone: only when the age term is capped (MaxAge > 0),
// as uncapped ages grow alike for every job.
func ageingReorders(p engine.Policy) bool { return !p.NoAging && p.MaxAge > 0 }

// headFitNow is how many jobs that fit now an account's head takes: the
// configured least (s.headFit), or twice the last plan's placements.
func (s *Scheduler) headFitNow() int { return max(s.headFit, 2*s.lastPlaced) }

// partialSnapshotLocked returns the input of a partial plan with seed, or
// false when a full plan is needed (s.mu held). It walks each account's
// queue only as far as its head: the rest is left out, unwalked, and the
// check reads it only when it must (partialValidLocked).
func (s *Scheduler) partialSnapshotLocked(seed uint64) (engine.Snapshot, *partialSet, bool) {
	pol := s.cfg.Policy
	if s.replan || !s.orderPlain || s.pendingN < s.partialMin || len(s.sinceFull) > partialMaxNew ||
		pol.Selection == engine.SelectDRR || pol.NoBackfill || s.cfg.Preemption.Enabled() || len(s.waiting) > 0 {
		return engine.Snapshot{}, nil, false
	}
	fresh := 0
	for _, t := range s.sinceFull {
		if t.phase == PhasePending && !t.dropped {
			if !plain(t) {
				return engine.Snapshot{}, nil, false
			}
			fresh++
		}
	}
	if s.orderPending+fresh != s.pendingN {
		return engine.Snapshot{}, nil, false // a pending job in neither list: plan them all
	}
	now := s.cfg.Clock.Now()
	nodes := s.ledger.Snapshot()
	fit := engine.NewFitter(nodes)
	ps := &partialSet{nodes: nodes, rank: engine.NewRanker(pol, now), acct: map[string]string{}, heads: map[string]*head{}}
	headFit, reorders := s.headFitNow(), ageingReorders(pol)
	// An account's head is long enough once the jobs of it that fit now
	// could not all be placed together, and one more (the reservation
	// holder, should its jobs go first): more of them would find no room
	// even if the account took all of it. headRoomMin keeps the heads as
	// long as before in the random histories of TestPartialPlanIsTheFullPlan
	// (as few refusals); 4 had a fifth more. A queue none of whose jobs
	// fits now gets headRoomMin jobs, not headMax: in the e2e bench a
	// third of the partial plans came while the node was full, each over
	// 1,024 jobs. There the random histories have a fifth more refusals
	// (when such a queue's head runs out before another account's
	// backfill), and twice as many plans that leave jobs out.
	room := fit.Room()
	buf := &s.partialBuf
	incl := slices.Grow(buf.incl[:0], 2*headFit*len(s.queues)+fresh)
	include := func(t *tracked, h *head, r engine.Rank) {
		if !h.in || h.maxIn.Before(r) {
			h.maxIn = r
		}
		h.in = true
		h.n++
		incl = append(incl, t)
		ps.acct[t.id()] = t.acct
	}
	for a, q := range s.queues {
		// The jobs placed from the front since the full plan are passed
		// over once, not by every partial plan (none comes back to the
		// queue without a full plan: s.replan).
		for q.from < len(q.jobs) && (q.jobs[q.from].phase != PhasePending || q.jobs[q.from].dropped) {
			q.from++
		}
		h := &head{q: q, rest: len(q.jobs)}
		ps.heads[a] = h
		// No job of the queue fits now (none asks for less than its least
		// request): its head matters only for the reservation.
		noRoom := !fit.Admits(q.min)
		for i := q.from; i < len(q.jobs); i++ {
			t := q.jobs[i]
			if t.phase != PhasePending || t.dropped {
				continue // placed, or gone since
			}
			j := t.job()
			if int(t.pos) > s.resvPos && (h.fit >= headFit || h.n >= headMax || h.over > 1 && h.fit >= headRoomMin || noRoom && h.n >= headRoomMin) {
				h.rest, h.minOut, h.out = i, ps.rank.Rank(&j), true
				break
			}
			h.walked++
			include(t, h, ps.rank.Rank(&j))
			if fit.Fits(&j) {
				h.fit++
				if h.sum = h.sum.Add(engine.RequestVector(&j)); !h.sum.Fits(room) {
					h.over++
				}
			}
		}
		if reorders && h.out {
			for t := range h.leftOut() {
				j := t.job()
				h.minOut = earlier(h.minOut, ps.rank.Rank(&j))
			}
		}
	}
	// The jobs added since: those that go after the first job left out of
	// their account are left out too.
	for _, t := range s.sinceFull {
		if t.phase != PhasePending || t.dropped {
			continue
		}
		h := ps.heads[t.acct]
		if h == nil {
			h = &head{}
			ps.heads[t.acct] = h
		}
		j := t.job()
		if r := ps.rank.Rank(&j); h.out && h.minOut.Before(r) {
			ps.out = append(ps.out, t)
		} else {
			include(t, h, r)
		}
	}
	// What is included of an account must be the head of its queue now:
	// ageing under a cap may have reordered it since the full plan.
	for _, h := range ps.heads {
		if h.out && (!h.in || !h.maxIn.Before(h.minOut)) {
			return engine.Snapshot{}, nil, false
		}
	}
	// Sorted as pointers: an engine.Job is a few hundred bytes to swap.
	slices.SortFunc(incl, func(a, b *tracked) int { return cmp.Compare(a.jid, b.jid) })
	pending := slices.Grow(buf.pending[:0], len(incl))
	for _, t := range incl {
		pending = append(pending, t.job())
	}
	clear(incl) // its jobs may be dropped before the next plan
	// Room for the jobs that ended since, which snapshotOfLocked adds.
	running := slices.Grow(buf.running[:0], len(s.active)+len(s.ended))
	buf.incl, buf.pending, buf.running = incl[:0], pending, running
	for _, t := range s.active {
		if r, ok := s.runningLocked(t); ok {
			running = append(running, r)
		}
	}
	slices.SortFunc(running, func(a, b engine.Running) int { return cmp.Compare(a.ID, b.ID) })
	return s.snapshotOfLocked(now, nodes, pending, running, seed), ps, true
}

// partialBuffers are the slices of a partial plan's input, reused by the
// next one: a trivial job's cycle allocated them afresh, a third of the
// adapter's allocations in the e2e bench (and its collections with
// them). pending and running are the engine's Snapshot's, valid until
// the next partial plan.
type partialBuffers struct {
	incl    []*tracked
	pending []engine.Job
	running []engine.Running
	expl    []engine.Explanation
	finals  []engine.Rejection
}

// schedule is engine.Schedule over a partial plan's snap, with the plan's
// Explanations in b.expl and only its final rejections (the only ones the
// step acts on) in b.finals: valid, like snap, until the next partial
// plan.
func (b *partialBuffers) schedule(st engine.State, snap engine.Snapshot) (engine.Plan, engine.State) {
	b.expl, b.finals = b.expl[:0], b.finals[:0]
	plan, next := engine.ScheduleEach(st, snap, func(e *engine.Explanation, r *engine.Rejection) {
		b.expl = append(b.expl, *e)
		if r != nil && r.Final {
			b.finals = append(b.finals, *r)
		}
	})
	plan.Explanations, plan.Rejected = b.expl, b.finals
	return plan, next
}

// left is how many pending jobs the partial plan leaves out.
func (ps *partialSet) left() int {
	n := len(ps.out)
	for _, h := range ps.heads {
		n += h.left()
	}
	return n
}

// leftOut yields the pending jobs of the account's queue left out of the
// partial plan.
func (h *head) leftOut() func(yield func(*tracked) bool) {
	return func(yield func(*tracked) bool) {
		if h.q == nil {
			return
		}
		for _, t := range h.q.jobs[h.rest:] {
			if t.phase == PhasePending && !t.dropped && !yield(t) {
				return
			}
		}
	}
}

// partialValidLocked reports whether plan, a partial plan over ps, decides
// what the full plan would (see the top of this file) (s.mu held). The
// jobs left out of the accounts' queues are read only when the room left
// could take the least of them.
func (s *Scheduler) partialValidLocked(plan engine.Plan, ps *partialSet) bool {
	excluded := map[string]bool{}
	for _, t := range ps.out {
		excluded[t.acct] = true
	}
	for a, h := range ps.heads {
		if h.left() > 0 {
			excluded[a] = true
		}
	}
	if len(excluded) == 0 {
		return true // nothing left out: it is the full plan
	}
	// The cut: where the first account with jobs left out runs out of
	// included ones.
	last := map[string]int{}
	for i, e := range plan.Explanations {
		last[ps.acct[e.JobID]] = i + 1
	}
	cut := len(plan.Explanations) + 1
	for a := range excluded {
		cut = min(cut, last[a])
	}
	waiting := map[string]bool{}
	overShare := map[string]bool{}       // accounts held by the share cap
	quotaHeld := map[string][]*tracked{} // jobs held by their account's quota
	var noRoom []noRoomJob               // jobs that found no node
	for i, e := range plan.Explanations {
		if e.Placed || plan.Reservation != nil && plan.Reservation.JobID == e.JobID {
			if i+1 >= cut {
				return false
			}
		}
		if e.Placed {
			continue
		}
		a := ps.acct[e.JobID]
		switch {
		case waitsForCapacity(e.Reason):
			waiting[a] = true
		case e.Reason == engine.ReasonOverShare:
			overShare[a] = true
		case e.Reason == engine.ReasonQuota:
			if t, ok := s.jobs_[e.JobID]; ok {
				quotaHeld[a] = append(quotaHeld[a], t)
			}
		}
		switch e.Reason {
		case engine.ReasonNoFit, engine.ReasonReserved, engine.ReasonBackfillBlocked:
			if t, ok := s.jobs_[e.JobID]; ok {
				noRoom = append(noRoom, noRoomJob{t, i+1 < cut})
			}
		}
	}
	if s.cfg.Policy.Selection == engine.SelectWFQ {
		for a := range excluded {
			if !waiting[a] {
				return false
			}
		}
	}
	// The room the placements leave, with their devices counted as free.
	at := make(map[string]int, len(ps.nodes))
	for i := range ps.nodes {
		at[ps.nodes[i].Name] = i
	}
	nodes := slices.Clone(ps.nodes)
	for _, p := range plan.Placements {
		if t, ok := s.jobs_[p.JobID]; ok {
			n := &nodes[at[p.Node]]
			n.Allocated = n.Allocated.Add(t.request)
		}
	}
	fit := engine.NewFitter(nodes)
	mayRun := func(t *tracked) bool {
		if heldByAccount(t, overShare, quotaHeld) {
			return false
		}
		j := t.job()
		return fit.Fits(&j) && !refusedAsBefore(&j, noRoom)
	}
	for _, t := range ps.out {
		if mayRun(t) {
			return false
		}
	}
	// The jobs left out of a queue ask for its least request at least.
	for _, h := range ps.heads {
		if h.left() == 0 || !fit.Admits(h.q.min) {
			continue
		}
		for t := range h.leftOut() {
			if mayRun(t) {
				return false
			}
		}
	}
	return true
}

// noRoomJob is an included job that found no node (or only ones the
// reservation holds); early: it comes before the cut.
type noRoomJob struct {
	t     *tracked
	early bool
}

// refusedAsBefore reports whether a job left out of a partial plan, which
// fits the room left, finds no node in the full plan all the same: a job
// visited before it there (one before the cut, or an earlier one of its
// account) found none, and it asks for no less (engine.NoEasier). Mostly
// jobs of unknown length that the reservation blocks, as it blocked their
// like.
func refusedAsBefore(j *engine.Job, noRoom []noRoomJob) bool {
	for _, y := range noRoom {
		if !y.early && y.t.acct != j.Account {
			continue
		}
		if yj := y.t.job(); engine.NoEasier(j, &yj) {
			return true
		}
	}
	return false
}

// heldByAccount reports whether a job left out of a partial plan is held by
// its account's limits in the full plan whatever the room: its account was
// over its share cap, or held by its quota, when an earlier job of its
// (the included ones go first) asked for no more in any dimension (the
// allocations only grow during a cycle).
func heldByAccount(t *tracked, overShare map[string]bool, quotaHeld map[string][]*tracked) bool {
	a := t.acct
	if overShare[a] {
		return true
	}
	for _, y := range quotaHeld[a] {
		if y.migProfile() == t.migProfile() && y.storageTier() == t.storageTier() && y.request.Fits(t.request) {
			return true
		}
	}
	return false
}

// waitsForCapacity reports whether a job not placed for reason r waits for
// room on the nodes (engine.waitsForCapacity, which the State's selector
// memory reads).
func waitsForCapacity(r engine.Code) bool {
	switch r {
	case engine.ReasonNoFit, engine.ReasonGangNoFit, engine.ReasonReserved, engine.ReasonBackfillBlocked, engine.ReasonBlocked:
		return true
	}
	return false
}
