package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// jobBroker is what the dispatcher needs from the broker, and jobStore
// what it needs from the job records (owned here, the consumer, so tests
// can see the whole seam on one screen).
type jobBroker interface {
	NextBatchAdmitted(ctx context.Context, n int, admit func(account string) bool) ([]*broker.Delivery, error)
	AcceptBatch(ctx context.Context, ds []*broker.Delivery) []broker.AcceptResult
	Reject(ctx context.Context, d *broker.Delivery, werr *wire.Error) error
}

type jobStore interface {
	Transition(ctx context.Context, jobID string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, error)
	ListActive(ctx context.Context) ([]jobs.Job, error)
}

// tracked is one job the dispatcher knows about. Owned by the Run
// goroutine; readers get copies through snapshot methods under d.mu.
type tracked struct {
	rec       jobs.Job
	ej        engine.Job
	cmd       Command
	handle    providers.Handle
	placement engine.Placement
	started   time.Time
	explained explainKey // what was last published on the job entry
	explAt    time.Time
}

type explainKey struct {
	reason engine.Code
	pos    int
	placed bool
}

// dispatcher turns accepted jobs into processes: it runs the engine on a
// snapshot each cycle, applies the plan through the provider (re-checking
// each placement with a compare-and-set on the job record), polls running
// jobs and writes every transition back to the job record (package jobs).
type dispatcher struct {
	cfg      *Config
	br       jobBroker
	jobs     jobStore
	prov     providers.Provider
	provName string
	node     engine.Node // capacity; Allocated is computed each cycle
	policy   engine.Policy
	accounts []engine.Account
	clock    clock.Clock
	log      *slog.Logger
	notify   func()    // telemetry wake-up; never blocks
	pres     *presence // heartbeats and job holders, shared with other adapters
	// requestStatus reads the status of request entries (nil: skip).
	requestStatus func(ctx context.Context, entryIDs []string) ([]string, error)

	incoming chan jobs.Job // accepted jobs, from the intake goroutine
	wake     chan struct{} // one-slot: run a cycle soon
	room     chan struct{} // one-slot: a pending job left (intake may go on)

	explainedAt time.Time // owned by the Run goroutine

	futureStamps atomic.Int64 // requests whose entry timestamp was after their acceptance (clamped)

	cancelMu sync.Mutex
	cancels  []string // guarded by cancelMu: job IDs whose requests were retracted

	mu         sync.Mutex     // guards everything below; held only for in-memory work
	handedOver map[string]int // accepted jobs on their way to pending (in d.incoming), by account
	pending    map[string]*tracked
	running    map[string]*tracked
	ended      []engine.Running // ended since the last cycle, charged to usage once
	state      engine.State
	cycle      uint64
	plan       engine.Plan
	stats      counters
}

type counters struct {
	submitted, completed, failed int
	cancelled                    int
	waitSum, turnSum             float64
	waitN, turnN                 int
	cycles                       int
	placements                   int
	lastCycle                    time.Duration
}

func newDispatcher(cfg *Config, br jobBroker, js jobStore, prov providers.Provider, provName string, node engine.Node, clk clock.Clock, log *slog.Logger, notify func(), pres *presence) *dispatcher {
	pol := engine.Policy{
		Selection: engine.Selection(cfg.Scheduler.FairShare),
		Strategy:  engine.Strategy(cfg.Scheduler.Placement),
	}
	accts := cfg.engineAccounts()
	return &dispatcher{
		cfg: cfg, br: br, jobs: js, prov: prov, provName: provName, node: node, policy: pol, accounts: accts,
		clock: clk, log: log, notify: notify, pres: pres,
		incoming:   make(chan jobs.Job, 1024),
		wake:       make(chan struct{}, 1),
		room:       make(chan struct{}, 1),
		pending:    map[string]*tracked{},
		running:    map[string]*tracked{},
		handedOver: map[string]int{},
	}
}

func (d *dispatcher) pendingCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// roomMade tells a waiting intake that pending jobs left.
func (d *dispatcher) roomMade() {
	select {
	case d.room <- struct{}{}:
	default:
	}
}

