package dispatch

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// Phase is where a job is, as the scheduler sees it.
type Phase string

// The phases.
const (
	PhasePending  Phase = "pending"  // in the engine, waiting for a placement
	PhaseAssigned Phase = "assigned" // its order is on the node's stream; the agent has not started it
	PhaseRunning  Phase = "running"  // the agent started it
)

// Scheduler is one term of the pool's scheduler: it acts for one fencing
// epoch and stops (Run returns) when that epoch is deposed.
type Scheduler struct {
	cfg    Config
	in     Intake
	jobs   JobStore
	nodes  Nodes
	orders Orders
	fence  pool.Fence
	log    *slog.Logger

	incoming chan jobs.Job // accepted jobs, from the intake goroutine
	wake     chan struct{} // one-slot: run a cycle soon
	room     chan struct{} // one-slot: pending jobs left (intake may go on)

	cancelMu sync.Mutex
	cancels  []string // guarded by cancelMu: job IDs whose requests were retracted

	futureStamps atomic.Int64
	feasible     atomic.Pointer[[]engine.Node] // registered nodes and classes, for admission

	// Owned by the Run goroutine.
	lastReport  string
	lastNodes   time.Time
	lastRescan  time.Time
	explainedAt time.Time
	// fullPlanned is the number of pending jobs of the full plan the last
	// schedule made (-1: it made none), for Config.AfterFullPlan. Run
	// goroutine only.
	fullPlanned int
	savedState  time.Time
	lastSave    time.Time
	intern      internTable          // the jobs' repeated strings and shapes
	silentSince map[string]time.Time // nodes gone from the registry: when first missed
	seenAt      time.Time            // Redis's time at the last successful registry read
	witnessFrom time.Time            // Redis's time since which this scheduler has watched without a gap

	mu         sync.Mutex     // guards everything below; held only for in-memory work
	handedOver map[string]int // accepted jobs on their way to pending, by account
	jobs_      map[string]*tracked
	// ids is jobs_'s keys in order, as of the last snapshot; newIDs the
	// keys added since, and idsDropped whether any was deleted: the
	// snapshot merges them in (sortedIDsLocked) rather than sorting every
	// key each cycle.
	ids        []string
	newIDs     []string
	idsDropped bool
	pendingN   int
	// progress is the view of the jobs' checkpoints and the work lost
	// with nodes (checkpoint.go).
	progress *progress
	// pendingBy counts the pending jobs by account (intake's share of
	// max_pending; see intakeAdmit), kept with pendingN.
	pendingBy map[string]int
	ledger    *engine.Ledger
	health    map[string]nodeHealth
	ended     []engine.Running
	state     engine.State
	cycle     uint64
	plan      engine.Plan  // the last full plan, without its Rejected and Explanations
	expl      explanations // that plan's explanations (explain.go)
	stats     counters
	// replan: the engine's input changed since the last plan (besides the
	// time); plannedAt: that plan's Now. See schedule.
	replan      bool
	plannedAt   time.Time
	added       []*tracked // new pending jobs (no gang members) since the last plan
	unexplained bool       // some pending jobs are in no plan yet (canSkipLocked)
	stuck       bool       // the last plan left every pending job stuck (see stuckLocked)
	nodeBuf     []engine.Node
	// freed: jobs that held room ended since the last plan; queues,
	// orderPending, orderPlain, resvPos and sinceFull: what partial plans
	// need of the last full plan (partial.go); headFit and partialMin: the
	// bounds of partial.go (fields, so tests can lower them).
	freed        bool
	suspendedN   int                 // jobs with suspended set (setSuspendedLocked)
	gangN        int                 // gang members among the jobs (gangJobsLocked)
	queues       map[string]*queue   // by account
	orderPending int                 // jobs of the queues still pending
	orderPlain   bool                // the queues had no gang member or deadline
	resvPos      int                 // the full plan's reservation holder's position (0: none)
	active       map[string]*tracked // the jobs assigned or running
	lastPlaced   int                 // placements of the last plan
	sinceFull    []*tracked
	headFit      int
	partialMin   int
	explainMore  bool                // explanations of the last plan remain to publish
	waiting      map[string]*tracked // preemptors holding room for their victims' ends (preempt.go)
	evictLog     []Eviction          // the evictions of the last evictionWindow, oldest first
	// partialBuf: partialSnapshotLocked's slices, kept from one partial
	// plan to the next (only the Run goroutine plans, and a snapshot
	// lives no longer than its step).
	partialBuf partialBuffers
}

type nodeHealth struct {
	lastBeat  time.Time
	unhealthy bool
	lost      bool
	rec       pool.NodeRecord
	inv       engine.Node // as last given to the ledger
}

type counters struct {
	submitted, completed, failed, cancelled, lost, requeued int
	waitSum, turnSum                                        float64
	waitN, turnN                                            int
	cycles, placements, refusedApply, reassigned            int
	partial, partialRefused                                 int // engine runs over part of the queue, and those a full plan replaced
	lastCycle                                               time.Duration
	preemptions                                             int
	lostWork                                                float64 // seconds, summed over the evictions
}

