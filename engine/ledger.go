package engine

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// This file is the pool's book of nodes and allocations: the one place that
// applies a Plan's placements to the nodes (the simulator and the live
// dispatcher both use it) and builds the nodes of the next Snapshot.

// Ledger holds the pool's nodes (their inventory) and what is allocated on
// them, by job ID. Apply re-checks a placement against the free capacity
// exactly as Schedule decided it and records it; Snapshot returns the nodes
// with Allocated, the device InUse flags and the NUMA free figures computed
// from the allocations, ready for Snapshot.Nodes.
//
// A Ledger is not safe for concurrent use: its owner (the dispatcher)
// guards it with its own lock. The zero value is not usable; call NewLedger.
type Ledger struct {
	nodes  map[string]*ledgerNode
	names  []string // sorted
	allocs map[string]*Allocation
	byNode map[string]map[string]*Allocation // node name (known or not) → job ID → allocation
}

// Allocation is one job's hold on one node.
type Allocation struct {
	Job     Job       // the job as applied (Job.ID is the key)
	Node    string    // node name
	Vec     Resources // taken from the node: the normalized request (a MIG job takes no GPU dimensions; a storage tier's amount is in that tier's dimension)
	GPUs    []string  // whole GPUs held, by ID
	MIG     []string  // MIG instances held, by ID
	NUMA    int       // NUMA domain ID of a NUMA-local job; -1 = none
	Started time.Time // as given to ApplyAt (zero for Apply)
	// CPUs are the CPU IDs the job may run on, when the node lists CPU IDs
	// (NUMADomain.CPUs); empty otherwise. With Exclusive they are the job's
	// alone (a request of whole cores: Request[DimCPU] a positive multiple
	// of 1000, lowest free IDs first, from its NUMA domain when NUMA-local),
	// like kubelet's static CPU manager. Without, they are the shared CPUs:
	// the node's (or its NUMA domain's) CPUs no job held exclusively when
	// the job was applied; later exclusive holds shrink that pool
	// (Ledger.SharedCPUs says what it is now).
	CPUs      []int
	Exclusive bool
}

// Running returns the allocation as the engine's running job.
func (a *Allocation) Running() Running {
	return Running{Job: a.Job, Node: a.Node, Started: a.Started, GPUs: slices.Clone(a.GPUs), MIG: slices.Clone(a.MIG)}
}

func (a *Allocation) clone() Allocation {
	c := *a
	c.Job.NodeSelector = maps.Clone(a.Job.NodeSelector)
	c.GPUs = slices.Clone(a.GPUs)
	c.MIG = slices.Clone(a.MIG)
	c.CPUs = slices.Clone(a.CPUs)
	return c
}

// ApplyCode says why Apply refused a placement.
type ApplyCode string

// Apply refusals.
const (
	ApplyInvalid        ApplyCode = "invalid"         // no job ID, the placement names another job, or a negative request
	ApplyDuplicate      ApplyCode = "duplicate"       // the job already holds an allocation
	ApplyUnknownNode    ApplyCode = "unknown_node"    // no node of that name
	ApplyUnhealthy      ApplyCode = "unhealthy"       // the node is marked unhealthy
	ApplySelector       ApplyCode = "selector"        // the node's labels do not match the job's NodeSelector
	ApplyUnknownDevice  ApplyCode = "unknown_device"  // a named GPU or MIG instance is not on the node
	ApplyDeviceInUse    ApplyCode = "device_in_use"   // a named GPU or MIG instance is held
	ApplyDeviceMismatch ApplyCode = "device_mismatch" // wrong number of devices, GPU in MIG mode, wrong model, profile or memory, a device named twice
	ApplyNUMA           ApplyCode = "numa"            // a NUMA-local job without a domain, or an unknown domain
	ApplyNoCapacity     ApplyCode = "no_capacity"     // a dimension (Dim), or the NUMA domain's CPU or memory, lacks the room
	ApplyNoCPUs         ApplyCode = "no_cpus"         // too few CPU IDs free to hold the job's whole cores exclusively
)