func (d *dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// OnCancel is the broker's cancellation hook; it must not block.
func (d *dispatcher) OnCancel(c broker.Cancel) {
	d.cancelMu.Lock()
	d.cancels = append(d.cancels, c.JobID)
	d.cancelMu.Unlock()
	d.poke()
}

// Intake takes requests from the broker, makes them durable jobs and hands
// them to the scheduling loop. It runs until ctx is done.
//
// Scheduler.MaxPending is shared by the accounts by their shares: an
// account with jobs waiting in the engine takes new ones only while it
// holds fewer than its share of MaxPending among the accounts that have
// jobs waiting (see intakeAdmit), so one account's requests that cannot
// start (an incomplete gang, a resource no node has free) never stop
// another's. Requests of an account at its share stay in the inbox and,
// past its capacity, in Redis.
func (d *dispatcher) Intake(ctx context.Context) error {
	for {
		// A hard bound for memory: twice MaxPending (the shares add up to
		// MaxPending, plus what accounts took before others arrived).
		for d.pendingCount()+len(d.incoming) >= 2*d.cfg.Scheduler.MaxPending {
			select {
			case <-ctx.Done():
				return nil
			case <-d.room:
			case <-time.After(100 * time.Millisecond):
			}
		}
		admit := d.intakeAdmit()
		// Re-read the shares at least every 250 ms while nothing is
		// admitted: pending jobs leave, and other accounts come and go.
		nctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		dels, err := d.br.NextBatchAdmitted(nctx, intakeBatch, admit)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			d.log.Warn("intake: next", "err", err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return nil
			}
			continue
		}
		results := d.br.AcceptBatch(ctx, dels)
		var mine []string
		for _, r := range results {
			if r.Err == nil && r.Job.Status == wire.JobQueued {
				mine = append(mine, r.Job.JobID)
			}
		}
		if err := d.pres.Own(ctx, mine...); err != nil && ctx.Err() == nil {
			d.log.Warn("intake: record holder", "err", err)
		}
		for i, r := range results {
			if r.Err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if !errors.Is(r.Err, broker.ErrLeaseLost) {
					d.log.Warn("intake: accept", "entry_id", dels[i].EntryID, "err", r.Err)
				}
				continue
			}
			if r.Job.Status != wire.JobQueued || r.Job.RequestEntryID != dels[i].EntryID {
				continue // a duplicate idempotency key, or cancelled while accepting
			}
			d.mu.Lock()
			d.handedOver[r.Job.Account]++ // counted against its share until the engine holds it
			d.mu.Unlock()
			select {
			case d.incoming <- r.Job:
			case <-ctx.Done():
				return nil
			}
		}
		d.poke()
	}
}

// intakeAdmit returns the intake's admission test for one batch: account
// a may take a request while it holds fewer than
//
//	MaxPending × S_a / (S_a + Σ S_b over the other accounts with pending jobs)
//
// pending jobs (S: the account's configured shares, 1 by default), counting
// the requests this batch already took. A lone account may use all of
// MaxPending; each account that arrives gets its share at once, and the
// others take nothing until they are back under theirs. Jobs accepted but
// not yet in the engine (on their way through d.incoming) count too.
func (d *dispatcher) intakeAdmit() func(account string) bool {
	d.mu.Lock()
	held := maps.Clone(d.handedOver)
	if held == nil {
		held = map[string]int{}
	}
	for _, t := range d.pending {
		held[t.rec.Account]++
	}
	d.mu.Unlock()
	var total float64
	for a := range held {
		total += d.shares(a)
	}
	limit := float64(d.cfg.Scheduler.MaxPending)
	return func(a string) bool {
		s := d.shares(a)
		others := total
		if held[a] > 0 {
			others -= s
		}
		if float64(held[a]) >= limit*s/(s+others) {
			return false
		}
		held[a]++
		if held[a] == 1 {
			total += s
		}
		return true
	}
}

// shares is an account's configured shares (1 when not configured).
func (d *dispatcher) shares(account string) float64 {
	for _, a := range d.accounts {
		if a.Name == account && a.Shares > 0 {
			return a.Shares
		}
	}
	return 1
}

// intakeBatch is the most requests taken from the inbox in one round (one
// pipelined accept for all of them, which also checks each request is
// still wanted).
const intakeBatch = 64

