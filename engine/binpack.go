package engine

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is step 3 of the cycle: placement. It holds the per-cycle work
// copy of the nodes, the exact fit check for one job on one node, and the
// node index that finds the best fitting node in O(log N) typical time.

// nodeWork is the mutable per-cycle view of one node. The Snapshot's Node is
// never written; every change goes here.
type nodeWork struct {
	node    *Node
	free    Resources
	gpuFree []bool   // per GPU: available whole (not in use, not in MIG mode)
	migFree [][]bool // per GPU: per MIG instance available
	numa    []NUMADomain
	healthy bool
}

func (nw *nodeWork) clone() nodeWork {
	c := *nw
	c.gpuFree = slices.Clone(nw.gpuFree)
	if nw.migFree != nil {
		c.migFree = make([][]bool, len(nw.migFree))
		for i, m := range nw.migFree {
			c.migFree[i] = slices.Clone(m)
		}
	}
	c.numa = slices.Clone(nw.numa)
	return c
}

func newNodeWork(n *Node) nodeWork {
	nw := nodeWork{node: n, free: n.Free(), healthy: !n.Unhealthy}
	if len(n.GPUs) > 0 {
		nw.gpuFree = make([]bool, len(n.GPUs))
		for i := range n.GPUs {
			g := &n.GPUs[i]
			nw.gpuFree[i] = !g.InUse && len(g.MIG) == 0
			if len(g.MIG) > 0 {
				if nw.migFree == nil {
					nw.migFree = make([][]bool, len(n.GPUs))
				}
				m := make([]bool, len(g.MIG))
				for k := range g.MIG {
					m[k] = !g.InUse && !g.MIG[k].InUse
				}
				nw.migFree[i] = m
			}
		}
	}
	nw.numa = slices.Clone(n.NUMA)
	return nw
}

// jobReq is the normalized request of one job, computed once per cycle.
type jobReq struct {
	vec      Resources // amounts checked against and taken from Node free
	nGPU     int       // whole GPUs wanted
	gpuMem   int64     // minimum memory per GPU, MiB
	model    string
	mig      string
	nMIG     int
	numa     bool
	selector map[string]string
	selKey   string // canonical selector, "" = none
}

func newJobReq(j *Job) jobReq {
	r := fitReq(j)
	if len(j.NodeSelector) > 0 {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(j.NodeSelector)) {
			b.WriteString(strconv.Quote(k))
			b.WriteByte('=')
			b.WriteString(strconv.Quote(j.NodeSelector[k]))
			b.WriteByte(',')
		}
		r.selKey = b.String()
	}
	return r
}

// fitReq is newJobReq without the canonical selector key, which only the
// cycle's caches need.
func fitReq(j *Job) jobReq {
	r := jobReq{vec: j.Request, model: j.GPUModel, mig: j.MIGProfile, numa: j.NUMALocal, selector: j.NodeSelector}
	if j.MIGProfile != "" {
		r.nMIG = int(max(j.Request[DimGPU], 1))
		r.vec[DimGPU], r.vec[DimGPUMemory] = 0, 0
	} else if j.Request[DimGPU] > 0 {
		r.nGPU = int(j.Request[DimGPU])
		r.gpuMem = (j.Request[DimGPUMemory] + j.Request[DimGPU] - 1) / j.Request[DimGPU]
	}
	if d, ok := TierDim(j.StorageTier); ok {
		s := r.vec.Storage()
		r.vec[DimNVMe], r.vec[DimSSD], r.vec[DimHDD] = 0, 0, 0
		r.vec[d] = s
	}
	return r
}

// shapeKey identifies requests that fit exactly the same nodes.
type shapeKey struct {
	vec        Resources
	nGPU, nMIG int
	gpuMem     int64
	model, mig string
	numa       bool
	selKey     string
}

func (r *jobReq) shape() shapeKey {
	return shapeKey{r.vec, r.nGPU, r.nMIG, r.gpuMem, r.model, r.mig, r.numa, r.selKey}
}

// fail says why a node was turned down; failShort+d means dimension d.
type fail int

const (
	fitOK fail = iota
	failUnhealthy
	failSelector
	failGPUModel
	failMIG
	failNUMA
	failReserved
	failShort // + Dim
)