// ApplyError is Apply's refusal. The ledger is unchanged.
type ApplyError struct {
	JobID   string
	Node    string
	Code    ApplyCode
	Dim     Dim // ApplyNoCapacity: the short dimension; -1 otherwise
	Message string
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("engine: ledger: %s on %s: %s: %s", e.JobID, e.Node, e.Code, e.Message)
}

// ledgerNode is one node: its inventory and the use its allocations make.
type ledgerNode struct {
	inv     Node              // as given to SetNode (deep copy); Allocated and InUse flags cleared; NUMA figures are capacities
	gpuIdx  map[string]int    // GPU ID → index
	migIdx  map[string][2]int // MIG ID → (GPU index, instance index)
	numaIdx map[int]int       // domain ID → index
	cpus    []int             // every CPU ID of the node, ascending
	cpuDom  map[int]int       // CPU ID → domain index
	domCPUs [][]int           // per domain: its CPU IDs, ascending

	alloc   Resources  // Σ Vec of the allocations
	gpuHeld []string   // per GPU: the job holding it whole; "" = free
	migHeld [][]string // per GPU, per instance: the holder
	numaCPU []int64    // per domain: CPU in use (millicores)
	numaMem []int64    // per domain: memory in use (MiB)
	cpuHeld map[int]string
	// overlap: two allocations hold the same device or CPU (Restore);
	// a release then recounts the node instead of subtracting.
	overlap bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{nodes: map[string]*ledgerNode{}, allocs: map[string]*Allocation{}, byNode: map[string]map[string]*Allocation{}}
}

// SetNode adds a node, or replaces a node's inventory while keeping its
// allocations. The inventory is n's Name, Labels, Capacity, GPUs (with MIG
// instances), NUMA domains (CPU and Memory are the domain's capacity; CPUs
// its CPU IDs, if known: in all domains or none), Cost, Price and Unhealthy; n.Allocated
// and the InUse flags are ignored (the ledger's allocations are the use;
// leave out of the inventory whatever the pool may not use). A node that shrank below its allocations
// is over-committed, not an error: it gets no new placements until enough
// is released. Allocations naming devices the new inventory lacks keep
// them, but they count nowhere until the devices come back. SetNode copies
// n. The error reports a malformed inventory (no name, an ID used twice, a
// negative capacity); the ledger is then unchanged.
func (l *Ledger) SetNode(n Node) error {
	if n.Name == "" {
		return fmt.Errorf("engine: ledger: node without a name")
	}
	for d, v := range n.Capacity {
		if v < 0 {
			return fmt.Errorf("engine: ledger: node %s: negative %s capacity", n.Name, Dim(d))
		}
	}
	ln := &ledgerNode{inv: cloneNode(&n), gpuIdx: map[string]int{}, migIdx: map[string][2]int{}, numaIdx: map[int]int{}}
	ln.inv.Allocated = Resources{}
	for i := range ln.inv.GPUs {
		g := &ln.inv.GPUs[i]
		g.InUse = false
		if _, dup := ln.gpuIdx[g.ID]; dup || g.ID == "" {
			return fmt.Errorf("engine: ledger: node %s: GPU ID %q empty or used twice", n.Name, g.ID)
		}
		ln.gpuIdx[g.ID] = i
	}
	for i := range ln.inv.GPUs {
		g := &ln.inv.GPUs[i]
		for k := range g.MIG {
			g.MIG[k].InUse = false
			id := g.MIG[k].ID
			_, dupG := ln.gpuIdx[id]
			if _, dup := ln.migIdx[id]; dup || dupG || id == "" {
				return fmt.Errorf("engine: ledger: node %s: MIG instance ID %q empty or used twice", n.Name, id)
			}
			ln.migIdx[id] = [2]int{i, k}
		}
	}
	ln.cpuDom = map[int]int{}
	ln.domCPUs = make([][]int, len(ln.inv.NUMA))
	for d := range ln.inv.NUMA {
		dom := &ln.inv.NUMA[d]
		if (len(dom.CPUs) == 0) != (len(ln.inv.NUMA[0].CPUs) == 0) {
			return fmt.Errorf("engine: ledger: node %s: some NUMA domains list CPU IDs, some do not", n.Name)
		}
		if _, dup := ln.numaIdx[dom.ID]; dup || dom.ID < 0 {
			return fmt.Errorf("engine: ledger: node %s: NUMA domain ID %d negative or used twice", n.Name, dom.ID)
		}
		if dom.CPU < 0 || dom.Memory < 0 {
			return fmt.Errorf("engine: ledger: node %s: NUMA domain %d has a negative capacity", n.Name, dom.ID)
		}
		ln.numaIdx[dom.ID] = d
		for _, c := range dom.CPUs {
			if _, dup := ln.cpuDom[c]; dup {
				return fmt.Errorf("engine: ledger: node %s: CPU %d listed twice", n.Name, c)
			}
			ln.cpuDom[c] = d
			ln.cpus = append(ln.cpus, c)
		}
		ln.domCPUs[d] = slices.Sorted(slices.Values(dom.CPUs))
	}
	slices.Sort(ln.cpus)
	if _, ok := l.nodes[n.Name]; !ok {
		i, _ := slices.BinarySearch(l.names, n.Name)
		l.names = slices.Insert(l.names, i, n.Name)
	}
	l.nodes[n.Name] = ln
	l.recount(n.Name, ln)
	return nil
}