// Recover loads the jobs left active in Redis that this adapter should
// hold: queued jobs it accepted (after a restart) or whose holder has
// stopped beating (a dead adapter's queue), and running jobs on its node,
// re-attached through their handle. A running job on a node silent for
// longer than Scheduler.NodeTimeout is ended as lost: its process may
// still run there, so it is never started again elsewhere.
func (d *dispatcher) Recover(ctx context.Context) error {
	active, err := d.jobs.ListActive(ctx)
	if err != nil {
		return err
	}
	var fresh []jobs.Job
	for _, j := range active {
		d.mu.Lock()
		_, known := d.pending[j.JobID]
		_, knownR := d.running[j.JobID]
		d.mu.Unlock()
		if !known && !knownR {
			fresh = append(fresh, j)
		}
	}
	ids := make([]string, len(fresh))
	for i, j := range fresh {
		ids[i] = j.JobID
	}
	owners, silent, err := d.pres.view(ctx, ids)
	if err != nil {
		return err
	}
	// A request retracted while no adapter watched the events is
	// cancelled here: queued jobs never start, running ones are stopped.
	withdrawn, err := d.withdrawn(ctx, fresh)
	if err != nil {
		return err
	}
	var adopted []string
	for _, j := range fresh {
		if withdrawn[j.JobID] && j.Status == wire.JobQueued {
			_, err := d.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobCancelled, jobs.Update{
				Error: &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}})
			if err != nil && !errors.Is(err, jobs.ErrConflict) {
				d.log.Warn("cancel withdrawn job", "job", j.JobID, "err", err)
			}
			_ = d.pres.Disown(ctx, j.JobID)
			continue
		}
		switch j.Status {
		case wire.JobQueued:
			owner := owners[j.JobID]
			if owner != "" && owner != d.node.Name && !gone(silent, owner, d.pres.staleness) {
				continue // a live adapter holds it
			}
			d.addPending(j)
			adopted = append(adopted, j.JobID)
		case wire.JobRunning:
			switch {
			case j.Node == d.node.Name:
				d.reattach(ctx, j)
				if withdrawn[j.JobID] {
					d.OnCancel(broker.Cancel{EntryID: j.RequestEntryID, JobID: j.JobID})
				}
			case gone(silent, j.Node, d.cfg.Scheduler.NodeTimeout.D()):
				d.endLost(ctx, j)
			}
		}
	}
	return d.pres.Own(ctx, adopted...)
}

// withdrawn reports which jobs' request entries were retracted or
// superseded (or marked cancel_requested by a broker that saw it).
func (d *dispatcher) withdrawn(ctx context.Context, js []jobs.Job) (map[string]bool, error) {
	out := map[string]bool{}
	var ids []string
	for _, j := range js {
		if j.CancelRequested {
			out[j.JobID] = true
		}
		ids = append(ids, j.RequestEntryID)
	}
	if d.requestStatus == nil || len(ids) == 0 {
		return out, nil
	}
	sts, err := d.requestStatus(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i, j := range js {
		if s := sts[i]; s == string(blackboard.StatusRetracted) || s == string(blackboard.StatusSuperseded) {
			out[j.JobID] = true
		}
	}
	return out, nil
}

// endLost ends a running job whose node went silent.
func (d *dispatcher) endLost(ctx context.Context, j jobs.Job) {
	_, err := d.jobs.Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{
		Error: &wire.JobError{Code: "lost", Message: fmt.Sprintf("node %s has not been heard from for over %v", j.Node, d.cfg.Scheduler.NodeTimeout.D())}})
	if err != nil && !errors.Is(err, jobs.ErrConflict) {
		d.log.Warn("end lost job", "job", j.JobID, "err", err)
		return
	}
	_ = d.pres.Disown(ctx, j.JobID)
	d.log.Warn("ended a job of a silent node as lost", "job", j.JobID, "node", j.Node)
}

func (d *dispatcher) reattach(ctx context.Context, j jobs.Job) {
	t, werr := d.track(j)
	if werr != nil {
		_, _ = d.jobs.Transition(ctx, j.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{
			Error: &wire.JobError{Code: string(werr.Code), Message: werr.Message}})
		return
	}
	t.handle = providers.Handle{Provider: d.provName, ID: taskID(j.JobID, j.Attempt)}
	if j.StartedAt != nil {
		t.started = epochTime(*j.StartedAt)
	}
	t.placement = engine.Placement{JobID: j.JobID, Node: d.node.Name, NUMA: -1}
	d.mu.Lock()
	d.running[j.JobID] = t
	d.mu.Unlock()
	d.log.Info("re-attached running job", "job", j.JobID, "handle", t.handle.String())
}

// track builds the in-memory view of a job record.
func (d *dispatcher) track(j jobs.Job) (*tracked, *wire.Error) {
	cmd, werr := d.cfg.Resolve(j.Request)
	if werr != nil {
		return nil, werr
	}
	sub := epochTime(j.AcceptedAt)
	if j.SubmittedAt != nil {
		// The poster's clock: a timestamp after acceptance (a clock ahead,
		// or milliseconds sent as seconds) is clamped to the acceptance, so
		// waits are never negative and never age a job ahead of its time.
		if posted := epochTime(*j.SubmittedAt); posted.After(sub) {
			d.futureStamps.Add(1)
		} else {
			sub = posted
		}
	}
	ej := engineJob(j, sub, d.cfg)
	// The provider stops the task at cmd.Timeout, so backfill may plan its
	// end there whatever its estimate (as Slurm plans by time limit).
	ej.TimeLimit = cmd.Timeout
	return &tracked{rec: j, ej: ej, cmd: cmd}, nil
}

