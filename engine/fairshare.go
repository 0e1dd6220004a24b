package engine

import (
	"cmp"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// This file is step 2 of the cycle: usage, fair-share factors, and the
// selection algorithm that interleaves accounts.
//
// Usage is billing-seconds (Σ_d Billing[d]·amount_d per second of running,
// a MIG instance priced at slices/MIGSlices of a GPU), decayed with
// half-life H: U(t) = U(t0)·2^(−(t−t0)/H), one value and timestamp per
// account. A job that runs at rate r over [a, b] adds
// r·H/ln2·(2^(−(t−b)/H) − 2^(−(t−a)/H)) at time t, the exact integral of the
// decayed rate.
//
// Fair-share factor (Slurm classic): normalized shares multiply down the tree,
// S = Π (shares / Σ sibling shares); normalized usage U = usage of the
// subtree / total usage; effective usage U_E = U for children of the root,
// else U_E = U + (U_E,parent − U)·shares/Σ sibling shares; F = 2^(−U_E/S)
// (F = 1 with no usage anywhere, 0 for S = 0). Option effective-priority:
// F = min(1, 0.1·shares/usage), the original's boost/max(usage/shares, 0.1)
// with boost 1, divided by its maximum 10.

// Share is one account's fair-share standing.
type Share struct {
	Name       string
	Shares     float64 // raw
	NormShares float64 // S
	Usage      float64 // raw decayed usage of the subtree (billing-seconds)
	NormUsage  float64 // U
	EffUsage   float64 // U_E
	Factor     float64 // F
}

// acct is one account in the cycle's table.
type acct struct {
	Share
	own      float64 // own decayed usage
	parent   int     // -1 = root
	children []int
	sibSum   float64 // Σ shares of the account and its siblings
	quota    Resources
	guar     Resources
	alloc    Resources // subtree allocation: running + placed (real)
	ownAlloc Resources // own allocation: running + placed (real)
	alloc0   Resources // alloc before this cycle's placements (running only)
	own0     Resources // ownAlloc before this cycle's placements
	// remaining is the estimated billing-seconds still to run of the
	// subtree's running jobs (rate × time left of the planning duration):
	// work already started that usage has not caught up with yet.
	remaining float64

	// ordering (per cycle, "as if dispatched")
	queue   []*entry
	head    int
	oAlloc  Resources // subtree allocation incl. ordering charges (guarantees)
	oOwn    Resources // own allocation incl. ordering charges (DRF)
	charged float64   // billing-seconds charged by the ordering
	finish  float64   // WFQ finish tag
	deficit float64   // DRR deficit
	comp    float64   // lottery compensation multiplier
	waiting bool      // commit: entries of the account are left waiting for capacity
}

// accounts is the cycle's account table, sorted by name.
type accounts struct {
	list  []acct
	byNam map[string]int
	total float64 // total decayed usage, including accounts no longer configured
}

func (as *accounts) lookup(name string) int {
	if i, ok := as.byNam[name]; ok {
		return i
	}
	return -1
}

// buildAccounts makes the table from the configured accounts plus every
// account a job names (with defShares under the root). Unknown parents and
// cycles attach to the root.
func buildAccounts(cfg []Account, extra []string, usage map[string]float64, defShares float64) *accounts {
	seen := map[string]Account{}
	for _, a := range cfg {
		if a.Name == "" {
			continue
		}
		if _, dup := seen[a.Name]; !dup {
			seen[a.Name] = a
		}
	}
	for _, n := range extra {
		if _, ok := seen[n]; !ok {
			seen[n] = Account{Name: n, Shares: defShares}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	as := &accounts{list: make([]acct, len(names)), byNam: make(map[string]int, len(names))}
	for i, n := range names {
		as.byNam[n] = i
	}
	for i, n := range names {
		a := seen[n]
		as.list[i] = acct{Share: Share{Name: n, Shares: max(a.Shares, 0)}, parent: -1, quota: a.Quota, guar: a.Guaranteed, own: usage[n]}
		if p, ok := as.byNam[a.Parent]; ok && p != i {
			as.list[i].parent = p
		}
	}
	// Break cycles: walk up at most len steps; an account that loops attaches to the root.
	for i := range as.list {
		steps, p := 0, as.list[i].parent
		for p >= 0 && steps <= len(as.list) {
			p = as.list[p].parent
			steps++
		}
		if p >= 0 {
			as.list[i].parent = -1
		}
	}
	for i := range as.list {
		if p := as.list[i].parent; p >= 0 {
			as.list[p].children = append(as.list[p].children, i)
		}
	}
	// Sum in name order: float addition is not associative, and map order
	// must never reach the output.
	for _, n := range slices.Sorted(maps.Keys(usage)) {
		as.total += usage[n]
	}
	as.compute()
	return as
}

// topo returns the accounts parents-first.
func (as *accounts) topo() []int {
	order := make([]int, 0, len(as.list))
	for i := range as.list {
		if as.list[i].parent < 0 {
			order = append(order, i)
		}
	}
	for k := 0; k < len(order); k++ {
		order = append(order, as.list[order[k]].children...)
	}
	return order
}

func (as *accounts) compute() {
	order := as.topo()
	// subtree usage, children before parents
	for k := len(order) - 1; k >= 0; k-- {
		a := &as.list[order[k]]
		a.Usage = a.own
		for _, c := range a.children {
			a.Usage += as.list[c].Usage
		}
	}
	rootSum := 0.0
	for i := range as.list {
		if as.list[i].parent < 0 {
			rootSum += as.list[i].Shares
		}
	}
	for _, i := range order {
		a := &as.list[i]
		ps, sib := 1.0, rootSum
		if a.parent >= 0 {
			p := &as.list[a.parent]
			ps = p.NormShares
			sib = 0
			for _, c := range p.children {
				sib += as.list[c].Shares
			}
		}
		a.sibSum = sib
		if sib > 0 {
			a.NormShares = ps * a.Shares / sib
		}
		if as.total > 0 {
			a.NormUsage = a.Usage / as.total
		}
		if a.parent < 0 || sib == 0 {
			a.EffUsage = a.NormUsage
		} else {
			a.EffUsage = a.NormUsage + (as.list[a.parent].EffUsage-a.NormUsage)*a.Shares/sib
		}
		switch {
		case a.EffUsage == 0 && a.NormShares > 0:
			a.Factor = 1
		case a.NormShares <= 0:
			a.Factor = 0
		default:
			a.Factor = math.Exp2(-a.EffUsage / a.NormShares)
		}
	}
}

func (as *accounts) effectivePriorityFactors() {
	for i := range as.list {
		a := &as.list[i]
		switch {
		case a.own <= 0:
			a.Factor = 1
		default:
			a.Factor = min(1, 0.1*a.Shares/a.own)
		}
	}
}

// FairShares computes every account's fair-share standing from raw decayed
// usage per account (own usage, not including children). Usage under names
// that are not accounts counts toward the total only. The result is sorted
// by name.
func FairShares(accts []Account, usage map[string]float64, mode FairShareMode) []Share {
	as := buildAccounts(accts, nil, usage, 1)
	if mode == FairShareEffectivePriority {
		as.effectivePriorityFactors()
	}
	out := make([]Share, len(as.list))
	for i := range as.list {
		out[i] = as.list[i].Share
	}
	return out
}

// --- usage ------------------------------------------------------------------

// decay returns u decayed over d with half-life h.
func decay(u float64, d, h time.Duration) float64 {
	if d <= 0 || u == 0 {
		return u
	}
	return u * math.Exp2(-float64(d)/float64(h))
}

// accrued is the usage, decayed to now, of rate r over [a, b] (b ≤ now).
func accrued(r float64, a, b, now time.Time, h time.Duration) float64 {
	if !b.After(a) || r == 0 {
		return 0
	}
	hs := h.Seconds()
	return r * hs / math.Ln2 * (math.Exp2(-now.Sub(b).Seconds()/hs) - math.Exp2(-now.Sub(a).Seconds()/hs))
}

// --- selection --------------------------------------------------------------

// selector interleaves the accounts' queues into one order. Every step it
// considers only the accounts whose head entry has the highest class
// (within the guaranteed minimum first, then the priority band), and the
// algorithm picks one of those.
type selector struct {
	p        *Policy
	as       *accounts
	rng      *rand.Rand
	v0       float64 // WFQ virtual time when the cycle's jobs arrived (cycle start)
	v        float64 // WFQ: the largest start tag dispatched (V when nothing waits, see commit)
	drr      int     // DRR pointer (account index)
	full     bool    // DRR: the account at the pointer has had its quantum this visit
	maxS     float64 // DRR: the largest normalized share (quantum scale)
	elig     []int
	capacity Resources // cluster total, for DRF
}

func (s *selector) guaranteed(a int, e *entry) bool {
	for i := a; i >= 0; i = s.as.list[i].parent {
		g := s.as.list[i].guar
		if g.IsZero() {
			continue
		}
		uses := false
		for d := range NumDims {
			if g[d] == 0 {
				continue
			}
			if e.use[d] > 0 {
				uses = true
			}
			if s.as.list[i].oAlloc[d]+e.use[d] > g[d] {
				return false
			}
		}
		return uses
	}
	return false
}

func (s *selector) head(a int) *entry {
	ac := &s.as.list[a]
	if ac.head < len(ac.queue) {
		return ac.queue[ac.head]
	}
	return nil
}

// eligible fills s.elig with the accounts whose head has the top class.
func (s *selector) eligible() bool {
	s.elig = s.elig[:0]
	bestG, bestB := false, math.Inf(-1)
	for a := range s.as.list {
		e := s.head(a)
		if e == nil {
			continue
		}
		g := s.guaranteed(a, e)
		e.guaranteed = g
		switch {
		case g && !bestG, g == bestG && e.band > bestB:
			bestG, bestB = g, e.band
			s.elig = append(s.elig[:0], a)
		case g == bestG && e.band == bestB:
			s.elig = append(s.elig, a)
		}
	}
	return len(s.elig) > 0
}

// weight is an account's share of the machine, floored to keep tags finite.
func (s *selector) weight(a int) float64 { return max(s.as.list[a].NormShares, 1e-9) }

// next picks the account whose head goes next, or -1 when all are empty.
func (s *selector) next() int {
	if !s.eligible() {
		return -1
	}
	el := s.elig
	if len(el) == 1 && s.p.Selection != SelectDRR {
		return el[0]
	}
	headCmp := func(a, b int) int { return compareEntries(s.head(a), s.head(b)) }
	switch s.p.Selection {
	case SelectProportional:
		return argmin(el, func(a, b int) int {
			return cmp.Or(cmp.Compare(s.propKey(a), s.propKey(b)), headCmp(a, b))
		})
	case SelectWFQ:
		return argmin(el, func(a, b int) int {
			return cmp.Or(cmp.Compare(s.finishTag(a), s.finishTag(b)), headCmp(a, b))
		})
	case SelectDRF:
		return argmin(el, func(a, b int) int {
			return cmp.Or(cmp.Compare(s.dominant(a), s.dominant(b)), headCmp(a, b))
		})
	case SelectLottery:
		return s.lottery(el)
	case SelectDRR:
		return s.drrNext(el)
	default:
		return argmin(el, headCmp)
	}
}

func argmin(el []int, c func(a, b int) int) int {
	best := el[0]
	for _, a := range el[1:] {
		if c(a, best) < 0 {
			best = a
		}
	}
	return best
}

// propKey is the proportional key (lowest first):
//
//	(usage + remaining + charged + cost_head/2) / S
//
// remaining, the work the account's running jobs have still to run by
// their estimates, counts started work in full, as charged did while the
// order placed it; without it an account looks underserved again from one
// cycle to the next until its usage catches up with its jobs. With it, the
// key jumps by cost/S when an entry goes and then only decays, like a
// virtual finish tag; picking at the bottom of that sawtooth would keep the
// key, and so the decayed usage that decides the split, higher on average
// by half a jump for the accounts with the largest jumps (the small
// shares), so the head counts at half its cost: every account's key is
// then centred on the same level and the decay takes from each in
// proportion to its share. (Both terms measured with one slot freeing per
// cycle at shares 1:2:5: 13.0% for the 1-share account without them,
// 12.5% with; TestShareConvergenceOneSlot.)
func (s *selector) propKey(a int) float64 {
	ac := &s.as.list[a]
	return (ac.Usage + ac.remaining + ac.charged + s.head(a).cost/2) / s.weight(a)
}

func (s *selector) finishTag(a int) float64 {
	ac := &s.as.list[a]
	return max(ac.finish, s.v0) + s.head(a).cost/s.weight(a)
}

// dominant is the account's dominant share (as ordered so far) over its
// weight: max_d alloc_d/capacity_d ÷ S.
func (s *selector) dominant(a int) float64 {
	return dominantShare(s.as.list[a].oOwn, s.capacity) / s.weight(a)
}

// dominantShare is max_d alloc_d / capacity_d over dimensions with capacity.
func dominantShare(alloc, capacity Resources) float64 {
	m := 0.0
	for d := range NumDims {
		if capacity[d] > 0 {
			m = max(m, float64(alloc[d])/float64(capacity[d]))
		}
	}
	return m
}

func (s *selector) lottery(el []int) int {
	total := 0.0
	for _, a := range el {
		total += s.tickets(a)
	}
	if total <= 0 {
		return argmin(el, func(a, b int) int { return compareEntries(s.head(a), s.head(b)) })
	}
	x := s.rng.Float64() * total
	for _, a := range el {
		x -= s.tickets(a)
		if x < 0 {
			return a
		}
	}
	return el[len(el)-1]
}

func (s *selector) tickets(a int) float64 {
	c := s.as.list[a].comp
	if c < 1 {
		c = 1
	}
	return s.as.list[a].NormShares * c
}

// drrNext runs deficit round-robin over the eligible accounts in name order.
// Visiting an account adds its quantum (see quantum) once per visit; it
// keeps the turn while its head costs no more than its deficit, across
// cycles too: the pointer and whether the account there has had its
// quantum for this visit (s.full) are in the State (DRRNext, DRRCredited).
// Invariant: 0 ≤ deficit ≤ quantum + the account's dearest entry (see
// boundDeficits).
func (s *selector) drrNext(el []int) int {
	isEl := func(a int) bool { _, ok := slices.BinarySearch(el, a); return ok }
	n := len(s.as.list)
	if !isEl(s.drr) {
		s.drr = s.nextEl(el, s.drr)
		s.full = false
	}
	misses := 0
	for {
		a := s.drr
		ac := &s.as.list[a]
		if !s.full {
			ac.deficit += s.quantum(a)
			s.full = true
		}
		if s.head(a).cost <= ac.deficit {
			return a
		}
		misses++
		if misses >= len(el) {
			// A whole round without a dispatch: add the rounds that would
			// pass before the first account can go, all at once.
			k := math.Inf(1)
			for _, b := range el {
				bc := &s.as.list[b]
				k = min(k, math.Ceil((s.head(b).cost-bc.deficit)/s.quantum(b))-1)
			}
			if k > 0 && !math.IsInf(k, 1) {
				for _, b := range el {
					s.as.list[b].deficit += k * s.quantum(b)
				}
			}
			misses = 0
		}
		s.drr = s.nextEl(el, (s.drr+1)%n)
		s.full = false
	}
}

// boundDeficits keeps DRR's invariant across cycles: a deficit never
// exceeds one quantum plus the account's dearest entry. A visit ends with
// the deficit below the head's cost, except when the commit's replay passes
// heads the account could pay for but that did not fit; without the bound
// such an account would collect a quantum every cycle for as long as its
// jobs wait, then burst. An account not credited for its current visit
// keeps at most one entry's cost, so its next quantum brings it to the
// bound.
func (s *selector) boundDeficits() {
	for a := range s.as.list {
		ac := &s.as.list[a]
		limit := 0.0
		for _, e := range ac.queue {
			limit = max(limit, e.cost)
		}
		if a == s.drr && s.full {
			limit += s.quantum(a)
		}
		ac.deficit = min(ac.deficit, limit)
	}
}

// nextEl returns the first eligible account at or after a (cyclically).
func (s *selector) nextEl(el []int, a int) int {
	i, _ := slices.BinarySearch(el, a)
	if i == len(el) {
		i = 0
	}
	return el[i]
}

// quantum is Quantum × shares/(largest shares among accounts); at least a
// millionth of Quantum so rounds always progress.
func (s *selector) quantum(a int) float64 {
	return s.p.Quantum * max(s.as.list[a].NormShares/s.maxS, 1e-6)
}

func (as *accounts) maxShare() float64 {
	m := 0.0
	for i := range as.list {
		m = max(m, as.list[i].NormShares)
	}
	if m == 0 {
		return 1
	}
	return m
}

// charge records that account a's head was dispatched (in the ordering, or
// placed in the commit's replay).
func (s *selector) charge(a int) *entry { return s.take(a, true) }

// pass moves account a's head on without charging it (the commit's DRR
// replay, for an entry that was not placed): the account keeps its credit.
func (s *selector) pass(a int) *entry { return s.take(a, false) }

func (s *selector) take(a int, dispatched bool) *entry {
	ac := &s.as.list[a]
	e := ac.queue[ac.head]
	ac.head++
	ac.charged += e.cost
	for i := a; i >= 0; i = s.as.list[i].parent {
		s.as.list[i].oAlloc = s.as.list[i].oAlloc.Add(*e.use)
	}
	ac.oOwn = ac.oOwn.Add(*e.use)
	if s.p.Selection == SelectDRR {
		if dispatched {
			ac.deficit -= e.cost
		}
		if ac.head == len(ac.queue) {
			// The queue is done for this cycle: the pointer moves on, and
			// the credit goes unless jobs are left waiting for capacity.
			if !ac.waiting {
				ac.deficit = 0
			}
			s.drr = (s.drr + 1) % len(s.as.list)
			s.full = false
		}
	}
	if dispatched {
		s.dispatched(a, e)
	}
	return e
}

// dispatched updates the WFQ tags and lottery compensation for e, account
// a's next entry in queue order to be dispatched. Both depend only on the
// account's own entries, so the commit applies it per account.
func (s *selector) dispatched(a int, e *entry) {
	ac := &s.as.list[a]
	switch s.p.Selection {
	case SelectWFQ:
		// Every pending job arrived by the cycle's start, so a backlogged
		// account's next start tag is its last finish tag, or V at the
		// cycle start if it was idle (no credit for idleness); V never
		// passes the start tag of an account that is still waiting (see
		// commit).
		start := max(ac.finish, s.v0)
		ac.finish = start + e.cost/s.weight(a)
		s.v = max(s.v, start)
	case SelectLottery:
		f := min(e.cost/s.p.Quantum, 1)
		if f > 0 {
			ac.comp = 1 / f
		} else {
			ac.comp = 1
		}
	}
}