// reset clears the use of the node's allocations.
func (ln *ledgerNode) reset() {
	ln.alloc = Resources{}
	ln.gpuHeld = make([]string, len(ln.inv.GPUs))
	ln.migHeld = make([][]string, len(ln.inv.GPUs))
	for i := range ln.inv.GPUs {
		if len(ln.inv.GPUs[i].MIG) > 0 {
			ln.migHeld[i] = make([]string, len(ln.inv.GPUs[i].MIG))
		}
	}
	ln.numaCPU = make([]int64, len(ln.inv.NUMA))
	ln.numaMem = make([]int64, len(ln.inv.NUMA))
	ln.cpuHeld = map[int]string{}
	ln.overlap = false
}

// recount recomputes a node's use from its allocations.
func (l *Ledger) recount(name string, ln *ledgerNode) {
	ln.reset()
	on := l.byNode[name]
	for _, id := range slices.Sorted(maps.Keys(on)) {
		ln.hold(on[id])
	}
}

// record adds a to the ledger's indexes (not to the node's use).
func (l *Ledger) record(a *Allocation) {
	l.allocs[a.Job.ID] = a
	on := l.byNode[a.Node]
	if on == nil {
		on = map[string]*Allocation{}
		l.byNode[a.Node] = on
	}
	on[a.Job.ID] = a
}

// forget removes a from the ledger's indexes.
func (l *Ledger) forget(a *Allocation) {
	delete(l.allocs, a.Job.ID)
	if on := l.byNode[a.Node]; on != nil {
		delete(on, a.Job.ID)
		if len(on) == 0 {
			delete(l.byNode, a.Node)
		}
	}
}

// hold adds a's use to the node (devices and domains it lacks are skipped).
func (ln *ledgerNode) hold(a *Allocation) { ln.account(a, a.Job.ID, 1) }

// unhold removes a's use from the node.
func (ln *ledgerNode) unhold(a *Allocation) { ln.account(a, "", -1) }

func (ln *ledgerNode) account(a *Allocation, holder string, sign int64) {
	if sign > 0 {
		ln.alloc = ln.alloc.Add(a.Vec)
	} else {
		ln.alloc = ln.alloc.Sub(a.Vec)
	}
	for _, id := range a.GPUs {
		if i, ok := ln.gpuIdx[id]; ok {
			ln.overlap = ln.overlap || sign > 0 && ln.gpuHeld[i] != ""
			ln.gpuHeld[i] = holder
		}
	}
	for _, id := range a.MIG {
		if x, ok := ln.migIdx[id]; ok {
			ln.overlap = ln.overlap || sign > 0 && ln.migHeld[x[0]][x[1]] != ""
			ln.migHeld[x[0]][x[1]] = holder
		}
	}
	if d, ok := ln.numaIdx[a.NUMA]; ok && a.NUMA >= 0 {
		ln.numaCPU[d] += sign * a.Vec[DimCPU]
		ln.numaMem[d] += sign * a.Vec[DimMemory]
	}
	if !a.Exclusive {
		return
	}
	for _, c := range a.CPUs {
		d, ok := ln.cpuDom[c]
		if !ok {
			continue
		}
		if sign > 0 {
			_, held := ln.cpuHeld[c]
			ln.overlap = ln.overlap || held
			ln.cpuHeld[c] = holder
		} else {
			delete(ln.cpuHeld, c)
		}
		if a.NUMA < 0 {
			// A job that is not NUMA-local still takes its exclusive
			// CPUs from their domains.
			ln.numaCPU[d] += sign * 1000
		}
	}
}