func (d *dispatcher) addPending(j jobs.Job) {
	t, werr := d.track(j)
	if werr != nil {
		// The config changed since acceptance (template removed, say).
		_, err := d.jobs.Transition(context.Background(), j.JobID, wire.JobQueued, wire.JobFailed, jobs.Update{
			Error: &wire.JobError{Code: string(werr.Code), Message: werr.Message}})
		if err != nil {
			d.log.Warn("fail job", "job", j.JobID, "err", err)
		}
		return
	}
	d.mu.Lock()
	if _, ok := d.running[j.JobID]; !ok {
		if _, ok := d.pending[j.JobID]; !ok {
			d.pending[j.JobID] = t
			d.stats.submitted++
		}
	}
	d.mu.Unlock()
}

// Run is the scheduling loop: a cycle on every wake-up and at least every
// Scheduler.Interval, plus a rescan of the active jobs every 5 s.
func (d *dispatcher) Run(ctx context.Context) error {
	tick := time.NewTicker(d.cfg.Scheduler.Interval.D())
	defer tick.Stop()
	rescan := time.NewTicker(5 * time.Second)
	defer rescan.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-d.wake:
		case <-rescan.C:
			if err := d.Recover(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("rescan active jobs", "err", err)
			}
		}
		d.step(ctx)
	}
}

// step is one pass: take new jobs, apply cancellations, poll running jobs,
// schedule, start what was placed.
func (d *dispatcher) step(ctx context.Context) {
	changed := false
	for drained := false; !drained; {
		select {
		case j := <-d.incoming:
			d.addPending(j)
			d.mu.Lock()
			if d.handedOver[j.Account]--; d.handedOver[j.Account] <= 0 {
				delete(d.handedOver, j.Account)
			}
			d.mu.Unlock()
			changed = true
		default:
			drained = true
		}
	}
	if d.applyCancels(ctx) {
		changed = true
	}
	if d.pollRunning(ctx) {
		changed = true
	}
	if d.schedule(ctx) {
		changed = true
	}
	if changed {
		d.notify()
	}
	// Explanations go out from this goroutine, in sequence with the
	// transitions, so a stale "queued" can never overwrite "running".
	if now := d.clock.Now(); now.Sub(d.explainedAt) >= time.Second {
		d.explainedAt = now
		d.PublishExplanations(ctx, 50, 2*time.Second)
	}
}

func (d *dispatcher) applyCancels(ctx context.Context) bool {
	d.cancelMu.Lock()
	ids := d.cancels
	d.cancels = nil
	d.cancelMu.Unlock()
	changed := false
	for _, id := range ids {
		d.mu.Lock()
		p, isPending := d.pending[id]
		r, isRunning := d.running[id]
		d.mu.Unlock()
		switch {
		case isPending:
			_, err := d.jobs.Transition(ctx, id, wire.JobQueued, wire.JobCancelled, jobs.Update{
				Error: &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}})
			if err != nil && !errors.Is(err, jobs.ErrConflict) {
				d.log.Warn("cancel queued job", "job", id, "err", err)
				continue
			}
			d.mu.Lock()
			delete(d.pending, p.rec.JobID)
			d.stats.cancelled++
			d.mu.Unlock()
			_ = d.pres.Disown(ctx, id)
			changed = true
		case isRunning:
			// Stop signals at once and the provider finishes the kill on
			// its own; don't let a task that ignores SIGTERM stall the loop.
			// Until Stop returns nil (the task has ended) the cancellation is
			// retried every cycle; Stop may be called any number of times.
			sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			if err := d.prov.Stop(sctx, r.handle); err != nil {
				if sctx.Err() == nil {
					d.log.Warn("stop cancelled job", "job", id, "err", err)
				}
				d.cancelMu.Lock()
				d.cancels = append(d.cancels, id)
				d.cancelMu.Unlock()
			}
			cancel()
			// pollRunning records the cancelled status.
			changed = true
		default:
			// Not ours (yet): the record says cancel_requested; whoever
			// picks it up sees the retracted request at Transition time.
			_, _ = d.jobs.Transition(ctx, id, wire.JobQueued, wire.JobCancelled, jobs.Update{
				Error: &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}})
		}
	}
	return changed
}

// pollRunning asks the provider about every running job and records the
// ones that ended.
func (d *dispatcher) pollRunning(ctx context.Context) bool {
	d.mu.Lock()
	run := slices.Collect(maps.Values(d.running))
	d.mu.Unlock()
	changed := false
	for _, t := range run {
		st, err := d.prov.Poll(ctx, t.handle)
		if errors.Is(err, providers.ErrUnknownHandle) {
			// The record says running but the provider never started the
			// task: the adapter died between the compare-and-set and the
			// start. Nothing ran, so the job goes back to the queue.
			d.requeueUnstarted(ctx, t)
			changed = true
			continue
		} else if err != nil {
			d.log.Warn("poll", "job", t.rec.JobID, "err", err)
			continue
		}
		if !st.State.Terminal() {
			continue
		}
		d.finish(ctx, t, st)
		changed = true
	}
	return changed
}

