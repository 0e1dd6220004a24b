package sim

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/computeboard/computeboard/engine"
)

// Epoch is virtual time 0 of every trace.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// maxCycles guards against a trace that would never end.
const maxCycles = 5_000_000

// Run simulates the trace under a policy: "" = the trace's own, a selection
// algorithm name (the trace's policy with that selection), or the name of
// one of the trace's variants. The simulator is the clock: it runs the real
// engine at every arrival and completion time (and every Cycle.Interval
// while jobs wait), starts what the plan places at once, ends each job after
// its actual duration (the engine only sees the estimate), and reports the
// ended jobs back to the engine (Running.Ended) so their usage is charged.
//
// Run reports no wall-clock figures; RunTimed does.
func Run(tr *Trace, policy string) (Report, error) { return RunTimed(tr, policy, nil) }

// RunTimed is Run that also measures the engine's wall-clock time with now
// (time.Now, say; the package itself never reads a clock).
func RunTimed(tr *Trace, policy string, now func() time.Time) (Report, error) {
	return RunWith(tr, policy, Options{Now: now})
}

// Options are RunWith's. Now measures the wall-clock figures (time.Now,
// say; nil: none are measured). Progress, when set, is called as the run
// goes: each time another tenth of the trace's horizon has been simulated
// (of its jobs ended, for a trace without one: generators make jobs as
// they go, so their number is not known before), and once at the end.
//
// Preemption overrides the trace's preemption policy: "" = the trace's
// own (Trace.Preemption), "off" = none, else an engine.PreemptPolicy name
// (with the trace's other preemption settings, and no per-pool policies).
// Set, or with a trace that has a preemption section, the Report carries
// a Preemption section.
type Options struct {
	Now        func() time.Time
	Progress   func(Progress)
	Preemption string
}

// Progress is how far a run has got.
type Progress struct {
	Policy  string
	Ended   int           // jobs ended (done, or dropped by a final rejection)
	Jobs    int           // jobs arrived or known so far
	SimTime time.Duration // simulated time since the trace's start
	Horizon time.Duration // the trace's horizon; 0: none (it ends with its jobs)
	Done    bool          // the run is over
}

// RunWith is Run with Options.
func RunWith(tr *Trace, policy string, o Options) (Report, error) {
	now := o.Now
	if err := tr.Validate(); err != nil {
		return Report{}, err
	}
	ps, err := tr.policyFor(policy)
	if err != nil {
		return Report{}, err
	}
	name := policy
	if name == "" {
		name = cmp.Or(ps.Selection, string(engine.SelectPriority))
	}
	s, err := newSim(tr, ps, name)
	if err != nil {
		return Report{}, err
	}
	s.wallNow = now
	s.progress = o.Progress
	if err := s.initPreemption(o.Preemption); err != nil {
		return Report{}, err
	}
	if err := s.run(); err != nil {
		return Report{}, fmt.Errorf("sim %s, policy %s, t=%s: %w", tr.Name, name, fmtDur(s.sec(s.now)), err)
	}
	r := s.report()
	if s.tr.Preemption != nil || o.Preemption != "" {
		r.Preemption = s.preemptionReport(r.Makespan)
	}
	return r, nil
}

// Compare runs the trace under each policy (see Run), one after the other.
func Compare(tr *Trace, policies []string) ([]Report, error) { return CompareTimed(tr, policies, nil) }