// SetHealthy marks a node healthy or not (an unhealthy node gets no new
// placements; its allocations stay). It reports whether the node exists.
func (l *Ledger) SetHealthy(name string, healthy bool) bool {
	ln, ok := l.nodes[name]
	if ok {
		ln.inv.Unhealthy = !healthy
	}
	return ok
}

// RemoveNode removes a node and the allocations on it, and returns those
// allocations by job ID (nil if there is no such node).
func (l *Ledger) RemoveNode(name string) []Allocation {
	if _, ok := l.nodes[name]; !ok {
		return nil
	}
	delete(l.nodes, name)
	if i, ok := slices.BinarySearch(l.names, name); ok {
		l.names = slices.Delete(l.names, i, i+1)
	}
	on := l.byNode[name]
	out := make([]Allocation, 0, len(on))
	for _, id := range slices.Sorted(maps.Keys(on)) {
		out = append(out, *on[id])
		l.forget(on[id])
	}
	return out
}

// Apply records placement p of job j if it fits now: see ApplyAt.
func (l *Ledger) Apply(j Job, p Placement) error { return l.ApplyAt(j, p, time.Time{}) }

// ApplyAt re-checks placement p of job j against the node's free capacity
// exactly as Schedule decides a placement, and records it as started at
// started. The checks, in the engine's order: the node exists and is
// healthy, its labels match the NodeSelector, the named GPUs exist, are
// free, not in MIG mode, of the model and with the memory asked for, and
// are as many as the job asks (none on a node that lists no GPUs: its GPUs
// are counted by the vector), the named MIG instances exist, are free and
// of the profile (and model), a NUMA-local job names a domain with the CPU
// and memory (on a node with domains), every dimension of the normalized
// request fits the free amount, and, on a node that lists CPU IDs, enough
// of them are free to hold the job's whole cores exclusively. A job that
// is not NUMA-local takes nothing from a domain, whatever p.NUMA says (the
// engine's convention), except the exclusive CPUs it is given.
//
// When the placement does not fit, ApplyAt returns an *ApplyError and the
// ledger is unchanged.
//
// One case where the engine and the ledger can disagree: on a node that
// lists CPU IDs, the exclusive CPUs of a job that is not NUMA-local count
// against their domains' free CPU, which the engine only sees in the next
// snapshot; a NUMA-local placement later in the same plan on such a domain
// may then be refused (ApplyNoCPUs or ApplyNoCapacity) and should be
// retried next cycle.
func (l *Ledger) ApplyAt(j Job, p Placement, started time.Time) error {
	fail := func(code ApplyCode, format string, args ...any) error {
		return &ApplyError{JobID: j.ID, Node: p.Node, Code: code, Dim: -1, Message: fmt.Sprintf(format, args...)}
	}
	if j.ID == "" || p.JobID != "" && p.JobID != j.ID {
		return fail(ApplyInvalid, "placement for %q applied to job %q", p.JobID, j.ID)
	}
	for d, v := range j.Request {
		if v < 0 {
			return fail(ApplyInvalid, "negative %s", Dim(d))
		}
	}
	if _, dup := l.allocs[j.ID]; dup {
		return fail(ApplyDuplicate, "the job already holds an allocation on %s", l.allocs[j.ID].Node)
	}
	ln, ok := l.nodes[p.Node]
	if !ok {
		return fail(ApplyUnknownNode, "no such node")
	}
	n := &ln.inv
	if n.Unhealthy {
		return fail(ApplyUnhealthy, "node is unhealthy")
	}
	if !matchSelector(n, j.NodeSelector) {
		return fail(ApplySelector, "selector %s does not match", formatSelector(j.NodeSelector))
	}
	r := newJobReq(&j)
	a := &Allocation{Job: j, Node: n.Name, Vec: r.vec, NUMA: -1, Started: started}
	a.Job.NodeSelector = maps.Clone(j.NodeSelector)

	// Whole GPUs.
	if r.mig == "" && len(p.MIG) > 0 {
		return fail(ApplyDeviceMismatch, "MIG instances for a job without a MIG profile")
	}
	if r.mig != "" && len(p.GPUs) > 0 {
		return fail(ApplyDeviceMismatch, "whole GPUs for a MIG job")
	}
	if len(n.GPUs) == 0 {
		if len(p.GPUs) > 0 {
			return fail(ApplyUnknownDevice, "GPU %s is not on the node (it lists no GPUs)", p.GPUs[0])
		}
		if r.model != "" || r.gpuMem > 0 {
			return fail(ApplyDeviceMismatch, "the node lists no GPUs of a model or memory")
		}
	} else if r.mig == "" {
		if len(p.GPUs) != r.nGPU {
			return fail(ApplyDeviceMismatch, "got %d GPUs, want %d", len(p.GPUs), r.nGPU)
		}
		if r.nGPU == 0 && r.model != "" && !slices.ContainsFunc(n.GPUs, func(g GPU) bool { return g.Model == r.model }) {
			return fail(ApplyDeviceMismatch, "no GPU of model %s on the node", r.model)
		}
		for k, id := range p.GPUs {
			i, ok := ln.gpuIdx[id]
			if !ok {
				return fail(ApplyUnknownDevice, "GPU %s is not on the node", id)
			}
			if slices.Contains(p.GPUs[:k], id) {
				return fail(ApplyDeviceMismatch, "GPU %s named twice", id)
			}
			g := &n.GPUs[i]
			switch {
			case len(g.MIG) > 0:
				return fail(ApplyDeviceMismatch, "GPU %s is in MIG mode", id)
			case ln.gpuHeld[i] != "":
				return fail(ApplyDeviceInUse, "GPU %s is held by %s", id, ln.gpuHeld[i])
			case r.model != "" && g.Model != r.model:
				return fail(ApplyDeviceMismatch, "GPU %s is a %s, want %s", id, g.Model, r.model)
			case g.MemoryMiB < r.gpuMem:
				return fail(ApplyDeviceMismatch, "GPU %s has %d MiB, want %d", id, g.MemoryMiB, r.gpuMem)
			}
		}
		a.GPUs = slices.Clone(p.GPUs)
	}
	// MIG instances.
	if r.mig != "" {
		if len(p.MIG) != r.nMIG {
			return fail(ApplyDeviceMismatch, "got %d MIG instances, want %d", len(p.MIG), r.nMIG)
		}
		for k, id := range p.MIG {
			x, ok := ln.migIdx[id]
			if !ok {
				return fail(ApplyUnknownDevice, "MIG instance %s is not on the node", id)
			}
			if slices.Contains(p.MIG[:k], id) {
				return fail(ApplyDeviceMismatch, "MIG instance %s named twice", id)
			}
			g := &n.GPUs[x[0]]
			switch {
			case g.MIG[x[1]].Profile != r.mig:
				return fail(ApplyDeviceMismatch, "MIG instance %s is a %s, want %s", id, g.MIG[x[1]].Profile, r.mig)
			case r.model != "" && g.Model != r.model:
				return fail(ApplyDeviceMismatch, "MIG instance %s is on a %s, want %s", id, g.Model, r.model)
			case ln.migHeld[x[0]][x[1]] != "":
				return fail(ApplyDeviceInUse, "MIG instance %s is held by %s", id, ln.migHeld[x[0]][x[1]])
			case ln.gpuHeld[x[0]] != "":
				return fail(ApplyDeviceInUse, "the GPU of MIG instance %s is held whole by %s", id, ln.gpuHeld[x[0]])
			}
		}
		a.MIG = slices.Clone(p.MIG)
	}
	// NUMA domain.
	dom := -1
	if r.numa {
		switch d, ok := ln.numaIdx[p.NUMA]; {
		case len(n.NUMA) == 0 && p.NUMA < 0:
			// The node is one domain.
		case p.NUMA < 0:
			return fail(ApplyNUMA, "NUMA-local job placed without a domain")
		case !ok:
			return fail(ApplyNUMA, "no NUMA domain %d", p.NUMA)
		default:
			free := ln.numaFree(d)
			if r.vec[DimCPU] > free.CPU {
				return &ApplyError{JobID: j.ID, Node: n.Name, Code: ApplyNoCapacity, Dim: DimCPU,
					Message: fmt.Sprintf("NUMA domain %d has %d millicores free, want %d", p.NUMA, free.CPU, r.vec[DimCPU])}
			}
			if r.vec[DimMemory] > free.Memory {
				return &ApplyError{JobID: j.ID, Node: n.Name, Code: ApplyNoCapacity, Dim: DimMemory,
					Message: fmt.Sprintf("NUMA domain %d has %d MiB free, want %d", p.NUMA, free.Memory, r.vec[DimMemory])}
			}
			dom, a.NUMA = d, p.NUMA
		}
	}
	// Every dimension.
	free := ln.free()
	for d := range NumDims {
		if r.vec[d] > free[d] {
			return &ApplyError{JobID: j.ID, Node: n.Name, Code: ApplyNoCapacity, Dim: d,
				Message: fmt.Sprintf("request %s exceeds free %s", r.vec, free)}
		}
	}
	// CPU IDs.
	if len(ln.cpus) > 0 {
		pool := ln.cpus
		if dom >= 0 {
			pool = ln.domCPUs[dom]
		}
		if c := r.vec[DimCPU]; c > 0 && c%1000 == 0 {
			a.CPUs = ln.pickCPUs(pool, int(c/1000), dom < 0)
			if want := int(c / 1000); len(a.CPUs) < want {
				return fail(ApplyNoCPUs, "%d CPUs free to hold exclusively, want %d", len(a.CPUs), want)
			}
			a.Exclusive = true
		} else {
			a.CPUs = ln.shared(pool)
		}
	}
	l.record(a)
	ln.hold(a)
	return nil
}