// requeueUnstarted returns a job whose task was never started to the queue.
func (d *dispatcher) requeueUnstarted(ctx context.Context, t *tracked) {
	rec, err := d.jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, wire.JobQueued, jobs.Update{})
	if err != nil && !errors.Is(err, jobs.ErrConflict) {
		d.log.Warn("requeue unstarted job", "job", t.rec.JobID, "err", err)
		return
	}
	d.mu.Lock()
	delete(d.running, t.rec.JobID)
	if err == nil {
		t.rec = rec
		d.pending[t.rec.JobID] = t
	}
	d.mu.Unlock()
	d.log.Info("requeued a job whose task never started", "job", t.rec.JobID)
}

func (d *dispatcher) finish(ctx context.Context, t *tracked, st providers.Status) {
	now := d.clock.Now()
	u := jobs.Update{ExitCode: st.ExitCode, StdoutPath: st.StdoutPath, StderrPath: st.StderrPath}
	to := wire.JobSucceeded
	switch st.State {
	case providers.StateFailed:
		to = wire.JobFailed
		code := "exit_status"
		switch {
		case st.TimedOut:
			code = "timeout"
		case st.ExitCode == nil:
			code = "killed"
		}
		u.Error = &wire.JobError{Code: code, Message: firstNonEmpty(st.Error, exitMessage(st.ExitCode))}
	case providers.StateCancelled:
		to = wire.JobCancelled
		u.Error = &wire.JobError{Code: "cancelled", Message: firstNonEmpty(st.Error, "stopped on request")}
	case providers.StateLost:
		to = wire.JobFailed
		u.Error = &wire.JobError{Code: "lost", Message: firstNonEmpty(st.Error, "the process could no longer be observed")}
	}
	retry := to == wire.JobFailed && t.rec.Attempt <= t.rec.Request.MaxRetries && t.rec.Attempt > 0
	if retry {
		to = wire.JobQueued
	}
	rec, err := d.jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, to, u)
	if err != nil && !errors.Is(err, jobs.ErrConflict) {
		d.log.Warn("record job end", "job", t.rec.JobID, "err", err)
		if rec.JobID == "" {
			return // try again on the next poll
		}
	}
	d.mu.Lock()
	delete(d.running, t.rec.JobID)
	ended := engine.Running{Job: t.ej, Node: t.placement.Node, Started: t.started, Ended: now}
	d.ended = append(d.ended, ended)
	switch {
	case retry:
		if rec.JobID != "" {
			t.rec = rec
		}
		d.pending[t.rec.JobID] = t
	case to == wire.JobSucceeded:
		d.stats.completed++
	case to == wire.JobCancelled:
		d.stats.cancelled++
	default:
		d.stats.failed++
	}
	if !t.started.IsZero() && !retry {
		d.stats.turnSum += max(0, now.Sub(t.ej.Submitted).Seconds())
		d.stats.turnN++
	}
	d.mu.Unlock()
	if !retry {
		_ = d.pres.Disown(ctx, t.rec.JobID)
	}
	d.log.Info("job ended", "job", t.rec.JobID, "status", to, "exit_code", exitCodeValue(st.ExitCode))
}

// schedule runs one engine cycle and applies its placements.
func (d *dispatcher) schedule(ctx context.Context) bool {
	d.mu.Lock()
	if len(d.pending) == 0 && len(d.ended) == 0 {
		d.mu.Unlock()
		return false
	}
	snap := d.snapshotLocked()
	st := d.state
	d.ended = nil
	d.mu.Unlock()

	begin := time.Now()
	plan, next := engine.Schedule(st, snap)
	took := time.Since(begin)

	d.mu.Lock()
	d.state = next
	d.plan = plan
	d.stats.cycles++
	d.stats.lastCycle = took
	d.mu.Unlock()

	changed := false
	for _, p := range plan.Placements {
		if ctx.Err() != nil {
			break // shutting down: the rest stay queued
		}
		if d.start(ctx, p) {
			changed = true
		}
	}
	for _, r := range plan.Rejected {
		if r.Final {
			d.rejectFinal(ctx, r)
			changed = true
		}
	}
	for _, r := range d.incompleteGangs(snap.Now) {
		d.rejectFinal(ctx, r)
		changed = true
	}
	if changed {
		d.roomMade()
	}
	return changed
}