func matchSelector(n *Node, sel map[string]string) bool {
	for k, v := range sel {
		if lv, ok := n.Labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// check reports whether r fits on nw now, and if not, the first failing check
// in NoFit's documented order.
func (nw *nodeWork) check(r *jobReq, scratch []int) fail {
	if !nw.healthy {
		return failUnhealthy
	}
	if !matchSelector(nw.node, r.selector) {
		return failSelector
	}
	if r.nGPU > 0 || r.model != "" {
		if r.nGPU > 0 && nw.pickGPUs(r, scratch) == nil || r.nGPU == 0 && !nw.hasModel(r.model) {
			return failGPUModel
		}
	}
	if r.nMIG > 0 && nw.pickMIG(r, scratch) == nil {
		return failMIG
	}
	if r.numa && nw.pickNUMA(r) < -1 {
		return failNUMA
	}
	for d := range NumDims {
		if r.vec[d] > nw.free[d] {
			return failShort + fail(d)
		}
	}
	return fitOK
}

// fits is check without the reason, ordered cheapest first.
func (nw *nodeWork) fits(r *jobReq, scratch []int) bool {
	if !nw.healthy || !r.vec.Fits(nw.free) {
		return false
	}
	if len(r.selector) > 0 && !matchSelector(nw.node, r.selector) {
		return false
	}
	if r.nGPU > 0 && nw.pickGPUs(r, scratch) == nil {
		return false
	}
	if r.nGPU == 0 && r.model != "" && !nw.hasModel(r.model) {
		return false
	}
	if r.nMIG > 0 && nw.pickMIG(r, scratch) == nil {
		return false
	}
	if r.numa && nw.pickNUMA(r) < -1 {
		return false
	}
	return true
}

func (nw *nodeWork) hasModel(model string) bool {
	for i := range nw.node.GPUs {
		if nw.node.GPUs[i].Model == model {
			return true
		}
	}
	return false
}

// pickGPUs chooses r.nGPU free whole GPUs of the model with enough memory,
// smallest sufficient memory first (best fit), ties by index. It appends the
// indices to buf and returns nil when there are not enough.
func (nw *nodeWork) pickGPUs(r *jobReq, buf []int) []int {
	if len(nw.gpuFree) == 0 {
		if r.model != "" || r.gpuMem > 0 {
			return nil
		}
		return []int{} // anonymous GPUs: the vector check decides
	}
	buf = buf[:0]
	for i, ok := range nw.gpuFree {
		g := &nw.node.GPUs[i]
		if ok && (r.model == "" || g.Model == r.model) && g.MemoryMiB >= r.gpuMem {
			buf = append(buf, i)
		}
	}
	if len(buf) < r.nGPU {
		return nil
	}
	gs := nw.node.GPUs
	slices.SortStableFunc(buf, func(a, b int) int { return cmp.Compare(gs[a].MemoryMiB, gs[b].MemoryMiB) })
	return buf[:r.nGPU]
}

// pickMIG chooses r.nMIG free instances of the profile (on GPUs of the model,
// if one is asked for), in device then instance order. It returns pairs
// (gpu, instance) flattened, or nil.
func (nw *nodeWork) pickMIG(r *jobReq, buf []int) []int {
	buf = buf[:0]
	for i, m := range nw.migFree {
		g := &nw.node.GPUs[i]
		if r.model != "" && g.Model != r.model {
			continue
		}
		for k, ok := range m {
			if ok && g.MIG[k].Profile == r.mig {
				buf = append(buf, i, k)
				if len(buf) == 2*r.nMIG {
					return buf
				}
			}
		}
	}
	return nil
}

// pickNUMA returns the index of the NUMA domain with the least CPU left that
// holds r's CPU and memory; -1 when the node has no NUMA information (the
// node is one domain); -2 when none fits.
func (nw *nodeWork) pickNUMA(r *jobReq) int {
	if len(nw.numa) == 0 {
		return -1
	}
	best := -2
	for i, d := range nw.numa {
		if d.CPU >= r.vec[DimCPU] && d.Memory >= r.vec[DimMemory] {
			if best < 0 || d.CPU < nw.numa[best].CPU || (d.CPU == nw.numa[best].CPU && d.Memory < nw.numa[best].Memory) {
				best = i
			}
		}
	}
	return best
}

// picks are the devices chosen for one job on one node.
type picks struct {
	gpus []int // GPU indices
	mig  []int // (GPU index, instance index) pairs
	numa int   // NUMA domain index; -1 = none
}

// pick chooses devices for r on nw, which must fit.
func (nw *nodeWork) pick(r *jobReq) picks {
	pk := picks{numa: -1}
	if r.nGPU > 0 && len(nw.gpuFree) > 0 {
		pk.gpus = slices.Clone(nw.pickGPUs(r, make([]int, 0, len(nw.gpuFree))))
	}
	if r.nMIG > 0 {
		pk.mig = nw.pickMIG(r, make([]int, 0, 2*r.nMIG))
	}
	if r.numa {
		pk.numa = max(nw.pickNUMA(r), -1)
	}
	return pk
}

// apply allocates r with the given devices on nw.
func (nw *nodeWork) apply(r *jobReq, pk picks) {
	for _, i := range pk.gpus {
		nw.gpuFree[i] = false
	}
	for k := 0; k < len(pk.mig); k += 2 {
		nw.migFree[pk.mig[k]][pk.mig[k+1]] = false
	}
	if pk.numa >= 0 {
		nw.numa[pk.numa].CPU -= r.vec[DimCPU]
		nw.numa[pk.numa].Memory -= r.vec[DimMemory]
	}
	nw.free = nw.free.Sub(r.vec)
}

// release gives r's resources and devices back (the reverse of apply).
func (nw *nodeWork) release(vec Resources, pk picks) {
	for _, i := range pk.gpus {
		nw.gpuFree[i] = true
	}
	for k := 0; k < len(pk.mig); k += 2 {
		nw.migFree[pk.mig[k]][pk.mig[k+1]] = true
	}
	if pk.numa >= 0 {
		nw.numa[pk.numa].CPU += vec[DimCPU]
		nw.numa[pk.numa].Memory += vec[DimMemory]
	}
	nw.free = nw.free.Add(vec)
	for d := range NumDims {
		nw.free[d] = min(nw.free[d], nw.node.Capacity[d])
	}
}

// placement describes picks by ID.
func (nw *nodeWork) placement(id string, pk picks) Placement {
	p := Placement{JobID: id, Node: nw.node.Name, NUMA: -1}
	for _, i := range pk.gpus {
		p.GPUs = append(p.GPUs, nw.node.GPUs[i].ID)
	}
	for k := 0; k < len(pk.mig); k += 2 {
		p.MIG = append(p.MIG, nw.node.GPUs[pk.mig[k]].MIG[pk.mig[k+1]].ID)
	}
	if pk.numa >= 0 {
		p.NUMA = nw.numa[pk.numa].ID
	}
	return p
}

// --- the node index ---------------------------------------------------------

// nodeIndex is a segment tree over the nodes (in index order) whose inner
// entries hold, for their subtree, the component-wise maximum free vector,
// the range of the free score and the maximum utilisation, and a bit mask of
// features (healthy, free GPUs per model, free MIG instances per profile).
// A search descends best-first by the strategy's key and prunes every subtree
// that lacks a feature or the room (max free per dimension), so a decision
// costs O(log N) typical instead of a scan of all nodes. Best-first is exact;
// when it exceeds searchBudget steps (large clusters where the best-keyed
// nodes are the nearly full ones) it falls back to the best of the next
// fallbackCandidates fitting nodes after the shape's last placement (next
// fit), which keeps the cost per decision bounded.
type nodeIndex struct {
	size    int // leaves (power of two)
	maxFree []Resources
	minS    []float64
	maxS    []float64
	maxU    []float64
	feat    []uint64
	price   []Price          // per subtree: the lowest price of each resource (Cheapest's bound); +Inf without a healthy node
	scale   [NumDims]float64 // 1/largest capacity per dimension
	mig     int              // compute slices of a full GPU (Policy.MIGSlices), to price MIG instances
	ucount  []float64        // per node: 1/number of dimensions with capacity
	models  map[string]int
	mprof   map[string]int
	heap    []searchItem
}

const (
	featHealthy  = 1
	featModel0   = 1  // bits 1..31: a free whole GPU of model id
	featProfile0 = 32 // bits 32..63: a free MIG instance of profile id
)

func newNodeIndex(nodes []nodeWork, migSlices int) *nodeIndex {
	ix := &nodeIndex{models: map[string]int{}, mprof: map[string]int{}, mig: max(migSlices, 1)}
	ix.size = 1
	for ix.size < len(nodes) {
		ix.size *= 2
	}
	var maxCap Resources
	for i := range nodes {
		n := nodes[i].node
		for d := range NumDims {
			maxCap[d] = max(maxCap[d], n.Capacity[d])
		}
		for _, g := range n.GPUs {
			if _, ok := ix.models[g.Model]; !ok && len(ix.models) < 31 {
				ix.models[g.Model] = len(ix.models)
			}
			for _, m := range g.MIG {
				if _, ok := ix.mprof[m.Profile]; !ok && len(ix.mprof) < 32 {
					ix.mprof[m.Profile] = len(ix.mprof)
				}
			}
		}
	}
	for d := range NumDims {
		if maxCap[d] > 0 {
			ix.scale[d] = 1 / float64(maxCap[d])
		}
	}
	n2 := 2 * ix.size
	ix.maxFree = make([]Resources, n2)
	ix.minS = make([]float64, n2)
	ix.maxS = make([]float64, n2)
	ix.maxU = make([]float64, n2)
	ix.feat = make([]uint64, n2)
	ix.price = make([]Price, n2)
	ix.ucount = make([]float64, len(nodes))
	for i := range n2 {
		ix.minS[i] = math.Inf(1)
		ix.maxS[i] = math.Inf(-1)
		ix.maxU[i] = math.Inf(-1)
		ix.price[i] = noPrice
	}
	for i := range nodes {
		c := 0
		for d := range NumDims {
			if nodes[i].node.Capacity[d] > 0 {
				c++
			}
		}
		if c > 0 {
			ix.ucount[i] = 1 / float64(c)
		}
		ix.setLeaf(i, &nodes[i])
	}
	for t := ix.size - 1; t >= 1; t-- {
		ix.pull(t)
	}
	return ix
}

func (ix *nodeIndex) freeScore(nw *nodeWork) float64 {
	s := 0.0
	for d := range NumDims {
		s += float64(nw.free[d]) * ix.scale[d]
	}
	return s
}

func (ix *nodeIndex) util(i int, nw *nodeWork) float64 {
	u := 0.0
	for d := range NumDims {
		if c := nw.node.Capacity[d]; c > 0 {
			u += float64(c-nw.free[d]) / float64(c)
		}
	}
	return u * ix.ucount[i]
}

func (ix *nodeIndex) setLeaf(i int, nw *nodeWork) {
	t := ix.size + i
	if !nw.healthy {
		ix.maxFree[t] = Resources{}
		ix.feat[t] = 0
		ix.minS[t], ix.maxS[t], ix.maxU[t] = math.Inf(1), math.Inf(-1), math.Inf(-1)
		ix.price[t] = noPrice
		return
	}
	ix.price[t] = nw.node.Price
	ix.maxFree[t] = nw.free
	s := ix.freeScore(nw)
	ix.minS[t], ix.maxS[t] = s, s
	ix.maxU[t] = ix.util(i, nw)
	f := uint64(featHealthy)
	for g, ok := range nw.gpuFree {
		if ok {
			if id, known := ix.models[nw.node.GPUs[g].Model]; known {
				f |= 1 << (featModel0 + id)
			}
		}
	}
	for g, m := range nw.migFree {
		for k, ok := range m {
			if ok {
				if id, known := ix.mprof[nw.node.GPUs[g].MIG[k].Profile]; known {
					f |= 1 << (featProfile0 + id)
				}
			}
		}
	}
	ix.feat[t] = f
}

func (ix *nodeIndex) pull(t int) {
	l, r := 2*t, 2*t+1
	for d := range NumDims {
		ix.maxFree[t][d] = max(ix.maxFree[l][d], ix.maxFree[r][d])
	}
	ix.minS[t] = min(ix.minS[l], ix.minS[r])
	ix.maxS[t] = max(ix.maxS[l], ix.maxS[r])
	ix.maxU[t] = max(ix.maxU[l], ix.maxU[r])
	ix.feat[t] = ix.feat[l] | ix.feat[r]
	pl, pr := &ix.price[l], &ix.price[r]
	ix.price[t] = Price{CoreHour: min(pl.CoreHour, pr.CoreHour), GiBHour: min(pl.GiBHour, pr.GiBHour), GPUHour: min(pl.GPUHour, pr.GPUHour)}
}

// noPrice is the price bound of a subtree without a healthy node.
var noPrice = Price{CoreHour: math.Inf(1), GiBHour: math.Inf(1), GPUHour: math.Inf(1)}

// hourlyCost is what r costs per hour at price p (Cheapest's key). A
// resource r does not ask for adds nothing, whatever its price (+Inf
// included).
func (ix *nodeIndex) hourlyCost(r *jobReq, p *Price) float64 {
	c := 0.0
	add := func(qty, price float64) {
		if qty > 0 {
			c += qty * price
		}
	}
	add(float64(r.vec[DimCPU])/1000, p.CoreHour)
	add(float64(r.vec[DimMemory])/1024, p.GiBHour)
	gpus := float64(r.vec[DimGPU])
	if r.nMIG > 0 {
		gpus += float64(r.nMIG) * float64(MIGSlices(r.mig)) / float64(ix.mig)
	}
	add(gpus, p.GPUHour)
	return c
}

// update refreshes node i after its free resources changed.
func (ix *nodeIndex) update(i int, nw *nodeWork) {
	ix.setLeaf(i, nw)
	for t := (ix.size + i) / 2; t >= 1; t /= 2 {
		ix.pull(t)
	}
}

// need returns the feature bits a request requires, and false when it names
// a GPU model or MIG profile that no node has.
func (ix *nodeIndex) need(r *jobReq) (uint64, bool) {
	f := uint64(featHealthy)
	if r.nGPU > 0 && r.model != "" {
		id, ok := ix.models[r.model]
		if !ok {
			return 0, len(ix.models) >= 31 // unknown only if the table was not full
		}
		f |= 1 << (featModel0 + id)
	}
	if r.nMIG > 0 {
		id, ok := ix.mprof[r.mig]
		if !ok {
			return 0, len(ix.mprof) >= 32
		}
		f |= 1 << (featProfile0 + id)
	}
	return f, true
}

type searchItem struct {
	key, key2 float64 // the strategy's key, then its tie-breaker (Cheapest: the best-fit score)
	t         int
}

func lessItem(a, b searchItem) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	if a.key2 != b.key2 {
		return a.key2 < b.key2
	}
	return a.t < b.t
}

// bound is the best key (and tie-breaker) any leaf under t can have for
// the strategy (lower is better, compared in that order); leaves get their
// exact key. Cheapest's bound prices r at the subtree's lowest price of
// each resource, and breaks ties as best-fit.
func (ix *nodeIndex) bound(t int, s Strategy, r *jobReq) (float64, float64) {
	switch s {
	case FirstFit:
		return 0, 0 // ties broken by position: leftmost first
	case WorstFit, Balanced:
		return -ix.maxS[t], 0
	case MostAllocated:
		return -ix.maxU[t], 0
	case Cheapest:
		return ix.hourlyCost(r, &ix.price[t]), ix.minS[t]
	default: // BestFit
		return ix.minS[t], 0
	}
}

// Search budgets. A best-first descent is exact but can wander when the
// nodes with the best keys are the ones that do not fit (best-fit and
// most-allocated prefer nearly full nodes); after searchBudget tree steps the
// search falls back to the best of the first fallbackCandidates fitting
// nodes in index order, found by a pruned depth-first walk.
const (
	searchBudget       = 64
	fallbackCandidates = 8
	// cheapestBudget is Cheapest's: its bound (each resource at the
	// subtree's lowest price, which may come from different nodes, some
	// full) is looser, and "cheapest" is a promise worth more steps.
	cheapestBudget = 4096
)

// search calls visit for fitting leaves in strategy order (best key first,
// ties by node index) until visit returns true. fits is the exact check of
// one node. When the budget runs out, the remaining visits come from the
// fallback candidates (the first fitting nodes from node from on, wrapping),
// best key first.
func (ix *nodeIndex) search(r *jobReq, s Strategy, from int, fits func(i int) bool, visit func(i int) bool) {
	need, ok := ix.need(r)
	if !ok {
		return
	}
	if s == FirstFit {
		ix.walk(r, need, 0, fits, visit)
		return
	}
	h := ix.heap[:0]
	defer func() { ix.heap = h[:0] }()
	prune := func(t int) bool { return ix.feat[t]&need != need || !r.vec.Fits(ix.maxFree[t]) }
	push := func(t int) {
		if prune(t) {
			return
		}
		// Items compare by bound, then by leftmost leaf (node order).
		k, k2 := ix.bound(t, s, r)
		it := searchItem{k, k2, t | leftmost(t, ix.size)<<32}
		h = append(h, it)
		for c := len(h) - 1; c > 0; {
			p := (c - 1) / 2
			if !lessItem(h[c], h[p]) {
				break
			}
			h[c], h[p] = h[p], h[c]
			c = p
		}
	}
	pop := func() searchItem {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for p := 0; ; {
			l := 2*p + 1
			if l >= len(h) {
				break
			}
			m := l
			if r := l + 1; r < len(h) && lessItem(h[r], h[l]) {
				m = r
			}
			if !lessItem(h[m], h[p]) {
				break
			}
			h[p], h[m] = h[m], h[p]
			p = m
		}
		return top
	}
	push(1)
	budget := searchBudget
	if s == Cheapest {
		budget = cheapestBudget
	}
	for steps := 0; len(h) > 0; steps++ {
		if steps == budget {
			// Fall back: the best of the first fitting nodes in index order.
			var cands []int
			ix.walk(r, need, from, fits, func(i int) bool {
				cands = append(cands, i)
				return len(cands) >= fallbackCandidates
			})
			slices.SortStableFunc(cands, func(a, b int) int {
				ka, ka2 := ix.bound(ix.size+a, s, r)
				kb, kb2 := ix.bound(ix.size+b, s, r)
				return cmp.Or(cmp.Compare(ka, kb), cmp.Compare(ka2, kb2))
			})
			for _, i := range cands {
				if visit(i) {
					return
				}
			}
			return
		}
		it := pop()
		t := it.t & (1<<32 - 1)
		if t >= ix.size {
			i := t - ix.size
			if fits(i) && visit(i) {
				return
			}
			continue
		}
		push(2 * t)
		push(2*t + 1)
	}
}

// walk visits fitting leaves in index order from node from, wrapping
// around (next fit), until visit returns true. It is a depth-first walk that
// skips every subtree without the features or the room.
func (ix *nodeIndex) walk(r *jobReq, need uint64, from int, fits func(int) bool, visit func(int) bool) {
	if ix.walkRange(r, need, from, ix.size, fits, visit) {
		return
	}
	ix.walkRange(r, need, 0, from, fits, visit)
}

func (ix *nodeIndex) walkRange(r *jobReq, need uint64, lo, hi int, fits func(int) bool, visit func(int) bool) bool {
	type span struct{ t, l, r int }
	var stack [64]span
	sp := 0
	stack[sp] = span{1, 0, ix.size}
	sp++
	for sp > 0 {
		sp--
		x := stack[sp]
		if x.r <= lo || x.l >= hi {
			continue
		}
		if ix.feat[x.t]&need != need || !r.vec.Fits(ix.maxFree[x.t]) {
			continue
		}
		if x.t >= ix.size {
			if i := x.t - ix.size; fits(i) && visit(i) {
				return true
			}
			continue
		}
		m := (x.l + x.r) / 2
		stack[sp] = span{2*x.t + 1, m, x.r}
		stack[sp+1] = span{2 * x.t, x.l, m}
		sp += 2
	}
	return false
}

// leftmost returns the leaf position of the leftmost leaf under t.
func leftmost(t, size int) int {
	for t < size {
		t *= 2
	}
	return t - size
}

// --- feasibility and failure analysis ----------------------------------------

// Feasible reports whether any of nodes could ever run j, judged by
// capacity as if every node were empty and healthy. It returns nil when
// some node could, else a final Rejection (ReasonNoSuchNode, ReasonNoSuchGPU,
// ReasonNoSuchMIG, ReasonNoSuchTier, ReasonImpossible or ReasonInvalid). The
// adapter calls it at intake; Schedule applies the same test to jobs that do
// not fit.
func Feasible(nodes []Node, j Job) *Rejection {
	if j.Priority < 0 || j.Priority > 9 {
		r := reject(j.ID, ReasonInvalid, true, "priority %d outside 0..9", j.Priority)
		return &r
	}
	for d, v := range j.Request {
		if v < 0 {
			r := reject(j.ID, ReasonInvalid, true, "negative %s", Dim(d))
			return &r
		}
	}
	if j.StorageTier != "" && !validTier(j.StorageTier) {
		r := reject(j.ID, ReasonInvalid, true, "unknown storage tier %q", j.StorageTier)
		return &r
	}
	req := newJobReq(&j)
	ptrs := make([]*Node, len(nodes))
	for i := range nodes {
		ptrs[i] = &nodes[i]
	}
	r := feasible(ptrs, &j, &req)
	if r != nil {
		r.JobID = j.ID
	}
	return r
}

// FitsNow reports whether some node of nodes (a Snapshot's view: free
// capacity and devices as they are now) passes every check a placement of
// j makes: health, free vector, selector, GPUs (model, memory, count), MIG
// instances, NUMA room. Schedule places j only on such a node; reservations
// and quotas only refuse more. It is monotone: with less free capacity or
// fewer free devices, it stays false. The dispatcher uses it to tell that
// a new job cannot start before capacity frees (see dispatch.schedule).
func FitsNow(nodes []Node, j Job) bool {
	return NewFitter(nodes).Fits(&j)
}

// Fitter answers FitsNow for many jobs against one view of the nodes: it
// builds each node's working view once, and refuses at once a job whose
// request exceeds, in some dimension, the most any healthy node has free
// (where most jobs of a full pool end). The dispatcher asks it about every
// pending job between full plans (dispatch/partial.go).
type Fitter struct {
	nodes   []nodeWork
	maxFree Resources
	scratch []int
}

// NewFitter returns a Fitter over nodes, which it reads but does not keep
// a copy of: nodes must not change while the Fitter is in use.
func NewFitter(nodes []Node) *Fitter {
	f := &Fitter{nodes: make([]nodeWork, 0, len(nodes)), scratch: make([]int, 0, 64)}
	for i := range nodes {
		nw := newNodeWork(&nodes[i])
		if !nw.healthy {
			continue
		}
		for d := range f.maxFree {
			f.maxFree[d] = max(f.maxFree[d], nw.free[d])
		}
		f.nodes = append(f.nodes, nw)
	}
	return f
}

// Admits reports whether some healthy node has v free in every dimension
// (the devices aside). When it does not, no job whose RequestVector is at
// least v in every dimension fits.
func (f *Fitter) Admits(v Resources) bool { return v.Fits(f.maxFree) }

// Room is the free vector of the Fitter's healthy nodes, summed: no set of
// jobs whose request vectors add up to more than it, in any dimension, can
// all be placed at once.
func (f *Fitter) Room() Resources {
	var r Resources
	for i := range f.nodes {
		r = r.Add(f.nodes[i].free)
	}
	return r
}

// RequestVector is the amount a placement of j takes from a node's free
// vector (its Request, with MIG instances and storage tiers counted as the
// placement counts them).
func RequestVector(j *Job) Resources { return fitReq(j).vec }

// Fits reports FitsNow(nodes, *j) for the Fitter's nodes.
func (f *Fitter) Fits(j *Job) bool {
	if j.MIGProfile == "" && j.StorageTier == "" && !j.Request.Fits(f.maxFree) {
		return false // the request is the vector fitReq would check: no need to build it
	}
	r := fitReq(j)
	if !r.vec.Fits(f.maxFree) {
		return false
	}
	for i := range f.nodes {
		if f.nodes[i].fits(&r, f.scratch) {
			return true
		}
	}
	return false
}

func feasible(nodes []*Node, j *Job, r *jobReq) *Rejection {
	nf := &NoFit{Nodes: len(nodes)}
	sel, gpu, mig, tier := 0, 0, 0, 0
	tierDim, hasTier := TierDim(j.StorageTier)
	for _, n := range nodes {
		if !matchSelector(n, r.selector) {
			nf.Selector++
			continue
		}
		sel++
		if (r.nGPU > 0 || r.model != "") && !gpusCouldFit(n, r) {
			nf.GPUModel++
			continue
		}
		gpu++
		if r.nMIG > 0 && !migCouldFit(n, r) {
			nf.MIG++
			continue
		}
		mig++
		if hasTier && n.Capacity[tierDim] < r.vec[tierDim] {
			nf.Short[tierDim]++
			continue
		}
		tier++
		short := false
		for d := range NumDims {
			if r.vec[d] > n.Capacity[d] {
				nf.Short[d]++
				short = true
				break
			}
		}
		if !short {
			return nil
		}
	}
	var rej Rejection
	switch {
	case sel == 0:
		rej = reject("", ReasonNoSuchNode, true, "no node matches selector %s", formatSelector(r.selector))
	case gpu == 0:
		what := fmt.Sprintf("%d GPU(s)", max(r.nGPU, 1))
		if r.model != "" {
			what += fmt.Sprintf(" of model %s", r.model)
		}
		if r.gpuMem > 0 {
			what += fmt.Sprintf(" with %d MiB each", r.gpuMem)
		}
		rej = reject("", ReasonNoSuchGPU, true, "no node has %s", what)
	case mig == 0:
		rej = reject("", ReasonNoSuchMIG, true, "no node has %d MIG instance(s) of profile %q", r.nMIG, r.mig)
	case tier == 0:
		rej = reject("", ReasonNoSuchTier, true, "no node has %d GiB of %s storage", r.vec[tierDim], j.StorageTier)
	default:
		rej = reject("", ReasonImpossible, true, "no node could ever fit %s (%s)", r.vec, nf)
	}
	rej.NoFit = nf
	return &rej
}

func gpusCouldFit(n *Node, r *jobReq) bool {
	if len(n.GPUs) == 0 {
		return r.model == "" && r.gpuMem == 0
	}
	c := 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if (r.model == "" || g.Model == r.model) && g.MemoryMiB >= r.gpuMem && (len(g.MIG) == 0 || r.nGPU == 0) {
			c++
		}
	}
	return c >= max(r.nGPU, 1)
}