// New returns the scheduler for the term of fence.
func New(cfg Config, in Intake, js JobStore, nodes Nodes, orders Orders, fence pool.Fence) (*Scheduler, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, in: in, jobs: js, nodes: nodes, orders: orders, fence: fence,
		log:      cfg.Logger.With("epoch", fence.Epoch),
		incoming: make(chan jobs.Job, 1024), wake: make(chan struct{}, 1), room: make(chan struct{}, 1),
		handedOver: map[string]int{}, pendingBy: map[string]int{}, progress: newProgress(), jobs_: map[string]*tracked{}, ledger: engine.NewLedger(),
		health: map[string]nodeHealth{}, silentSince: map[string]time.Time{},
		waiting: map[string]*tracked{}, active: map[string]*tracked{},
		replan: true, headFit: headFit, partialMin: partialMinJobs,
	}
	empty := slices.Clone(cfg.NodeClasses)
	s.feasible.Store(&empty)
	return s, nil
}

// Epoch is the fencing epoch of this term.
func (s *Scheduler) Epoch() int64 { return s.fence.Epoch }

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) roomMade() {
	select {
	case s.room <- struct{}{}:
	default:
	}
}

// OnCancel is the broker's cancellation hook; it never blocks.
func (s *Scheduler) OnCancel(jobID string) {
	s.cancelMu.Lock()
	s.cancels = append(s.cancels, jobID)
	s.cancelMu.Unlock()
	s.poke()
}

// Run recovers the pool's state from Redis and schedules until ctx is
// done or the term is deposed (ErrFenced is returned then).
func (s *Scheduler) Run(ctx context.Context) error {
	if err := s.Recover(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errc := make(chan error, 2)
	reports := make(chan []pool.Report)
	go func() { errc <- s.intake(ctx) }()
	go func() { errc <- s.watchReports(ctx, s.lastReport, reports) }()
	err := s.loop(ctx, reports)
	cancel(err)
	<-errc
	<-errc
	if !fenced(err) { // a deposed term must not overwrite its successor's checkpoint
		s.saveState(context.WithoutCancel(ctx), true)
	}
	if err == nil {
		err = context.Cause(ctx)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
	}
	return err
}

// loop runs a step on every batch of reports (from watchReports, in
// order), on every wake (new jobs, cancellations) and at least every
// Interval.
func (s *Scheduler) loop(ctx context.Context, reportsC <-chan []pool.Report) error {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	var reports []pool.Report
	for {
		if err := s.step(ctx, reports); err != nil {
			if errors.Is(err, jobs.ErrFenced) || errors.Is(err, pool.ErrFenced) {
				s.log.Warn("deposed: another scheduler holds the lease", "err", err)
				return err
			}
			if ctx.Err() == nil {
				s.log.Warn("scheduling step", "err", err)
			}
		}
		reports = nil
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-s.wake:
		case reports = <-reportsC:
		}
	}
}

// watchReports is the one reader of the agents' reports (a start, an
// end): a blocking read of those after the last it saw, handed to the loop
// as they come, so that ends free their resources at once rather than on
// the next tick. (The loop read them again itself, after this read had
// woken it: two reads of the stream per report.)
func (s *Scheduler) watchReports(ctx context.Context, from string, out chan<- []pool.Report) error {
	for ctx.Err() == nil {
		rs, err := s.orders.Reports(ctx, from, 4096, time.Second)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read reports", "err", err)
				sleepCtx(ctx, 100*time.Millisecond)
			}
			continue
		}
		if len(rs) > 0 {
			from = rs[len(rs)-1].ID
			select {
			case out <- rs:
			case <-ctx.Done():
			}
		}
	}
	return nil
}

// fenced reports whether err says this term is over.
func fenced(err error) bool { return errors.Is(err, jobs.ErrFenced) || errors.Is(err, pool.ErrFenced) }

// step is one pass: new jobs, reports, cancellations, node health,
// schedule and assign, rejections, explanations, checkpoint.
func (s *Scheduler) step(ctx context.Context, reports []pool.Report) error {
	changed := false
	for drained := false; !drained; {
		select {
		case j := <-s.incoming:
			s.addPending(ctx, j)
			s.mu.Lock()
			if s.handedOver[j.Account]--; s.handedOver[j.Account] <= 0 {
				delete(s.handedOver, j.Account)
			}
			s.mu.Unlock()
			changed = true
		default:
			drained = true
		}
	}
	if len(reports) > 0 {
		s.lastReport = reports[len(reports)-1].ID
		if err := s.applyReports(ctx, reports); err != nil {
			return err
		}
		changed = true
	}
	if c, err := s.applyCancels(ctx); err != nil {
		return err
	} else if c {
		changed = true
	}
	now := s.cfg.Clock.Now()
	if now.Sub(s.lastNodes) >= s.cfg.NodeRefresh {
		s.lastNodes = now
		c, err := s.refreshNodes(ctx)
		if err != nil {
			return err
		}
		changed = changed || c
	}
	if now.Sub(s.lastRescan) >= s.cfg.Rescan {
		s.lastRescan = now
		if err := s.rescan(ctx); err != nil {
			return err
		}
	}
	s.fullPlanned = -1
	c, err := s.schedule(ctx)
	if n := s.fullPlanned; n >= 0 && s.cfg.AfterFullPlan != nil {
		// Here, not in schedule: the plan and its snapshot are out of
		// scope, so garbage.
		s.cfg.AfterFullPlan(n)
	}
	if err != nil {
		return err
	}
	if changed || c {
		s.cfg.Notify()
	}
	if now.Sub(s.explainedAt) >= time.Second {
		s.explainedAt = now
		if err := s.publishExplanations(ctx, 50, 2*time.Second); err != nil {
			return err
		}
	}
	if now.Sub(s.lastSave) >= s.cfg.CheckpointEvery {
		s.lastSave = now
		s.saveState(ctx, false)
	}
	return nil
}