// incompleteGangs returns a final rejection (gang_incomplete) for each
// pending member of a gang that still lacks members GangTimeout after its
// first member was accepted: such a gang can never start, and its members
// would hold their account's share of MaxPending for ever.
func (d *dispatcher) incompleteGangs(now time.Time) []engine.Rejection {
	type gang struct {
		size, members int
		first         time.Time
		pending       []string
	}
	d.mu.Lock()
	gangs := map[string]*gang{}
	add := func(t *tracked, pending bool) {
		if t.ej.GangID == "" || t.ej.GangSize <= 1 {
			return
		}
		key := t.ej.Account + "\x00" + t.ej.GangID
		g := gangs[key]
		if g == nil {
			g = &gang{size: t.ej.GangSize, first: epochTime(t.rec.AcceptedAt)}
			gangs[key] = g
		}
		g.members++
		if at := epochTime(t.rec.AcceptedAt); at.Before(g.first) {
			g.first = at
		}
		if pending {
			g.pending = append(g.pending, t.rec.JobID)
		}
	}
	for _, t := range d.pending {
		add(t, true)
	}
	for _, t := range d.running {
		add(t, false)
	}
	d.mu.Unlock()
	var out []engine.Rejection
	timeout := d.cfg.Scheduler.GangTimeout.D()
	for _, g := range gangs {
		if g.members >= g.size || len(g.pending) == 0 || now.Sub(g.first) < timeout {
			continue
		}
		slices.Sort(g.pending)
		for _, id := range g.pending {
			out = append(out, engine.Rejection{JobID: id, Reason: engine.Code(wire.CodeGangIncomplete), Final: true,
				Message: fmt.Sprintf("gang has %d of its %d members %v after the first was accepted (scheduler.gang_timeout); post all members together", g.members, g.size, timeout)})
		}
	}
	return out
}

// snapshotLocked builds the engine's input. d.mu is held.
func (d *dispatcher) snapshotLocked() engine.Snapshot {
	d.cycle++
	node := d.node
	var alloc engine.Resources
	running := make([]engine.Running, 0, len(d.running)+len(d.ended))
	for _, id := range slices.Sorted(maps.Keys(d.running)) {
		t := d.running[id]
		alloc = alloc.Add(t.ej.Request)
		running = append(running, engine.Running{Job: t.ej, Node: t.placement.Node, Started: t.started})
	}
	running = append(running, d.ended...)
	node.Allocated = alloc
	pending := make([]engine.Job, 0, len(d.pending))
	for _, id := range slices.Sorted(maps.Keys(d.pending)) {
		pending = append(pending, d.pending[id].ej)
	}
	return engine.Snapshot{
		Now:      d.clock.Now(),
		Seed:     d.cfg.Scheduler.Seed ^ d.cycle, // derived from the cycle, never the wall clock
		Policy:   d.policy,
		Nodes:    []engine.Node{node},
		Pending:  pending,
		Running:  running,
		Accounts: d.accounts,
	}
}

// start applies one placement: compare-and-set queued → running (so a job
// never starts twice, even with several adapters), then the provider.
func (d *dispatcher) start(ctx context.Context, p engine.Placement) bool {
	// A start, once begun, is finished even if the adapter is shutting
	// down: cut short, the task might run while its record says otherwise.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	d.mu.Lock()
	t, ok := d.pending[p.JobID]
	if ok {
		delete(d.pending, p.JobID)
	}
	d.mu.Unlock()
	if !ok {
		return false
	}
	rec, err := d.jobs.Transition(ctx, t.rec.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{Node: p.Node})
	if err != nil {
		if !errors.Is(err, jobs.ErrConflict) && !errors.Is(err, jobs.ErrNotFound) {
			d.log.Warn("start: transition", "job", t.rec.JobID, "err", err)
			d.mu.Lock()
			d.pending[t.rec.JobID] = t // Redis trouble: try again next cycle
			d.mu.Unlock()
		}
		if errors.Is(err, jobs.ErrWithdrawn) { // cancelled in the same step
			_ = d.pres.Disown(ctx, t.rec.JobID)
			d.mu.Lock()
			d.stats.cancelled++
			d.mu.Unlock()
			return true
		}
		return false // another adapter started it, or it was cancelled
	}
	t.rec = rec
	t.placement = p
	t.started = d.clock.Now()
	task := providers.Task{
		ID:      taskID(rec.JobID, rec.Attempt),
		Argv:    t.cmd.Argv,
		Env:     jobEnv(t.cmd.Env, rec),
		User:    t.cmd.User,
		Timeout: t.cmd.Timeout,
		Payload: rec.Request.Payload,
		Resources: providers.Resources{
			CPUCores:    rec.Request.Resources.CPUCores,
			MemoryBytes: int64(rec.Request.Resources.MemoryGB * (1 << 30)),
		},
		Placement: providers.Placement{Node: p.Node, NUMA: p.NUMA, GPUs: slices.Clone(p.GPUs), MIG: slices.Clone(p.MIG)},
		Labels:    map[string]string{"job": rec.JobID, "account": rec.Account, "attempt": strconv.Itoa(rec.Attempt)},
	}
	h, err := d.prov.Start(ctx, task)
	if err != nil {
		_, terr := d.jobs.Transition(ctx, rec.JobID, wire.JobRunning, wire.JobFailed, jobs.Update{
			Error: &wire.JobError{Code: "start_failed", Message: err.Error()}})
		if terr != nil {
			d.log.Warn("start: record failure", "job", rec.JobID, "err", terr)
		}
		_ = d.pres.Disown(ctx, rec.JobID)
		d.mu.Lock()
		d.stats.failed++
		d.mu.Unlock()
		return true
	}
	t.handle = h
	d.mu.Lock()
	d.running[rec.JobID] = t
	d.stats.placements++
	d.stats.waitSum += max(0, t.started.Sub(t.ej.Submitted).Seconds())
	d.stats.waitN++
	d.mu.Unlock()
	return true
}