func migCouldFit(n *Node, r *jobReq) bool {
	c := 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if r.model != "" && g.Model != r.model {
			continue
		}
		for _, m := range g.MIG {
			if m.Profile == r.mig {
				c++
			}
		}
	}
	return c >= r.nMIG
}

// analyze explains why r fits no node now: a final reason if no node could
// ever fit it, else ReasonNoFit with per-node counts. Cached per shape.
func (c *cycle) analyze(r *jobReq) *Rejection {
	key := r.shape()
	if rej, ok := c.analyzed[key]; ok {
		return rej
	}
	ptrs := make([]*Node, len(c.nodes))
	for i := range c.nodes {
		ptrs[i] = c.nodes[i].node
	}
	j := &Job{StorageTier: tierName(r)}
	rej := feasible(ptrs, j, r)
	if rej == nil {
		nf := &NoFit{Nodes: len(c.nodes)}
		for i := range c.nodes {
			switch f := c.nodes[i].check(r, c.scratch); {
			case f == fitOK:
			case f == failUnhealthy:
				nf.Unhealthy++
			case f == failSelector:
				nf.Selector++
			case f == failGPUModel:
				nf.GPUModel++
			case f == failMIG:
				nf.MIG++
			case f == failNUMA:
				nf.NUMA++
			case f >= failShort:
				nf.Short[f-failShort]++
			}
		}
		r := reject("", ReasonNoFit, false, "%s", nf)
		r.NoFit = nf
		rej = &r
	}
	c.analyzed[key] = rej
	return rej
}