// track builds the scheduler's view of a job record.
func (s *Scheduler) track(j jobs.Job) (*tracked, *wire.Error) {
	spec, werr := s.cfg.Resolve(j.Request)
	if werr != nil {
		return nil, werr
	}
	sub := epochTime(j.AcceptedAt)
	if j.SubmittedAt != nil {
		// The poster's clock: a timestamp after acceptance is clamped to
		// the acceptance, so waits are never negative.
		if posted := epochTime(*j.SubmittedAt); posted.After(sub) {
			s.futureStamps.Add(1)
		} else {
			sub = posted
		}
	}
	ej := EngineJob(j, sub, s.cfg.StorageTier)
	ej.TimeLimit = spec.Timeout
	ej.NonPreemptible, ej.PreemptMode = spec.NonPreemptible, spec.PreemptMode
	return &tracked{jobCore: s.intern.compactJob(ej), accepted: j.AcceptedAt, requeueLost: spec.RequeueLost, phase: PhasePending}, nil
}

// addPending puts a queued job in the engine (once).
func (s *Scheduler) addPending(ctx context.Context, j jobs.Job) {
	t, werr := s.track(j)
	if werr != nil {
		// The config changed since acceptance (template removed, say).
		_, err := s.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobFailed, jobs.Update{
			Error: &wire.JobError{Code: string(werr.Code), Message: werr.Message}})
		if err != nil && !errors.Is(err, jobs.ErrConflict) {
			s.log.Warn("fail job", "job", j.JobID, "err", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs_[j.JobID]; ok {
		return
	}
	s.jobs_[t.id()] = t
	s.gangJobsLocked(t, 1)
	s.newIDs = append(s.newIDs, t.id())
	s.countPendingLocked(t, 1)
	s.stats.submitted++
	if t.gangID != "" {
		s.replan = true // it may complete its gang
	} else {
		s.added = append(s.added, t) // see schedule
		s.sinceFull = append(s.sinceFull, t)
	}
}

// setPhase moves a tracked job between phases (s.mu held). Only a job
// put back in the queue calls for a new plan (it frees room, and waits
// again): a placement of the last plan (pending → assigned) only takes
// room that plan already counted, and a start (assigned → running) changes
// no room at all, so neither can let another job start (see canSkipLocked;
// TestSkippedPlanPlacesNothing checks it). They made a full cycle run
// after every placement and every start report, each re-planning every
// pending job.
func (s *Scheduler) setPhaseLocked(t *tracked, p Phase) {
	if t.phase == PhasePending && p != PhasePending {
		s.countPendingLocked(t, -1)
	}
	if t.phase != PhasePending && p == PhasePending {
		s.countPendingLocked(t, 1)
		if _, ok := s.ledger.Release(t.id()); !ok {
			s.log.Debug("release of a job without allocation", "job", t.id())
		}
		t.placement = nil
		s.replan = true
	}
	t.phase = p
	s.activeLocked(t)
}

// activeLocked keeps s.active, the jobs assigned or running, up to date
// with t (s.mu held).
func (s *Scheduler) activeLocked(t *tracked) {
	if t.phase != PhasePending && !t.dropped {
		s.active[t.id()] = t
	} else if s.active[t.id()] == t {
		delete(s.active, t.id())
	}
}

// gangJobsLocked adds d to the count of gang members when t is one (s.mu
// held).
func (s *Scheduler) gangJobsLocked(t *tracked, d int) {
	if t.gangID != "" && t.gangSize > 1 {
		s.gangN += d
	}
}

// countPendingLocked adds d to the pending jobs, in all and of t's account
// (s.mu held).
func (s *Scheduler) countPendingLocked(t *tracked, d int) {
	s.pendingN += d
	if t.inOrder {
		s.orderPending += d
		s.queues[t.acct].pending += d
	}
	a := t.acct
	if s.pendingBy[a] += d; s.pendingBy[a] <= 0 {
		delete(s.pendingBy, a)
	}
}

// dropLocked forgets a job (s.mu held), releasing what it held.
func (s *Scheduler) dropLocked(t *tracked, ended time.Time) {
	if t.hold != nil {
		t.hold = nil
		delete(s.waiting, t.id())
	}
	if t.phase == PhasePending {
		s.countPendingLocked(t, -1)
		s.replan = true // it may have held the reservation
	} else {
		s.ledger.Release(t.id())
		if t.phase == PhaseRunning && !t.started.IsZero() {
			s.ended = append(s.ended, engine.Running{Job: t.job(), Node: t.node(), Started: t.started, Ended: ended})
		}
		s.freed = true // room for the head of the queue (partial.go)
	}
	s.setSuspendedLocked(t, false)
	s.gangJobsLocked(t, -1)
	t.dropped = true // for the lists that outlive it (partial.go)
	s.activeLocked(t)
	delete(s.jobs_, t.id())
	s.idsDropped = true
}

// applyReports handles the agents' reports.
func (s *Scheduler) applyReports(ctx context.Context, rs []pool.Report) error {
	now := s.cfg.Clock.Now()
	var look []string
	for _, r := range rs {
		s.mu.Lock()
		t, ok := s.jobs_[r.JobID]
		if !ok {
			s.mu.Unlock()
			if r.Status == string(wire.JobQueued) {
				look = append(look, r.JobID) // requeued: not ours yet
			}
			continue
		}
		switch {
		case r.Event == pool.EventStarted && t.phase == PhasePending:
			look = append(look, r.JobID) // started after the scheduler took its assignment back
		case r.Event == pool.EventStarted && t.phase == PhaseAssigned:
			s.setPhaseLocked(t, PhaseRunning)
			t.started = now
			if s.cfg.Preemption.Enabled() {
				s.replan = true // a started job may be a victim now (an assigned one is none)
			}
			s.stats.waitSum += max(0, now.Sub(t.submittedAt()).Seconds())
			s.stats.waitN++
		case r.Event == pool.EventEnded && t.phase != PhasePending:
			st := wire.JobStatus(r.Status)
			switch {
			case st == wire.JobQueued:
				look = append(look, r.JobID)
				s.stats.requeued++
				s.dropLocked(t, now)
			case st.Terminal():
				s.countEndLocked(t, st, now)
				s.dropLocked(t, now)
			default:
				look = append(look, r.JobID)
			}
		case r.Event == pool.EventRefused && t.phase == PhaseAssigned && r.Node == t.node():
			look = append(look, r.JobID)
		case r.Event == pool.EventSuspended || r.Event == pool.EventResumed:
			look = append(look, r.JobID) // the record says which (syncSuspendLocked)
		}
		s.mu.Unlock()
	}
	return s.reload(ctx, look)
}

func (s *Scheduler) countEndLocked(t *tracked, st wire.JobStatus, now time.Time) {
	switch st {
	case wire.JobSucceeded:
		s.stats.completed++
	case wire.JobCancelled:
		s.stats.cancelled++
	default:
		s.stats.failed++
	}
	if !t.started.IsZero() {
		s.stats.turnSum += max(0, now.Sub(t.submittedAt()).Seconds())
		s.stats.turnN++
	}
}

// reload re-reads job records and settles the scheduler's view on them:
// a queued job not pending becomes pending, a job that ended is dropped.
func (s *Scheduler) reload(ctx context.Context, ids []string) error {
	now := s.cfg.Clock.Now()
	var needPlacement []jobs.Job
	for _, id := range ids {
		rec, err := s.jobs.Get(ctx, id)
		if errors.Is(err, jobs.ErrNotFound) {
			s.mu.Lock()
			if t, ok := s.jobs_[id]; ok {
				s.dropLocked(t, now)
			}
			s.mu.Unlock()
			continue
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		t, ok := s.jobs_[id]
		switch {
		case ok && rec.Status.Terminal():
			s.countEndLocked(t, rec.Status, now)
			s.dropLocked(t, now)
		case ok && rec.Status == wire.JobRunning && (t.phase != PhaseRunning || rec.Node != t.node()):
			// It started where an earlier assignment sent it (the report
			// came after the scheduler took that assignment back): it
			// holds that node's resources from now on.
			needPlacement = append(needPlacement, rec)
		case ok && rec.Status == wire.JobRunning:
			s.syncSuspendLocked(t, rec.SuspendedAt)
		case ok && rec.Status == wire.JobQueued && t.phase == PhaseAssigned && rec.Node != t.node():
			s.setPhaseLocked(t, PhasePending)
		case ok && rec.Status == wire.JobQueued && t.phase == PhaseAssigned:
			// Refused although it names the node: place it again.
			s.setPhaseLocked(t, PhasePending)
		}
		s.mu.Unlock()
		if !ok && rec.Status == wire.JobQueued {
			s.addPending(ctx, rec)
		}
	}
	return s.holdStarted(ctx, needPlacement)
}

// holdStarted records jobs found running as holding the resources of the
// node they run on, with the devices stored with their placement.
func (s *Scheduler) holdStarted(ctx context.Context, recs []jobs.Job) error {
	if len(recs) == 0 {
		return nil
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.JobID
	}
	pls, err := s.orders.Placements(ctx, ids)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		s.mu.Lock()
		t, ok := s.jobs_[rec.JobID]
		if ok {
			if t.phase == PhasePending {
				s.countPendingLocked(t, -1)
			} else {
				s.ledger.Release(rec.JobID)
			}
			s.replan = true
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		pl, has := pls[rec.JobID]
		if !has || pl.Node != rec.Node {
			pl = providers.Placement{Node: rec.Node, NUMA: -1}
		}
		t.started = epochOr(rec.StartedAt, s.cfg.Clock.Now())
		s.hold(t, rec.Node, pl.GPUs, pl.MIG, pl.NUMA, PhaseRunning)
		t.placement = &pl
		s.mu.Lock()
		t.suspended, t.resuming = false, false
		s.syncSuspendLocked(t, rec.SuspendedAt)
		s.mu.Unlock()
	}
	return nil
}

// applyCancels handles retracted requests: a pending job is cancelled
// here; an assigned or running one is stopped by its node's agent (which
// records the cancellation).
func (s *Scheduler) applyCancels(ctx context.Context) (bool, error) {
	s.cancelMu.Lock()
	ids := s.cancels
	s.cancels = nil
	s.cancelMu.Unlock()
	changed := false
	for _, id := range ids {
		s.mu.Lock()
		t, ok := s.jobs_[id]
		var phase Phase
		var node string
		if ok {
			phase, node = t.phase, t.node()
		}
		s.mu.Unlock()
		switch {
		case ok && phase == PhasePending:
			_, err := s.jobs.Transition(ctx, id, wire.JobQueued, wire.JobCancelled, jobs.Update{
				Error: &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}})
			if fenced(err) {
				return changed, err
			}
			if err != nil && !errors.Is(err, jobs.ErrConflict) {
				s.log.Warn("cancel queued job", "job", id, "err", err)
				s.OnCancel(id) // try again
				continue
			}
			s.mu.Lock()
			s.stats.cancelled++
			s.dropLocked(t, s.cfg.Clock.Now())
			s.mu.Unlock()
			changed = true
		case ok:
			// Assigned: the agent's start finds the request withdrawn (the
			// compare-and-set checks it) or, if it started, stops it.
			if err := s.orders.Stop(ctx, s.fence, node, id, "request retracted"); err != nil {
				if fenced(err) {
					return changed, err
				}
				s.log.Warn("stop cancelled job", "job", id, "err", err)
				s.OnCancel(id)
				continue
			}
			changed = true
		default:
			// Not tracked (yet): the record says cancel_requested, and a
			// start checks the request at its compare-and-set.
			_, err := s.jobs.Transition(ctx, id, wire.JobQueued, wire.JobCancelled, jobs.Update{
				Error: &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}})
			if fenced(err) {
				return changed, err
			}
		}
	}
	return changed, nil
}

// schedule runs one engine cycle and assigns its placements. The engine
// runs when its input changed since the last plan in a way that may let a
// job start (s.replan: a job gone or ended, a phase change, a gang member,
// a node added, changed, gone or turned (un)healthy, a placement the
// ledger refused), when a new job may start (canSkipLocked), and
// FullReplan after the last plan in any case: between two plans the input
// differs only by the time (and by new jobs that cannot start), which
// moves priorities (age, deadline urgency), deadline verdicts,
// reservations, backfill windows, estimated starts and gang timeouts, all
// slowly; the full re-plan catches up with them, and with the positions
// and explanations of the new jobs.
func (s *Scheduler) schedule(ctx context.Context) (bool, error) {
	// Preemptors whose victims ended take their room first (preempt.go).
	// Then suspended jobs whose room is free again resume (suspend.go).
	s.mu.Lock()
	was, wts := s.placeWaitingLocked(s.cfg.Clock.Now())
	resumes := s.resumeLocked()
	s.mu.Unlock()
	waited := len(was) > 0 || len(resumes) > 0
	if err := s.assign(ctx, was, wts); err != nil {
		return waited, err
	}
	if err := s.sendResumes(ctx, resumes); err != nil {
		return waited, err
	}
	s.mu.Lock()
	due := s.cfg.Clock.Now().Sub(s.plannedAt) >= s.cfg.FullReplan
	if s.pendingN == len(s.waiting) && len(s.ended) == 0 ||
		!s.replan && !s.freed && !due && s.canSkipLocked() {
		s.mu.Unlock()
		if waited {
			s.roomMade()
		}
		return waited, nil
	}
	st := s.state
	var (
		snap    engine.Snapshot
		plan    engine.Plan
		next    engine.State
		took    time.Duration
		partial bool
	)
	// Only the Run goroutine changes what the snapshots are taken from;
	// s.mu is let go for the engine run so that readers are not held up.
	if !due {
		if psnap, ps, ok := s.partialSnapshotLocked(s.cfg.Seed ^ (s.cycle + 1)); ok {
			s.mu.Unlock()
			begin := time.Now()
			plan, next = s.partialBuf.schedule(st, psnap)
			took = time.Since(begin)
			s.mu.Lock()
			if partial = s.partialValidLocked(plan, ps); partial {
				s.cycle++
				snap = psnap
				s.stats.partial++
			} else {
				s.stats.partialRefused++
			}
		}
	}
	if !partial {
		snap = s.snapshotLocked()
		s.plannedAt = snap.Now
		s.unexplained = false
		s.mu.Unlock()
		// The explanations go straight into their compact form, and only
		// the final rejections are kept (those are acted on below): a
		// deep queue's plan then never holds every one twice.
		x := explanations{held: make([]heldExpl, 0, len(snap.Pending))}
		var finals []engine.Rejection
		begin := time.Now()
		plan, next = engine.ScheduleEach(st, snap, func(e *engine.Explanation, r *engine.Rejection) {
			x.add(e)
			if r != nil && r.Final {
				finals = append(finals, *r)
			}
		})
		took += time.Since(begin)
		plan.Rejected = finals
		s.mu.Lock()
		s.plan = plan
		s.plan.Rejected = nil // used below only; the explanations say the same
		s.expl = x
		s.explainMore = true
		s.noteFullPlanLocked(plan, x.all())
		s.fullPlanned = len(snap.Pending)
	} else if len(s.added) > 0 {
		s.unexplained = true // a partial plan explains nothing: see canSkipLocked
	}
	expls := slices.All(plan.Explanations)
	if !partial {
		expls = s.expl.all()
	}
	s.ended = nil
	s.replan = false
	s.freed = false
	s.added = nil
	s.state = next
	s.lastPlaced = len(plan.Placements)
	s.stuck = s.stuckLocked(expls)
	s.stats.cycles++
	s.stats.lastCycle = took
	// Evictions first: their preemptors wait for the victims' ends
	// (preempt.go), and nothing else goes where they wait.
	evs, holds := s.takeEvictionsLocked(&plan, expls)
	heldNode := map[string]bool{}
	for _, t := range s.waiting {
		if t.hold != nil {
			heldNode[t.hold.p.Node] = true
		}
	}
	// Re-check every placement against the ledger (as the simulator
	// applies plans) and hold it there until the assignment is written.
	var as []pool.Assignment
	var ts []*tracked
	for _, p := range plan.Placements {
		t, ok := s.jobs_[p.JobID]
		if !ok || t.phase != PhasePending {
			continue
		}
		if h := holds[p.JobID]; h != nil {
			s.holdPreemptorLocked(t, h, p, snap.Now)
			heldNode[p.Node] = true
			continue
		}
		if heldNode[p.Node] {
			s.replan = true // the room there is a preemptor's: placed again next cycle
			continue
		}
		if err := s.ledger.ApplyAt(t.job(), p, snap.Now); err != nil {
			s.stats.refusedApply++
			s.replan = true // placed again next cycle
			s.log.Warn("placement refused by the ledger", "job", p.JobID, "node", p.Node, "err", err)
			continue
		}
		alloc, _ := s.ledger.Allocation(p.JobID)
		pl := providers.Placement{Node: p.Node, NUMA: p.NUMA, GPUs: slices.Clone(p.GPUs), MIG: slices.Clone(p.MIG), CPUs: slices.Clone(alloc.CPUs)}
		s.setPhaseLocked(t, PhaseAssigned)
		t.placement = &pl
		as = append(as, pool.Assignment{JobID: p.JobID, Placement: pl})
		ts = append(ts, t)
	}
	s.mu.Unlock()

	if err := s.orderEvictions(ctx, evs); err != nil {
		return true, err
	}
	changed := len(as) > 0 || len(evs) > 0 || waited
	if err := s.assign(ctx, as, ts); err != nil {
		return changed, err
	}
	for _, r := range plan.Rejected {
		if r.Final && !poolDependent(r.Reason) {
			if err := s.rejectFinal(ctx, r); err != nil {
				return true, err
			}
			changed = true
		}
	}
	for _, r := range s.incompleteGangs(snap.Now) {
		if err := s.rejectFinal(ctx, r); err != nil {
			return true, err
		}
		changed = true
	}
	if changed {
		s.roomMade()
	}
	return changed, nil
}

// assign writes assignments the ledger holds (ts[i] is as[i]'s job, now
// assigned) and settles the jobs whose assignment failed.
func (s *Scheduler) assign(ctx context.Context, as []pool.Assignment, ts []*tracked) error {
	if len(as) == 0 {
		return nil
	}
	errs := s.orders.Assign(ctx, s.fence, as)
	now := s.cfg.Clock.Now()
	var look []string
	held := 0
	s.mu.Lock()
	for i, err := range errs {
		t := ts[i]
		switch {
		case err == nil:
			t.started = now
			s.stats.placements++
		case fenced(err):
			s.setPhaseLocked(t, PhasePending)
		case errors.Is(err, pool.ErrNotQueued) || errors.Is(err, pool.ErrNoJob):
			s.setPhaseLocked(t, PhasePending)
			look = append(look, t.id())
		case errors.Is(err, pool.ErrReconciling):
			// Redis restarted: the nodes re-assert their jobs first (see
			// package agent, reconcile.go); placed again next cycle.
			s.setPhaseLocked(t, PhasePending)
			held++
		default:
			s.setPhaseLocked(t, PhasePending) // Redis trouble: next cycle
			s.log.Warn("assign", "job", t.id(), "err", err)
		}
	}
	s.mu.Unlock()
	if held > 0 {
		s.log.Info("assignments held: the nodes are reconciling after a Redis restart", "jobs", held)
	}
	for _, err := range errs {
		if fenced(err) {
			return err
		}
	}
	return s.reload(ctx, look)
}

// canSkipLocked reports, when nothing but the time and new jobs changed
// since the last plan (no s.replan), whether a plan now would place
// nothing, so the engine need not run (s.mu held): no new job, or the last
// plan left every pending job stuck and no new job fits on any node now.
//
// Why a plan would then place nothing: since the last plan, nodes only
// lost room (its placements; anything that frees room or changes a node
// sets s.replan) and the accounts' allocations only grew. So a job that
// found no node then finds none now (fitting is monotone in free room),
// a job held by its quota or share cap is held still (monotone in the
// allocation, and nothing placed before it), and a gang still lacks
// members (new gang members set s.replan). The new jobs are no gang
// members and fit on no node now (engine.FitsNow: the engine places a job
// only where it passes those checks). Walking the plan's order, nothing is
// placed before each entry, so none is placed at all. What such a skipped
// plan would change (explanations and positions, which job holds the
// reservation, final rejections of the new jobs, the State) waits for the
// next plan, at most FullReplan later, as in an idle cycle.
// TestSkippedPlanPlacesNothing checks this on random histories.
//
// New jobs that wait are planned, and so explained and given a position,
// within explainNewWithin all the same, not only at the next full re-plan.
func (s *Scheduler) canSkipLocked() bool {
	if len(s.added) > 0 {
		if !s.stuck || s.mayPreemptLocked() {
			return false
		}
		s.nodeBuf = s.ledger.SnapshotInto(s.nodeBuf, nil)
		for _, t := range s.added {
			if t.phase == PhasePending && engine.FitsNow(s.nodeBuf, t.job()) {
				return false
			}
		}
		s.added = s.added[:0] // stuck with the others now
		s.unexplained = true
	}
	return !s.unexplained || s.cfg.Clock.Now().Sub(s.plannedAt) < explainNewWithin
}

// stuckLocked reports whether a plan, by its explanations, left every
// pending job unable to start until room frees (s.mu held): each job not
// placed found no node (no-fit, or the reservation it holds; single jobs
// only, as a gang's trial placement is not monotone in the free room), or
// is held by its account's quota or share cap, or waits for its gang's
// missing members. A job blocked only by the reservation (backfill-blocked,
// blocked), or whose deadline can no longer be met (its reason replaces
// the others), is not counted stuck.
func (s *Scheduler) stuckLocked(expls iter.Seq2[int, engine.Explanation]) bool {
	for _, e := range expls {
		if e.Placed {
			continue
		}
		switch e.Reason {
		case engine.ReasonNoFit, engine.ReasonReserved:
			if t, ok := s.jobs_[e.JobID]; !ok || t.gangID != "" {
				return false
			}
		case engine.ReasonQuota, engine.ReasonOverShare, engine.ReasonGangIncomplete:
		default:
			return false
		}
	}
	return true
}

// snapshotLocked builds the engine's input for a full plan (s.mu held).
func (s *Scheduler) snapshotLocked() engine.Snapshot {
	s.cycle++
	running := make([]engine.Running, 0, len(s.jobs_)-s.pendingN+len(s.ended))
	pending := make([]engine.Job, 0, s.pendingN)
	for _, id := range s.sortedIDsLocked() {
		t := s.jobs_[id]
		if t.phase == PhasePending {
			if t.hold == nil { // a preemptor waiting for its victims is not planned again
				pending = append(pending, t.job())
			}
			continue
		}
		if r, ok := s.runningLocked(t); ok {
			running = append(running, r)
		}
	}
	return s.snapshotOfLocked(s.cfg.Clock.Now(), s.ledger.Snapshot(), pending, running, s.cfg.Seed^s.cycle)
}

// runningLocked is t (assigned or running) as the engine sees it; false
// for a suspended job, which holds only its pin, already in the nodes'
// view: neither running nor a victim (s.mu held).
func (s *Scheduler) runningLocked(t *tracked) (engine.Running, bool) {
	if t.suspended {
		return engine.Running{}, false
	}
	r := engine.Running{Job: t.job(), Started: t.started}
	r.LastCheckpoint = s.lastCheckpointLocked(t.id())
	r.PreemptModes = s.modesLocked(t.node())
	if t.phase != PhaseRunning || t.evicting != nil {
		r.NonPreemptible = true // only a started job is a victim, and only once
	}
	if t.placement != nil {
		r.Node, r.GPUs, r.MIG = t.placement.Node, t.placement.GPUs, t.placement.MIG
	}
	return r, true
}

// snapshotOfLocked is the engine's input at now over nodes, pending and
// running (the jobs that ended since the last plan are added), with seed
// (s.mu held).
func (s *Scheduler) snapshotOfLocked(now time.Time, nodes []engine.Node, pending []engine.Job, running []engine.Running, seed uint64) engine.Snapshot {
	running = append(running, s.ended...)
	s.heldNodesLocked(nodes)
	return engine.Snapshot{
		Now:        now,
		Seed:       seed,
		Policy:     s.cfg.Policy,
		Nodes:      nodes,
		Pending:    pending,
		Running:    running,
		Accounts:   s.cfg.Accounts,
		Preemption: s.cfg.Preemption,
	}
}

// explainNewWithin bounds how long a new job that cannot start waits for
// its first explanation (see canSkipLocked).
const explainNewWithin = 2 * time.Second

// sortedIDsLocked returns the ids of the tracked jobs in order: the last
// order with the ids added since merged in and those deleted left out
// (linear, where sorting every id each cycle was a tenth of a deep
// queue's scheduling time).
func (s *Scheduler) sortedIDsLocked() []string {
	if len(s.newIDs) == 0 && !s.idsDropped && len(s.ids) == len(s.jobs_) {
		return s.ids
	}
	slices.Sort(s.newIDs)
	out := make([]string, 0, len(s.jobs_))
	add := func(id string) {
		if n := len(out); n > 0 && out[n-1] == id {
			return // re-added, or added twice
		}
		if _, ok := s.jobs_[id]; ok {
			out = append(out, id)
		}
	}
	old, added := s.ids, s.newIDs
	for len(old) > 0 || len(added) > 0 {
		if len(added) == 0 || len(old) > 0 && old[0] <= added[0] {
			add(old[0])
			old = old[1:]
		} else {
			add(added[0])
			added = added[1:]
		}
	}
	if len(out) != len(s.jobs_) { // a key added without newIDs: sort them all
		out = slices.Sorted(maps.Keys(s.jobs_))
	}
	s.ids, s.newIDs, s.idsDropped = out, s.newIDs[:0], false
	return out
}

func (s *Scheduler) rejectFinal(ctx context.Context, r engine.Rejection) error {
	s.mu.Lock()
	t, ok := s.jobs_[r.JobID]
	if !ok || t.phase != PhasePending {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	to := wire.JobFailed
	if r.Reason == engine.ReasonDeadlineInfeasible {
		to = wire.JobExpired
	}
	_, err := s.jobs.Transition(ctx, t.id(), wire.JobQueued, to, jobs.Update{
		Error: &wire.JobError{Code: string(r.Reason), Message: r.Message}})
	if fenced(err) {
		return err
	}
	if err != nil && !errors.Is(err, jobs.ErrConflict) {
		s.log.Warn("reject job", "job", t.id(), "err", err)
		return nil
	}
	s.mu.Lock()
	s.stats.failed++
	s.dropLocked(t, s.cfg.Clock.Now())
	s.mu.Unlock()
	return nil
}

// incompleteGangs returns a final rejection (gang_incomplete) for each
// pending member of a gang that still lacks members GangTimeout after its
// first member was accepted.
func (s *Scheduler) incompleteGangs(now time.Time) []engine.Rejection {
	type gang struct {
		size, members int
		first         time.Time
		pending       []string
	}
	s.mu.Lock()
	if s.gangN == 0 {
		s.mu.Unlock()
		return nil // the walk below was a hundredth of a deep queue's cycle
	}
	gangs := map[string]*gang{}
	for _, t := range s.jobs_ {
		if t.gangID == "" || t.gangSize <= 1 {
			continue
		}
		key := t.acct + "\x00" + t.gangID
		g := gangs[key]
		at := epochTime(t.accepted)
		if g == nil {
			g = &gang{size: int(t.gangSize), first: at}
			gangs[key] = g
		}
		g.members++
		if at.Before(g.first) {
			g.first = at
		}
		if t.phase == PhasePending {
			g.pending = append(g.pending, t.id())
		}
	}
	s.mu.Unlock()
	var out []engine.Rejection
	for _, g := range gangs {
		if g.members >= g.size || len(g.pending) == 0 || now.Sub(g.first) < s.cfg.GangTimeout {
			continue
		}
		slices.Sort(g.pending)
		for _, id := range g.pending {
			out = append(out, engine.Rejection{JobID: id, Reason: engine.Code(wire.CodeGangIncomplete), Final: true,
				Message: fmt.Sprintf("gang has %d of its %d members %v after the first was accepted (scheduler.gang_timeout); post all members together", g.members, g.size, s.cfg.GangTimeout)})
		}
	}
	return out
}

// saveState writes the engine checkpoint when it changed (always when
// final).
func (s *Scheduler) saveState(ctx context.Context, final bool) {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st.LastNow.IsZero() || (!final && st.LastNow.Equal(s.savedState)) {
		return
	}
	b, err := engine.MarshalState(st)
	if err != nil {
		s.log.Error("encode engine checkpoint", "err", err)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.jobs.SaveEngineState(sctx, s.cfg.CheckpointName, b); err != nil {
		s.log.Warn("save engine checkpoint", "err", err)
		return
	}
	s.savedState = st.LastNow
}

// poolDependent reports whether a final rejection only says that no node
// registered now could run the job: the pool may grow (an agent comes
// back, a node is added), so the job waits and its explanation says what
// it lacks. Intake already refused what no registered node nor declared
// node class could ever run.
func poolDependent(r engine.Code) bool {
	switch r {
	case engine.ReasonNoSuchGPU, engine.ReasonNoSuchMIG, engine.ReasonNoSuchTier, engine.ReasonNoSuchNode, engine.ReasonImpossible:
		return true
	}
	return false
}