func (d *dispatcher) rejectFinal(ctx context.Context, r engine.Rejection) {
	d.mu.Lock()
	t, ok := d.pending[r.JobID]
	delete(d.pending, r.JobID)
	d.mu.Unlock()
	if !ok {
		return
	}
	to := wire.JobFailed
	if r.Reason == engine.ReasonDeadlineInfeasible {
		to = wire.JobExpired
	}
	_, err := d.jobs.Transition(ctx, t.rec.JobID, wire.JobQueued, to, jobs.Update{
		Error: &wire.JobError{Code: string(r.Reason), Message: r.Message}})
	if err != nil && !errors.Is(err, jobs.ErrConflict) {
		d.log.Warn("reject job", "job", t.rec.JobID, "err", err)
	}
	_ = d.pres.Disown(ctx, t.rec.JobID)
	d.mu.Lock()
	d.stats.failed++
	d.mu.Unlock()
}

// Stats is the telemetry view: a copy taken under d.mu.
func (d *dispatcher) Stats(inboxDepth int) PoolStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	var alloc engine.Resources
	for _, t := range d.running {
		alloc = alloc.Add(t.ej.Request)
	}
	util := map[string]float64{}
	for _, dim := range []engine.Dim{engine.DimCPU, engine.DimMemory, engine.DimGPU} {
		if c := d.node.Capacity[dim]; c > 0 {
			util[dim.String()] = math.Min(1, float64(alloc[dim])/float64(c))
		}
	}
	s := d.stats
	avg := func(sum float64, n int) float64 {
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	jsd := wire.JobStatusData{
		PendingJobs: len(d.pending), RunningJobs: len(d.running),
		CompletedJobs: s.completed, FailedJobs: s.failed, CancelledJobs: s.cancelled, InboxDepth: inboxDepth,
		Statistics: wire.JobStatistics{
			JobsSubmitted: s.submitted, JobsCompleted: s.completed, JobsFailed: s.failed, JobsCancelled: s.cancelled,
			AverageWaitTime: avg(s.waitSum, s.waitN), AverageTurnaroundTime: avg(s.turnSum, s.turnN),
		},
	}
	return PoolStats{
		Utilization: util,
		Jobs:        jsd,
		Metrics: map[string]float64{
			"scheduler_cycles":        float64(s.cycles),
			"scheduler_placements":    float64(s.placements),
			"scheduler_last_cycle_ms": float64(s.lastCycle.Microseconds()) / 1000,
			"inbox_depth":             float64(inboxDepth),
		},
	}
}

// Explanations returns the latest plan's explanations by job ID (copy).
func (d *dispatcher) Explanations() map[string]engine.Explanation {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]engine.Explanation, len(d.plan.Explanations))
	for _, e := range d.plan.Explanations {
		out[e.JobID] = e
	}
	return out
}

// PublishExplanations writes changed explanations onto the job records and
// entries, at most limit per call and at most once per job every minGap, so
// a deep queue cannot flood Redis. Only the Run goroutine calls it.
func (d *dispatcher) PublishExplanations(ctx context.Context, limit int, minGap time.Duration) {
	now := d.clock.Now()
	type upd struct {
		t   *tracked
		key explainKey
		e   engine.Explanation
	}
	var todo []upd
	d.mu.Lock()
	for _, e := range d.plan.Explanations {
		if len(todo) >= limit {
			break
		}
		t, ok := d.pending[e.JobID]
		if !ok {
			continue
		}
		k := explainKey{reason: e.Reason, pos: e.Position, placed: e.Placed}
		if k == t.explained || now.Sub(t.explAt) < minGap {
			continue
		}
		t.explained, t.explAt = k, now
		todo = append(todo, upd{t, k, e})
	}
	d.mu.Unlock()
	for _, u := range todo {
		b, err := json.Marshal(ExplanationJSON(u.e))
		if err != nil {
			continue
		}
		if _, err := d.jobs.Transition(ctx, u.t.rec.JobID, wire.JobQueued, wire.JobQueued, jobs.Update{Explanation: b}); err != nil &&
			!errors.Is(err, jobs.ErrConflict) && ctx.Err() == nil {
			d.log.Warn("publish explanation", "job", u.t.rec.JobID, "err", err)
		}
	}
}