func formatSelector(sel map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + sel[k])
	}
	return b.String()
}

// tierName recovers the tier a normalized request asks for, "" if several.
func tierName(r *jobReq) string {
	t := ""
	for _, d := range []Dim{DimNVMe, DimSSD, DimHDD} {
		if r.vec[d] > 0 {
			if t != "" {
				return ""
			}
			t = dimNames[d]
		}
	}
	return t
}

// NoEasier reports whether x asks for no less than y of everything a
// placement checks, backfill included: the same node selector, GPU model,
// MIG profile, storage tier and NUMA locality, at least y's request in
// every dimension, and an end no earlier than y's as backfill plans it
// (the time limit, else the estimate; neither: never ends). Then, within a
// cycle, a node (or the reservation) that refuses y refuses x: where y
// found no node, x finds none later in the same cycle either, as the room
// only shrinks (the dispatcher's partial plans rely on it).
func NoEasier(x, y *Job) bool {
	if x.GPUModel != y.GPUModel || x.MIGProfile != y.MIGProfile || x.StorageTier != y.StorageTier ||
		x.NUMALocal != y.NUMALocal || !maps.Equal(x.NodeSelector, y.NodeSelector) || !y.Request.Fits(x.Request) {
		return false
	}
	endless := func(j *Job) bool { return j.EstDuration == 0 && j.TimeLimit == 0 }
	latest := func(j *Job) time.Duration {
		if j.TimeLimit > 0 {
			return j.TimeLimit
		}
		return j.EstDuration
	}
	switch {
	case endless(x):
		return true
	case endless(y):
		return false
	}
	return latest(x) >= latest(y)
}