// free is Capacity − Allocated, clamped at 0 (Node.Free).
func (ln *ledgerNode) free() Resources {
	f := ln.inv.Capacity.Sub(ln.alloc)
	for i := range f {
		f[i] = max(f[i], 0)
	}
	return f
}

// numaFree is domain d with its free CPU and memory, clamped at 0.
func (ln *ledgerNode) numaFree(d int) NUMADomain {
	dom := ln.inv.NUMA[d]
	dom.CPU = max(dom.CPU-ln.numaCPU[d], 0)
	dom.Memory = max(dom.Memory-ln.numaMem[d], 0)
	return dom
}

// pickCPUs chooses want CPUs of pool that no job holds exclusively, lowest
// IDs first. For a job that is not NUMA-local (spread), a CPU is first
// taken only while its domain's free CPU figure has a whole core left, so
// that the exclusive CPUs do not over-commit a domain that NUMA-local jobs
// use; only when that leaves too few are the other free CPUs taken, again
// lowest first. It returns fewer than want when there are not enough.
func (ln *ledgerNode) pickCPUs(pool []int, want int, spread bool) []int {
	var out []int
	var domFree []int64
	if spread {
		domFree = make([]int64, len(ln.inv.NUMA))
		for d := range domFree {
			domFree[d] = ln.numaFree(d).CPU
		}
	}
	for _, id := range pool {
		if _, held := ln.cpuHeld[id]; held {
			continue
		}
		if spread {
			d := ln.cpuDom[id]
			if domFree[d] < 1000 {
				continue
			}
			domFree[d] -= 1000
		}
		if out = append(out, id); len(out) == want {
			return out
		}
	}
	if !spread {
		return out
	}
	for _, id := range pool {
		if _, held := ln.cpuHeld[id]; !held && !slices.Contains(out, id) {
			if out = append(out, id); len(out) == want {
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// shared returns the CPUs of pool no job holds exclusively.
func (ln *ledgerNode) shared(pool []int) []int {
	var out []int
	for _, id := range pool {
		if _, held := ln.cpuHeld[id]; !held {
			out = append(out, id)
		}
	}
	return out
}

// Release removes a job's allocation and returns it; false if the job
// holds none.
func (l *Ledger) Release(jobID string) (Allocation, bool) {
	a, ok := l.allocs[jobID]
	if !ok {
		return Allocation{}, false
	}
	l.forget(a)
	if ln, ok := l.nodes[a.Node]; ok {
		if ln.overlap {
			l.recount(a.Node, ln)
		} else {
			ln.unhold(a)
		}
	}
	return *a, true
}

// Restore records placement p of job j as it is, without Apply's checks:
// for a job known to be running there (found again after a restart, say),
// whatever the ledger thinks of the node. It may over-commit the node, hold
// a device another allocation holds (the device stays in use until both
// are released), name devices or a NUMA domain the node lacks (they count
// once the inventory has them), or name a node the ledger does not know
// yet (it counts once SetNode adds it). It replaces the job's allocation if
// there is one. CPU IDs are handed out as Apply would, when enough are
// free; otherwise the job gets the shared CPUs (none on a node not known
// yet). A job without an ID is ignored.
func (l *Ledger) Restore(j Job, p Placement, started time.Time) {
	if j.ID == "" {
		return
	}
	if _, ok := l.allocs[j.ID]; ok {
		l.Release(j.ID)
	}
	r := newJobReq(&j)
	a := &Allocation{Job: j, Node: p.Node, Vec: r.vec, GPUs: slices.Clone(p.GPUs), MIG: slices.Clone(p.MIG), NUMA: -1, Started: started}
	a.Job.NodeSelector = maps.Clone(j.NodeSelector)
	if j.NUMALocal && p.NUMA >= 0 {
		a.NUMA = p.NUMA
	}
	ln, ok := l.nodes[p.Node]
	if ok && len(ln.cpus) > 0 {
		pool := ln.cpus
		d, local := ln.numaIdx[a.NUMA]
		if local && a.NUMA >= 0 {
			pool = ln.domCPUs[d]
		}
		if c := r.vec[DimCPU]; c > 0 && c%1000 == 0 {
			if cpus := ln.pickCPUs(pool, int(c/1000), !local); len(cpus) == int(c/1000) {
				a.CPUs, a.Exclusive = cpus, true
			}
		}
		if !a.Exclusive {
			a.CPUs = ln.shared(pool)
		}
	}
	l.record(a)
	if ok {
		ln.hold(a)
	}
}

// Allocation returns a job's allocation (a copy).
func (l *Ledger) Allocation(jobID string) (Allocation, bool) {
	a, ok := l.allocs[jobID]
	if !ok {
		return Allocation{}, false
	}
	return a.clone(), true
}

// Allocations returns every allocation (copies), by job ID.
func (l *Ledger) Allocations() []Allocation {
	out := make([]Allocation, 0, len(l.allocs))
	for _, id := range slices.Sorted(maps.Keys(l.allocs)) {
		out = append(out, l.allocs[id].clone())
	}
	return out
}

// NumNodes returns the number of nodes.
func (l *Ledger) NumNodes() int { return len(l.nodes) }

// NumAllocations returns the number of allocations.
func (l *Ledger) NumAllocations() int { return len(l.allocs) }

// Names returns the node names, sorted.
func (l *Ledger) Names() []string { return slices.Clone(l.names) }

// Node returns one node as Snapshot returns it (a deep copy).
func (l *Ledger) Node(name string) (Node, bool) {
	ln, ok := l.nodes[name]
	if !ok {
		return Node{}, false
	}
	var n Node
	ln.fill(&n, true)
	return n, true
}

// SharedCPUs returns the CPU IDs of a node (of its NUMA domain numa, when
// numa ≥ 0) that no job holds exclusively now, ascending; nil for a node
// that lists no CPU IDs or an unknown node or domain.
func (l *Ledger) SharedCPUs(node string, numa int) []int {
	ln, ok := l.nodes[node]
	if !ok {
		return nil
	}
	if numa < 0 {
		return ln.shared(ln.cpus)
	}
	d, ok := ln.numaIdx[numa]
	if !ok {
		return nil
	}
	return ln.shared(ln.domCPUs[d])
}

// Snapshot returns every node, by name, as Schedule expects them:
// Allocated is the sum of the allocations, a GPU held whole or a MIG
// instance held is InUse, and each NUMA domain's CPU and Memory are what
// its capacity leaves free (NUMA-local allocations, and the exclusive CPUs
// of the others, taken; never below 0). The nodes are deep copies: changing
// them does not touch the ledger.
func (l *Ledger) Snapshot() []Node {
	out := make([]Node, len(l.names))
	for i, name := range l.names {
		l.nodes[name].fill(&out[i], true)
	}
	return out
}

// SnapshotInto is Snapshot for the nodes named in order (all, by name,
// when order is nil; unknown names are skipped), written into dst's storage
// (dst[:0] and the GPU, MIG and NUMA slices of its elements are reused), for
// callers that build a snapshot every cycle. Unlike Snapshot it shares each
// node's Labels map and NUMA CPU lists with the ledger: treat them as read
// only (Schedule does).
func (l *Ledger) SnapshotInto(dst []Node, order []string) []Node {
	if order == nil {
		order = l.names
	}
	out := dst[:0]
	for _, name := range order {
		ln, ok := l.nodes[name]
		if !ok {
			continue
		}
		if len(out) < cap(out) {
			out = out[:len(out)+1]
		} else {
			out = append(out, Node{})
		}
		ln.fill(&out[len(out)-1], false)
	}
	return out
}

// fill writes the node's snapshot into n, reusing n's slices; deep copies
// the labels and CPU lists too.
func (ln *ledgerNode) fill(n *Node, deep bool) {
	inv := &ln.inv
	n.Name = inv.Name
	n.Capacity = inv.Capacity
	n.Allocated = ln.alloc
	n.Unhealthy = inv.Unhealthy
	n.Cost, n.Price = inv.Cost, inv.Price
	n.Labels = inv.Labels
	if deep {
		n.Labels = maps.Clone(inv.Labels)
	}
	if len(inv.GPUs) == 0 {
		n.GPUs = nil
	} else {
		old := n.GPUs[:cap(n.GPUs)]
		gpus := n.GPUs[:0]
		if cap(gpus) < len(inv.GPUs) {
			gpus = make([]GPU, 0, len(inv.GPUs))
		}
		for i := range inv.GPUs {
			src := &inv.GPUs[i]
			var mig []MIGInstance
			if i < len(old) {
				mig = old[i].MIG[:0]
			}
			g := GPU{ID: src.ID, Model: src.Model, MemoryMiB: src.MemoryMiB, InUse: ln.gpuHeld[i] != ""}
			if len(src.MIG) > 0 {
				for k := range src.MIG {
					m := src.MIG[k]
					m.InUse = ln.migHeld[i][k] != ""
					mig = append(mig, m)
				}
				g.MIG = mig
			}
			gpus = append(gpus, g)
		}
		n.GPUs = gpus
	}
	if len(inv.NUMA) == 0 {
		n.NUMA = nil
	} else {
		numa := n.NUMA[:0]
		for d := range inv.NUMA {
			dom := ln.numaFree(d)
			if deep {
				dom.CPUs = slices.Clone(dom.CPUs)
			}
			numa = append(numa, dom)
		}
		n.NUMA = numa
	}
}

// Utilization returns, per dimension, the allocated fraction of the pool's
// capacity (all nodes, healthy or not; 0 where there is no capacity).
func (l *Ledger) Utilization() [NumDims]float64 {
	var capSum, used Resources
	for _, name := range l.names {
		ln := l.nodes[name]
		capSum = capSum.Add(ln.inv.Capacity)
		used = used.Add(ln.alloc)
	}
	var u [NumDims]float64
	for d := range NumDims {
		if capSum[d] > 0 {
			u[d] = float64(used[d]) / float64(capSum[d])
		}
	}
	return u
}

// cloneNode deep-copies a node (labels, GPUs with MIG, NUMA with CPUs).
func cloneNode(n *Node) Node {
	c := *n
	c.Labels = maps.Clone(n.Labels)
	c.GPUs = slices.Clone(n.GPUs)
	for i := range c.GPUs {
		c.GPUs[i].MIG = slices.Clone(c.GPUs[i].MIG)
	}
	c.NUMA = slices.Clone(n.NUMA)
	for i := range c.NUMA {
		c.NUMA[i].CPUs = slices.Clone(c.NUMA[i].CPUs)
	}
	return c
}