// Explained is the JSON form of an engine explanation on a job entry.
type Explained struct {
	Position     int      `json:"position"`
	Priority     float64  `json:"priority"`
	Level        int      `json:"level"`
	AgeHours     float64  `json:"age_hours"`
	AgeTerm      float64  `json:"age_term"`
	FairShare    float64  `json:"fair_share"`
	Urgency      float64  `json:"deadline_urgency"`
	SlackSeconds *float64 `json:"slack_seconds"`
	DeadlineMiss bool     `json:"deadline_miss"`
	Guaranteed   bool     `json:"guaranteed"`
	Placed       bool     `json:"placed"`
	Reason       string   `json:"reason,omitempty"`
	Message      string   `json:"message,omitempty"`
	EstStart     *float64 `json:"estimated_start"`
}

// ExplanationJSON converts an engine explanation for publication.
func ExplanationJSON(e engine.Explanation) Explained {
	f := e.Factors
	out := Explained{
		Position: e.Position, Priority: round3(e.Priority), Level: f.Level, AgeHours: round3(f.AgeHours),
		AgeTerm: round3(f.Age), FairShare: round3(f.FairShare), Urgency: round3(f.Urgency),
		DeadlineMiss: f.DeadlineMiss, Guaranteed: f.Guaranteed, Placed: e.Placed,
		Reason: string(e.Reason), Message: e.Message,
	}
	if f.HasDeadline {
		s := f.Slack.Seconds()
		out.SlackSeconds = &s
	}
	if !e.EstStart.IsZero() {
		s := float64(e.EstStart.UnixNano()) / 1e9
		out.EstStart = &s
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// engineJob converts a job record to the engine's view.
func engineJob(j jobs.Job, submitted time.Time, cfg *Config) engine.Job {
	r := j.Request.Resources
	var req engine.Resources
	req[engine.DimCPU] = int64(math.Ceil(r.CPUCores * 1000))
	req[engine.DimMemory] = int64(math.Ceil(r.MemoryGB * 1024))
	req[engine.DimGPU] = int64(r.GPUCount)
	req[engine.DimGPUMemory] = int64(math.Ceil(r.GPUMemoryGB*1024)) * int64(max(r.GPUCount, 1))
	if r.GPUMemoryGB == 0 {
		req[engine.DimGPUMemory] = 0
	}
	req[engine.DimNetwork] = int64(math.Ceil(r.NetworkMbps))
	if r.StorageGB > 0 {
		tier := r.StorageTier
		if tier == "" {
			tier = cfg.Node.storageTier()
		}
		if dim, ok := engine.TierDim(tier); ok {
			req[dim] = int64(math.Ceil(r.StorageGB))
		}
	}
	ej := engine.Job{
		ID: j.JobID, Account: j.Account, Priority: j.Priority, Submitted: submitted,
		Request: req, GPUModel: r.GPUModel, MIGProfile: r.MIGProfile, StorageTier: r.StorageTier,
		NodeSelector: j.Request.NodeSelector, NUMALocal: r.NUMALocal,
		GangID: j.Request.GangID, GangSize: j.Request.GangSize,
	}
	if j.Request.Deadline > 0 {
		ej.Deadline = epochTime(j.Request.Deadline)
	}
	if j.Request.EstimatedDuration > 0 {
		ej.EstDuration = time.Duration(j.Request.EstimatedDuration * float64(time.Second))
	}
	return ej
}

func taskID(jobID string, attempt int) string { return fmt.Sprintf("%s-%d", jobID, attempt) }

func jobEnv(env map[string]string, rec jobs.Job) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	out["COMPUTEBOARD_JOB_ID"] = rec.JobID
	out["COMPUTEBOARD_REQUEST_ID"] = rec.RequestEntryID
	out["COMPUTEBOARD_ATTEMPT"] = strconv.Itoa(rec.Attempt)
	out["COMPUTEBOARD_ACCOUNT"] = rec.Account
	return out
}

func epochTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// exitCodeValue is an exit code for a log line: the number, or "none"
// when the process had none (killed by a signal, never started).
func exitCodeValue(code *int) slog.Value {
	if code == nil {
		return slog.StringValue("none")
	}
	return slog.IntValue(*code)
}

func exitMessage(code *int) string {
	if code == nil {
		return "killed by a signal"
	}
	return fmt.Sprintf("exited with status %d", *code)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