// CompareTimed is Compare with wall-clock figures measured by now.
func CompareTimed(tr *Trace, policies []string, now func() time.Time) ([]Report, error) {
	out := make([]Report, 0, len(policies))
	for _, p := range policies {
		r, err := RunTimed(tr, p, now)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

type jobState uint8

const (
	jobFuture jobState = iota
	jobPending
	jobRunning
	jobDone
	jobDropped
)

// job is one trace job (a whole gang).
type job struct {
	id          string
	acct        int // index into sim.accts
	priority    int
	arrival     int64 // ns since Epoch
	duration    int64
	deadline    int64
	hasDeadline bool
	members     []engine.Job
	vec         engine.Resources // per member, as allocated on the node
	migSlices   int64            // per member
	gen         *generator
	stopped     bool // its time limit is shorter than its run time: it is stopped then

	state  jobState
	placed []bool // per member: holds its allocation in the ledger
	start  int64  // of the current (or last) run
	first  int64  // first start; -1 = never started
	// remaining is the run time still to go from the last start (less
	// than duration once an eviction kept some progress); runs counts the
	// starts, so a completion event of an evicted run is ignored.
	remaining int64
	runs      int
	evictions int
	end       int64
	dropCode  engine.Code
	dropMsg   string
}

type memberRef struct {
	j *job
	k int
}

type runRec struct {
	r engine.Running
	j *job
}

type acctStat struct {
	name    string
	shares  float64
	target  float64
	active  bool // has jobs in the trace
	inner   bool // has active descendants (its own jobs get no target)
	backlog int  // jobs waiting

	alloc engine.Resources
	mig   int64

	billAll, domAll float64 // resource-seconds over the whole run
	billWin, domWin float64 // over the measurement window
}

type event struct {
	t    int64
	seq  uint64
	kind uint8
	j    *job
	run  int // completion: the job's run it ends
}

const (
	evArrival uint8 = iota
	evCompletion
	evTick
)

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	return h[a].t < h[b].t || h[a].t == h[b].t && h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type sim struct {
	tr         *Trace
	spec       PolicySpec
	pol        engine.Policy
	name       string
	billing    [engine.NumDims]float64
	migDiv     float64 // compute slices of a full GPU
	defShares  float64
	defAccount string

	events   eventHeap
	seq      uint64
	now      int64
	interval int64
	onEvents bool
	horizon  int64
	armed    bool // a tick is queued
	nonTick  int  // queued events that are not ticks

	// The nodes and their allocations: the simulator applies plans through
	// the same engine.Ledger as the adapter does.
	ledger    *engine.Ledger
	nodeNames []string      // in trace order: the order of Snapshot.Nodes
	snapNodes []engine.Node // reused by every cycle's snapshot
	capacity  engine.Resources
	migCap    int64

	engAccts []engine.Account
	accts    []*acctStat
	acctIdx  map[string]int

	jobs    []*job
	members map[string]memberRef
	pending []*job
	running []runRec
	ended   []engine.Running
	gens    []*generator

	state engine.State

	// measurement
	lastT      int64
	usedSec    [engine.NumDims]float64
	migSec     float64
	contended  bool
	winSec     float64
	winFrom    float64
	winTo      float64
	winStarted bool
	lastEnd    int64

	cycles     int
	decisions  int
	placements int
	backfilled int
	engineTime time.Duration
	wall       time.Duration
	wallNow    func() time.Time // measures engineTime and wall; nil: not measured

	preCfg engine.PreemptionConfig // the engine's preemption configuration
	pre    preemptStats

	progress func(Progress) // nil: not reported
	endedN   int            // jobs done or dropped
	reported int            // tenths of the jobs reported ended
}

// reportProgress calls progress once another tenth of the jobs has ended (and,
// with final, at the end).
func (s *sim) reportProgress(final bool) {
	if s.progress == nil {
		return
	}
	tenths := 0
	switch {
	case s.horizon > 0:
		tenths = int(10 * s.now / s.horizon)
	case len(s.jobs) > 0:
		tenths = 10 * s.endedN / len(s.jobs)
	}
	if !final && (tenths <= s.reported || tenths >= 10) {
		return // the end is reported once, as final
	}
	s.reported = tenths
	s.progress(Progress{Policy: s.name, Ended: s.endedN, Jobs: len(s.jobs), SimTime: time.Duration(s.now),
		Horizon: time.Duration(s.horizon), Done: final})
}

func newSim(tr *Trace, ps PolicySpec, name string) (*sim, error) {
	s := &sim{tr: tr, spec: ps, pol: ps.engine(), name: name, members: map[string]memberRef{}, acctIdx: map[string]int{},
		ledger: engine.NewLedger(), onEvents: true}
	def := engine.DefaultPolicy()
	s.billing = s.pol.Billing
	if s.billing == ([engine.NumDims]float64{}) {
		s.billing = def.Billing
	}
	s.migDiv = float64(def.MIGSlices)
	if s.pol.MIGSlices > 0 {
		s.migDiv = float64(s.pol.MIGSlices)
	}
	s.defShares, s.defAccount = def.DefaultShares, def.DefaultAccount
	if s.pol.DefaultShares > 0 {
		s.defShares = s.pol.DefaultShares
	}
	if s.pol.DefaultAccount != "" {
		s.defAccount = s.pol.DefaultAccount
	}
	s.interval = secs(tr.Cycle.Interval).Nanoseconds()
	if tr.Cycle.OnEvents != nil {
		s.onEvents = *tr.Cycle.OnEvents
	}
	s.horizon = secs(tr.Horizon).Nanoseconds()
	if err := s.buildNodes(); err != nil {
		return nil, err
	}
	// Accounts: the configured tree, then the accounts jobs name.
	for _, a := range tr.Accounts {
		ea := engine.Account{Name: a.Name, Parent: a.Parent, Shares: a.Shares}
		if a.Quota != nil {
			ea.Quota = a.Quota.resources()
		}
		if a.Guaranteed != nil {
			ea.Guaranteed = a.Guaranteed.resources()
		}
		s.engAccts = append(s.engAccts, ea)
		s.account(a.Name)
	}
	for i := range tr.Jobs {
		js := tr.Jobs[i]
		if js.ID == "" {
			js.ID = "j" + strconv.Itoa(i)
		}
		if _, err := s.addJob(&js, nil); err != nil {
			return nil, err
		}
	}
	for i := range tr.Generate {
		g := newGenerator(tr, i)
		s.gens = append(s.gens, g)
		var specs []JobSpec
		if g.closed() {
			specs = g.initial()
			for _, a := range g.spec.Accounts {
				s.accts[s.account(a)].active = true
			}
		} else {
			specs = g.open()
		}
		for k := range specs {
			if _, err := s.addJob(&specs[k], g); err != nil {
				return nil, err
			}
		}
	}
	s.computeTargets()
	for _, j := range s.jobs {
		s.push(j.arrival, evArrival, j)
	}
	return s, nil
}

func (s *sim) buildNodes() error {
	for _, ns := range s.tr.Nodes {
		count := max(ns.Count, 1)
		width := len(strconv.Itoa(count - 1))
		for i := range count {
			name := ns.Name
			if ns.Count > 1 {
				name = fmt.Sprintf("%s-%0*d", ns.Name, width, i)
			}
			n := engine.Node{Name: name, Labels: ns.Labels}
			n.Capacity = ResourceSpec{CPU: ns.CPU, Memory: ns.Memory, Network: ns.Network, NVMe: ns.NVMe, SSD: ns.SSD, HDD: ns.HDD}.resources()
			for _, gs := range ns.GPUs {
				for range max(gs.Count, 1) {
					id := fmt.Sprintf("%s-gpu%d", name, len(n.GPUs))
					g := engine.GPU{ID: id, Model: gs.Model, MemoryMiB: int64(math.Round(gs.Memory * 1024))}
					for k, p := range gs.MIG {
						g.MIG = append(g.MIG, engine.MIGInstance{ID: fmt.Sprintf("%s-mig%d", id, k), Profile: p})
						s.migCap += int64(engine.MIGSlices(p))
					}
					if len(g.MIG) == 0 {
						n.Capacity[engine.DimGPU]++
						n.Capacity[engine.DimGPUMemory] += g.MemoryMiB
					}
					n.GPUs = append(n.GPUs, g)
				}
			}
			for k := range ns.NUMA {
				n.NUMA = append(n.NUMA, engine.NUMADomain{ID: k,
					CPU: n.Capacity[engine.DimCPU] / int64(ns.NUMA), Memory: n.Capacity[engine.DimMemory] / int64(ns.NUMA)})
			}
			if _, dup := s.ledger.Node(name); dup {
				return fmt.Errorf("trace: node name %q is generated twice", name)
			}
			if err := s.ledger.SetNode(n); err != nil {
				return fmt.Errorf("trace: %w", err)
			}
			s.capacity = s.capacity.Add(n.Capacity)
			s.nodeNames = append(s.nodeNames, name)
		}
	}
	return nil
}

// account returns the index of an account's statistics, adding it.
func (s *sim) account(name string) int {
	if i, ok := s.acctIdx[name]; ok {
		return i
	}
	s.acctIdx[name] = len(s.accts)
	s.accts = append(s.accts, &acctStat{name: name})
	return len(s.accts) - 1
}

func (s *sim) ns(sec float64) int64 { return secs(sec).Nanoseconds() }

func (s *sim) sec(ns int64) float64 { return float64(ns) / 1e9 }

func (s *sim) at(ns int64) time.Time { return Epoch.Add(time.Duration(ns)) }

// addJob turns a JobSpec into a job (not yet arrived).
func (s *sim) addJob(js *JobSpec, g *generator) (*job, error) {
	if err := js.validate(); err != nil {
		return nil, fmt.Errorf("job %s: %w", js.ID, err)
	}
	acctName := js.Account
	if acctName == "" {
		acctName = s.defAccount
	}
	a := s.account(acctName)
	s.accts[a].active = true
	j := &job{id: js.ID, acct: a, priority: js.Priority, arrival: s.ns(js.Arrival), duration: max(s.ns(js.Duration), 1), gen: g, first: -1}
	if js.TimeLimit > 0 && s.ns(js.TimeLimit) < j.duration {
		j.duration, j.stopped = max(s.ns(js.TimeLimit), 1), true // stopped at its limit, as the adapter does
	}
	j.remaining = j.duration
	if js.Deadline > 0 {
		j.hasDeadline, j.deadline = true, s.ns(js.Deadline)
	}
	est := js.Duration
	if js.Estimate != nil {
		est = *js.Estimate
	}
	base := engine.Job{
		Account:      js.Account,
		Priority:     js.Priority,
		Submitted:    s.at(j.arrival),
		EstDuration:  secs(est),
		TimeLimit:    secs(js.TimeLimit),
		Request:      js.ResourceSpec.resources(),
		GPUModel:     js.GPUModel,
		MIGProfile:   js.MIG,
		StorageTier:  js.StorageTier,
		NodeSelector: js.Selector,
		NUMALocal:    js.NUMA,
		Strategy:     engine.Strategy(js.Strategy),

		NonPreemptible: js.NonPreemptible,
		PreemptMode:    engine.EvictionMode(js.PreemptMode),
	}
	if j.hasDeadline {
		base.Deadline = s.at(j.deadline)
	}
	if js.MIG != "" && base.Request[engine.DimGPU] == 0 {
		base.Request[engine.DimGPU] = 1
	}
	j.vec = base.Request
	if js.MIG != "" {
		j.migSlices = base.Request[engine.DimGPU] * int64(engine.MIGSlices(js.MIG))
		j.vec[engine.DimGPU], j.vec[engine.DimGPUMemory] = 0, 0
	}
	if d, ok := engine.TierDim(js.StorageTier); ok {
		st := j.vec.Storage()
		j.vec[engine.DimNVMe], j.vec[engine.DimSSD], j.vec[engine.DimHDD] = 0, 0, 0
		j.vec[d] = st
	}
	n := max(js.Gang, 1)
	for k := range n {
		m := base
		m.ID = js.ID
		if js.Gang > 1 {
			m.ID = fmt.Sprintf("%s/%d", js.ID, k)
			m.GangID, m.GangSize = js.ID, js.Gang
		}
		if _, dup := s.members[m.ID]; dup {
			return nil, fmt.Errorf("job ID %q used twice", m.ID)
		}
		s.members[m.ID] = memberRef{j, k}
		j.members = append(j.members, m)
	}
	j.placed = make([]bool, n)
	s.jobs = append(s.jobs, j)
	return j, nil
}

func (s *sim) push(t int64, kind uint8, j *job) {
	s.seq++
	ev := event{t: t, seq: s.seq, kind: kind, j: j}
	if j != nil {
		ev.run = j.runs
	}
	heap.Push(&s.events, ev)
	if kind != evTick {
		s.nonTick++
	}
}

func (s *sim) arm() {
	if s.interval <= 0 || s.armed {
		return
	}
	s.armed = true
	next := (s.now/s.interval + 1) * s.interval
	s.push(next, evTick, nil)
}

func (s *sim) run() error {
	if s.wallNow != nil {
		start := s.wallNow()
		defer func() { s.wall = s.wallNow().Sub(start) }()
	}
	for len(s.events) > 0 {
		t := s.events[0].t
		if s.horizon > 0 && t > s.horizon {
			s.advance(s.horizon)
			s.now = s.horizon
			break
		}
		s.advance(t)
		s.now = t
		changed, tick := false, false
		for len(s.events) > 0 && s.events[0].t == t {
			ev := heap.Pop(&s.events).(event)
			if ev.kind != evTick {
				s.nonTick--
			}
			switch ev.kind {
			case evArrival:
				s.arrive(ev.j)
				changed = true
			case evCompletion:
				if ev.run != ev.j.runs {
					continue // the run was evicted
				}
				s.complete(ev.j)
				changed = true
			case evTick:
				s.armed = false
				tick = true
			}
		}
		if (changed && s.onEvents) || tick {
			placed, err := s.cycle()
			if err != nil {
				return err
			}
			if len(s.pending) > 0 && (len(s.running) > 0 || s.nonTick > 0 || placed > 0) {
				s.arm()
			}
		}
		s.updateContention()
		s.reportProgress(false)
		if s.cycles > maxCycles {
			return errors.New("too many cycles: the trace does not end")
		}
	}
	s.reportProgress(true)
	return nil
}

func (s *sim) arrive(j *job) {
	j.state = jobPending
	s.pending = append(s.pending, j)
	s.accts[j.acct].backlog++
	s.arm()
}

func (s *sim) complete(j *job) {
	j.state = jobDone
	s.endedN++
	j.end = s.now
	s.lastEnd = max(s.lastEnd, s.now)
	for k := range j.members {
		s.release(j, k)
	}
	kept := s.running[:0]
	for _, r := range s.running {
		if r.j == j {
			r.r.Ended = s.at(s.now)
			s.ended = append(s.ended, r.r)
			continue
		}
		kept = append(kept, r)
	}
	clear(s.running[len(kept):])
	s.running = kept
}

// cycle runs the engine once at s.now and applies its plan.
func (s *sim) cycle() (int, error) {
	s.snapNodes = s.ledger.SnapshotInto(s.snapNodes, s.nodeNames)
	s.checkpoints()
	snap := engine.Snapshot{
		Now:        s.at(s.now),
		Seed:       splitmix(s.tr.Seed + uint64(s.cycles)),
		Policy:     s.pol,
		Nodes:      s.snapNodes,
		Accounts:   s.engAccts,
		Preemption: s.preCfg,
	}
	snap.Pending = make([]engine.Job, 0, len(s.pending))
	for _, j := range s.pending {
		snap.Pending = append(snap.Pending, j.members...)
	}
	snap.Running = make([]engine.Running, 0, len(s.running)+len(s.ended))
	for _, r := range s.running {
		snap.Running = append(snap.Running, r.r)
	}
	snap.Running = append(snap.Running, s.ended...)
	var t0 time.Time
	if s.wallNow != nil {
		t0 = s.wallNow()
	}
	plan, st := engine.Schedule(s.state, snap)
	if s.wallNow != nil {
		s.engineTime += s.wallNow().Sub(t0)
	}
	s.state = st
	s.cycles++
	s.decisions += len(snap.Pending)
	s.ended = s.ended[:0]

	// Evictions first: the preemptors' placements need the room.
	for _, ev := range plan.Evictions {
		if err := s.evict(ev); err != nil {
			return 0, err
		}
	}
	var touched []*job
	for _, p := range plan.Placements {
		ref, ok := s.members[p.JobID]
		if !ok || ref.j.state != jobPending || ref.j.placed[ref.k] {
			return 0, fmt.Errorf("engine placed %s, which is not pending", p.JobID)
		}
		if err := s.take(ref.j, ref.k, p); err != nil {
			return 0, fmt.Errorf("engine placed %s on %s: %w", p.JobID, p.Node, err)
		}
		if p.Backfilled {
			s.backfilled++
		}
		if !slices.Contains(touched, ref.j) {
			touched = append(touched, ref.j)
		}
	}
	started := 0
	for _, j := range touched {
		for k := range j.placed {
			if !j.placed[k] {
				return 0, fmt.Errorf("engine placed only part of gang %s", j.id)
			}
		}
		s.begin(j)
		started++
	}
	for _, r := range plan.Rejected {
		if !r.Final {
			continue
		}
		ref, ok := s.members[r.JobID]
		if !ok || ref.j.state != jobPending {
			continue
		}
		ref.j.state = jobDropped
		s.endedN++
		ref.j.dropCode, ref.j.dropMsg = r.Reason, r.Message
		ref.j.end = s.now
		s.accts[ref.j.acct].backlog--
	}
	kept := s.pending[:0]
	for _, j := range s.pending {
		if j.state == jobPending {
			kept = append(kept, j)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	// Closed workloads answer each start with a new job.
	for _, j := range touched {
		if g := j.gen; g != nil && g.closed() && g.more(s.sec(s.now)) {
			js := g.job(s.sec(s.now), s.accts[j.acct].name)
			nj, err := s.addJob(&js, g)
			if err != nil {
				return 0, err
			}
			s.arrive(nj)
		}
	}
	s.placements += len(plan.Placements)
	return started, nil
}

// take allocates member k of j as the placement says. The ledger checks
// that the node really has room (the engine's plan is data; the adapter
// re-checks every placement through the same engine.Ledger).
func (s *sim) take(j *job, k int, p engine.Placement) error {
	m := &j.members[k]
	if err := s.ledger.ApplyAt(*m, p, s.at(s.now)); err != nil {
		return err
	}
	j.placed[k] = true
	s.running = append(s.running, runRec{j: j, r: engine.Running{Job: *m, Node: p.Node, Started: s.at(s.now), GPUs: p.GPUs, MIG: p.MIG}})
	a := s.accts[j.acct]
	a.alloc = a.alloc.Add(j.vec)
	a.mig += j.migSlices
	return nil
}

// release frees member k of j.
func (s *sim) release(j *job, k int) {
	s.ledger.Release(j.members[k].ID)
	a := s.accts[j.acct]
	a.alloc = a.alloc.Sub(j.vec)
	a.mig -= j.migSlices
}

func (s *sim) begin(j *job) {
	j.state = jobRunning
	j.start = s.now
	if j.first < 0 {
		j.first = s.now
	}
	j.runs++
	s.accts[j.acct].backlog--
	s.push(s.now+j.remaining, evCompletion, j)
}

// updateContention recomputes whether every account with jobs has one
// waiting (the state that holds until the next event).
func (s *sim) updateContention() {
	c := true
	for _, a := range s.accts {
		if a.active && a.target > 0 && a.backlog <= 0 {
			c = false
			break
		}
	}
	s.contended = c
}

// advance integrates usage from lastT to t.
func (s *sim) advance(t int64) {
	if t <= s.lastT {
		return
	}
	dt := s.sec(t - s.lastT)
	win := 0.0
	if w := s.tr.Window; w != nil {
		from, to := s.ns(w.From), s.ns(w.To)
		if w.To <= 0 {
			to = math.MaxInt64
		}
		lo, hi := max(s.lastT, from), min(t, to)
		if hi > lo {
			win = s.sec(hi - lo)
			if !s.winStarted {
				s.winStarted, s.winFrom = true, s.sec(lo)
			}
			s.winTo = s.sec(hi)
		}
	} else if s.contended {
		win = dt
		if !s.winStarted {
			s.winStarted, s.winFrom = true, s.sec(s.lastT)
		}
		s.winTo = s.sec(t)
	}
	s.winSec += win
	for _, a := range s.accts {
		if a.alloc.IsZero() && a.mig == 0 {
			continue
		}
		b, d := s.rates(a)
		a.billAll += b * dt
		a.domAll += d * dt
		a.billWin += b * win
		a.domWin += d * win
		for k := range engine.NumDims {
			s.usedSec[k] += float64(a.alloc[k]) * dt
		}
		s.migSec += float64(a.mig) * dt
	}
	s.lastT = t
}

// rates returns an account's billing rate (billing units per second, as
// the engine prices usage) and dominant share of the pool now.
func (s *sim) rates(a *acctStat) (bill, dom float64) {
	for d := range engine.NumDims {
		bill += s.billing[d] * float64(a.alloc[d])
		if s.capacity[d] > 0 {
			dom = max(dom, float64(a.alloc[d])/float64(s.capacity[d]))
		}
	}
	bill += float64(a.mig) / s.migDiv * s.billing[engine.DimGPU]
	if s.migCap > 0 {
		dom = max(dom, float64(a.mig)/float64(s.migCap))
	}
	return bill, dom
}

// computeTargets sets each active account's target share: its normalized
// shares in the fair-share tree pruned to the accounts with jobs and their
// ancestors (shares multiply down the tree, Σ targets = 1).
func (s *sim) computeTargets() {
	type node struct {
		parent string
		shares float64
	}
	tree := map[string]node{}
	for _, a := range s.tr.Accounts {
		tree[a.Name] = node{a.Parent, max(a.Shares, 0)}
	}
	def := s.defShares
	for _, a := range s.accts {
		if _, ok := tree[a.name]; !ok {
			tree[a.name] = node{"", def}
		}
		a.shares = tree[a.name].shares
	}
	parent := func(n string) string {
		p := tree[n].parent
		if _, ok := tree[p]; !ok || p == n {
			return ""
		}
		return p
	}
	// Ancestor chains, cut at cycles (a cycle attaches to the root).
	chain := func(n string) []string {
		c := []string{n}
		for p := parent(n); p != ""; p = parent(p) {
			if slices.Contains(c, p) || len(c) > len(tree) {
				return []string{n}
			}
			c = append(c, p)
		}
		return c
	}
	in := map[string]bool{}
	par := map[string]string{}
	for _, a := range s.accts {
		if !a.active {
			continue
		}
		c := chain(a.name)
		for i, n := range c {
			in[n] = true
			if i+1 < len(c) {
				par[n] = c[i+1]
			} else {
				par[n] = ""
			}
		}
	}
	sib := map[string]float64{}
	for n := range in {
		sib[par[n]] += tree[n].shares
	}
	var norm func(n string) float64
	norm = func(n string) float64 {
		if n == "" {
			return 1
		}
		if sib[par[n]] <= 0 {
			return 0
		}
		return norm(par[n]) * tree[n].shares / sib[par[n]]
	}
	hasChild := map[string]bool{}
	for n := range in {
		if p := par[n]; p != "" {
			hasChild[p] = true
		}
	}
	for _, a := range s.accts {
		if !a.active {
			continue
		}
		if hasChild[a.name] {
			a.inner = true
			continue
		}
		a.target = norm(a.name)
	}
}
