package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// Reconciliation after a Redis restart (issue 11, defect 1).
//
// Redis can come back having lost writes it acknowledged (an AOF with
// appendfsync everysec, on a host crash). A job record, its idempotency key
// and its intake acknowledgement then roll back together: the request is
// read again and, left alone, made a fresh job that runs a second time on
// another node while the first run goes on. The agent is what still knows
// the truth: the tasks it runs, and the ends it recorded a moment ago.
//
// So every restart of the Redis server opens a reconciliation round (package
// pool, lua/round.lua): the scheduler assigns nothing new until each
// registered node has re-asserted its jobs or the round times out. The
// agent learns of the round from its heartbeat, holds its own starts, and
// for each job it runs, and each it ended within recentEnds, makes the
// record say so again — recreating a record that is gone from what it
// holds (the request, its ids) — then tells the round it is done.
//
// What the agent holds in memory is not all: an agent that restarted
// across the rollback knows its tasks only from its providers' records.
// So reconcile also reads each node's start log (providers.Lister: for the
// local provider, the task directories, each with a state record written
// before its task was reported started) and re-asserts, from there, every
// task it does not hold: running ones, and those that ended lately (see
// evidenceSince). A record gone with Redis is recreated from the request's
// entry (jobs.Store.Reaccept), when the rollback left that.
//
// What remains open (README, Delivery guarantees): a node that is down or
// cut off during the round cannot re-assert, and its jobs can run again
// once the round times out.

// recentEnds is how long the agent remembers the jobs it ended, to record
// an end again if a rollback lost it: far longer than the second an AOF
// with appendfsync everysec can lose plus a heartbeat to learn of it, short
// enough to stay small; maxEnds bounds it for a very busy agent (a
// fake-node agent ending thousands of jobs a second keeps the latest).
const (
	recentEnds = 30 * time.Second
	maxEnds    = 20_000
)

// evidenceWindow is how far before its start a newly (re)started agent
// looks in its providers' task records for jobs that ended while it was
// away (evidenceSince).
const evidenceWindow = 10 * time.Minute

// evidenceSince is the earliest end reconcile re-asserts from the task
// records: recentEnds ago, and for an agent up less than evidenceWindow,
// evidenceWindow before it started (tasks that ended while no agent was
// there to remember them).
func (a *Agent) evidenceSince(now time.Time) time.Time {
	since := now.Add(-recentEnds)
	if now.Sub(a.bornAt) < evidenceWindow {
		if early := a.bornAt.Add(-evidenceWindow); early.Before(since) {
			since = early
		}
	}
	return since
}

// ended is a job this agent ended: its record as it ended, and when.
type ended struct {
	rec  jobs.Job
	node string
	to   wire.JobStatus
	u    jobs.Update
	at   time.Time
}

// rememberEnd keeps t's end for recentEnds, for reconcile.
func (a *Agent) rememberEnd(t *task, to wire.JobStatus, u jobs.Update) {
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ends == nil {
		a.ends = map[string]ended{}
	}
	id := t.rec.JobID
	a.ends[id] = ended{rec: t.rec, node: t.node, to: to, u: u, at: now}
	a.endOrder = append(a.endOrder, id)
	// Oldest first: drop what is too old, or beyond maxEnds. (A job ended
	// twice is listed twice; the map holds its latest end.)
	i := 0
	for ; i < len(a.endOrder); i++ {
		e, ok := a.ends[a.endOrder[i]]
		if !ok {
			continue // dropped already
		}
		if now.Sub(e.at) <= recentEnds && len(a.ends) <= maxEnds {
			break
		}
		delete(a.ends, a.endOrder[i])
	}
	a.endOrder = a.endOrder[i:] // append reallocates as it grows: amortized
}

// roundBeat is one heartbeat: it renews the nodes' heartbeats and, when a
// reconciliation round wants some of them, holds starts and reconciles.
func (a *Agent) roundBeat(ctx context.Context) error {
	rd, err := a.cfg.Registry.BeatRound(ctx, a.names...)
	if err != nil {
		return err
	}
	if len(rd.Unregistered) > 0 {
		a.register(ctx, rd.Unregistered)
	}
	if len(rd.Reconcile) == 0 {
		a.holdStarts.Store(false)
		return nil
	}
	a.holdStarts.Store(true)
	if err := a.reconcile(ctx, rd.Run, rd.Reconcile); err != nil {
		return fmt.Errorf("reconcile after a Redis restart: %w", err)
	}
	a.holdStarts.Store(false)
	return nil
}

// reconcile re-asserts the jobs this agent runs, and those it ended
// lately, on nodes, for the round of Redis run id run, then says so.
func (a *Agent) reconcile(ctx context.Context, run string, nodes []string) error {
	on := map[string]bool{}
	for _, n := range nodes {
		on[n] = true
	}
	// The heartbeat loop waits for this: beat meanwhile, so the round
	// (whose timeout is for nodes that are down) knows this one is alive.
	lastBeat := time.Now()
	alive := func() {
		if time.Since(lastBeat) >= a.cfg.Beat {
			lastBeat = time.Now()
			if _, err := a.cfg.Registry.BeatRound(ctx, a.names...); err != nil {
				a.log.Warn("heartbeat while reconciling", "err", err)
			}
		}
	}
	// Starts are held (holdStarts); wait for those in flight, whose
	// compare-and-set may be among the writes Redis lost, to be tracked
	// (see Agent.startMu).
	for !a.startMu.TryLock() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		alive()
		time.Sleep(5 * time.Millisecond)
	}
	a.startMu.Unlock()
	a.endMu.Lock() // no end is recorded meanwhile (see Agent.endMu)
	defer a.endMu.Unlock()
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	var ts []*task
	for _, t := range a.tasks {
		if on[t.node] {
			ts = append(ts, t)
		}
	}
	var es []ended
	for id, e := range a.ends {
		switch {
		case now.Sub(e.at) > recentEnds:
			delete(a.ends, id)
		case on[e.node]:
			es = append(es, e)
		}
	}
	a.mu.Unlock()
	found := a.evidence(ctx, on, now)
	var errs []error
	fixed := 0
	step := func(ok bool, err error) {
		errs = append(errs, err)
		if ok {
			fixed++
		}
	}
	for _, t := range ts {
		alive()
		step(a.reassertRunning(ctx, t))
	}
	for _, e := range es {
		alive()
		step(a.reassertEnd(ctx, e))
	}
	for _, ev := range found {
		alive()
		step(a.reassertRecorded(ctx, ev))
	}
	if err := errors.Join(errs...); err != nil {
		return err // the next heartbeat tries again; starts stay held
	}
	if err := a.cfg.Registry.Reconciled(ctx, run, nodes...); err != nil {
		return err
	}
	a.count(func(s *Stats) { s.Reasserted += fixed })
	if fixed > 0 {
		a.log.Warn("Redis lost acknowledged writes: job records re-asserted from this node's tasks",
			"redis_run", run, "jobs", fixed, "running", len(ts), "ended_lately", len(es), "from_task_records", len(found))
	} else {
		a.log.Info("reconciled after a Redis (re)start: every record agreed with this node", "redis_run", run,
			"running", len(ts), "ended_lately", len(es), "from_task_records", len(found))
	}
	return nil
}

// restore makes sure the record of rec's job exists, recreating it (queued)
// from what the agent holds if it is gone; it returns the record.
func (a *Agent) restore(ctx context.Context, rec jobs.Job) (jobs.Job, error) {
	cur, err := a.cfg.Jobs.Get(ctx, rec.JobID)
	if !errors.Is(err, jobs.ErrNotFound) {
		return cur, err
	}
	sub := rec.AcceptedAt
	if rec.SubmittedAt != nil {
		sub = *rec.SubmittedAt
	}
	r, err := a.cfg.Jobs.Accept(ctx, jobs.AcceptSpec{JobID: rec.JobID, EntryID: rec.RequestEntryID, Module: rec.Module,
		Request: rec.Request, Submitted: sub})
	switch {
	case err != nil:
		return jobs.Job{}, err
	case r.Withdrawn != "" || r.WrongType != "":
		return jobs.Job{}, fmt.Errorf("job %s: its request is %s%s; record not recreated", rec.JobID, r.Withdrawn, r.WrongType)
	case r.Job.JobID != rec.JobID:
		return jobs.Job{}, fmt.Errorf("job %s: its idempotency key now names job %s; record not recreated", rec.JobID, r.Job.JobID)
	}
	a.log.Warn("job record lost with Redis; recreated from this node's task", "job", rec.JobID)
	return r.Job, nil
}

// reassertRunning makes the record of t's job say running on t's node
// again; true if it had to change anything.
func (a *Agent) reassertRunning(ctx context.Context, t *task) (bool, error) {
	if t.lost {
		return false, nil // its record moved on to failed: lost; the end corrects it
	}
	cur, err := a.restore(ctx, t.rec)
	if err != nil {
		return false, err
	}
	hb, _ := json.Marshal(t.handle)
	a.mu.Lock()
	paused := t.suspended // a suspended task says so again (suspend.go)
	a.mu.Unlock()
	switch {
	case cur.Status == wire.JobRunning && cur.Node == t.node && (!paused || cur.SuspendedAt != nil):
		return false, nil
	case cur.Status == wire.JobRunning && cur.Node == t.node:
		if _, err := a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, wire.JobRunning,
			jobs.Update{Suspend: true, ExpectNode: t.node}); err != nil {
			return false, fmt.Errorf("re-assert job %s suspended: %w", t.rec.JobID, err)
		}
		a.report(ctx, t.node, t.rec.JobID, pool.EventSuspended, wire.JobRunning)
		return true, nil
	case cur.Status == wire.JobQueued:
		rec, err := a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobQueued, wire.JobRunning,
			jobs.Update{Node: t.node, Handle: string(hb), Suspend: paused})
		if err != nil && !(rec.JobID != "" && rec.Status == wire.JobRunning) {
			return false, fmt.Errorf("re-assert job %s running: %w", t.rec.JobID, err)
		}
		a.mu.Lock()
		t.rec = rec
		a.mu.Unlock()
		if err := a.cfg.Channel.Hold(ctx, t.node, t.rec.JobID); err != nil {
			return true, err
		}
		a.report(ctx, t.node, t.rec.JobID, pool.EventStarted, wire.JobRunning)
		if paused {
			a.report(ctx, t.node, t.rec.JobID, pool.EventSuspended, wire.JobRunning)
		}
		return true, nil
	default:
		// Running elsewhere, or ended: the rollback's second run has
		// happened already or the record moved on; nothing here can undo
		// that. Said loudly: it is what the round exists to prevent.
		a.log.Error("job runs on this node but its record says otherwise after a Redis restart",
			"job", t.rec.JobID, "status", cur.Status, "node", cur.Node)
		return false, nil
	}
}

// reassertEnd records e's end again if the record lost it; true if it had
// to change anything.
func (a *Agent) reassertEnd(ctx context.Context, e ended) (bool, error) {
	cur, err := a.restore(ctx, e.rec)
	if err != nil {
		return false, err
	}
	if cur.Status == wire.JobQueued {
		// Lost with the start: the run this node made is the job's run.
		if cur, err = a.cfg.Jobs.Transition(ctx, e.rec.JobID, wire.JobQueued, wire.JobRunning, jobs.Update{Node: e.node}); err != nil {
			return false, fmt.Errorf("re-assert job %s: %w", e.rec.JobID, err)
		}
	}
	if cur.Status != wire.JobRunning || cur.Node != e.node {
		return false, nil // its end is recorded (or it moved on)
	}
	u := e.u
	u.ExpectNode = e.node
	if _, err := a.cfg.Jobs.Transition(ctx, e.rec.JobID, wire.JobRunning, e.to, u); err != nil && !errors.Is(err, jobs.ErrConflict) {
		return false, fmt.Errorf("re-assert the end of job %s: %w", e.rec.JobID, err)
	}
	a.report(ctx, e.node, e.rec.JobID, pool.EventEnded, e.to)
	return true, a.cfg.Channel.Settle(ctx, e.node, e.rec.JobID)
}

// taskNote is what the agent records with each task (providers.Task.Note):
// enough of its job to remake the record if Redis loses it, even with the
// request's entry (a request posted, accepted and started in the second a
// rollback loses).
type taskNote struct {
	JobID     string       `json:"job_id"`
	EntryID   string       `json:"request_entry_id"`
	Module    string       `json:"module"`
	Submitted float64      `json:"submitted"`
	Request   wire.Request `json:"request"`
}

// startNote is the note of rec's task; nil if it does not fit in a note.
func startNote(rec jobs.Job) json.RawMessage {
	n := taskNote{JobID: rec.JobID, EntryID: rec.RequestEntryID, Module: rec.Module, Submitted: rec.AcceptedAt, Request: rec.Request}
	if rec.SubmittedAt != nil {
		n.Submitted = *rec.SubmittedAt
	}
	b, err := json.Marshal(n)
	if err != nil || len(b) > providers.MaxNoteBytes {
		return nil
	}
	return b
}

// noteJob is the job a task's note describes; ok false if it describes
// none (no note, or not this job's).
func noteJob(note json.RawMessage, jobID string) (jobs.Job, bool) {
	var n taskNote
	if len(note) == 0 || json.Unmarshal(note, &n) != nil || n.JobID != jobID || n.EntryID == "" {
		return jobs.Job{}, false
	}
	j := jobs.Job{Module: n.Module, AcceptedAt: n.Submitted, Request: n.Request}
	j.JobID, j.RequestEntryID = n.JobID, n.EntryID
	sub := n.Submitted
	j.SubmittedAt = &sub
	return j, true
}

// recorded is a task a node's provider recorded (its start log) that this
// agent neither tracks nor remembers ending.
type recorded struct {
	node    string
	job     string
	request string // the request entry id ("" for a task from before the label)
	note    json.RawMessage
	attempt int
	handle  providers.Handle
	prov    providers.Provider
	state   providers.State
}

// evidence lists the tasks the providers of nodes on recorded, running or
// ended since evidenceSince, that this agent neither tracks nor remembers
// ending. A provider that cannot list (not a providers.Lister) adds
// nothing; one whose listing fails in part adds what it listed, and says
// why (an unreadable task directory must not hold the round open).
func (a *Agent) evidence(ctx context.Context, on map[string]bool, now time.Time) []recorded {
	since := a.evidenceSince(now)
	seen := map[providers.Lister]bool{}
	var out []recorded
	for _, name := range a.names {
		if !on[name] {
			continue
		}
		l, ok := a.nodes[name].Provider.(providers.Lister)
		if !ok || seen[l] {
			continue
		}
		seen[l] = true
		trs, err := l.Tasks(ctx, since)
		if err != nil {
			a.log.Warn("reconcile: task records of this node's provider, in part", "node", name, "err", err)
		}
		for _, tr := range trs {
			node, job := tr.Labels["node"], tr.Labels["job"]
			attempt, aerr := strconv.Atoi(tr.Labels["attempt"])
			if !on[node] || job == "" || aerr != nil {
				continue
			}
			a.mu.Lock()
			_, tracked := a.tasks[job]
			_, ended := a.ends[job]
			a.mu.Unlock()
			if tracked || ended {
				continue // what the agent holds is the fresher truth
			}
			out = append(out, recorded{node: node, job: job, request: tr.Labels["request"], note: tr.Note, attempt: attempt,
				handle: tr.Handle, prov: a.nodes[node].Provider, state: tr.Status.State})
		}
	}
	slices.SortFunc(out, func(x, y recorded) int { return strings.Compare(x.job, y.job) })
	return out
}

// reassertRecorded makes the record of a task known only from its
// provider's records say so: a record gone with Redis is recreated from
// its request, a queued one is set running on the task's node with its
// handle, and the task is tracked (its end, if it has ended, is then
// recorded by the poll loop as any end). True if it had to change
// anything.
func (a *Agent) reassertRecorded(ctx context.Context, ev recorded) (bool, error) {
	cur, err := a.cfg.Jobs.Get(ctx, ev.job)
	if rec, ok := noteJob(ev.note, ev.job); ok && errors.Is(err, jobs.ErrNotFound) {
		// Remade from the task's note, as from what a live agent holds.
		cur, err = a.restore(ctx, rec)
	}
	if errors.Is(err, jobs.ErrNotFound) {
		if ev.request == "" {
			a.log.Error("job ran on this node but its record is gone and its task names no request", "job", ev.job)
			return false, nil
		}
		r, rerr := a.cfg.Jobs.Reaccept(ctx, ev.request)
		switch {
		case errors.Is(rerr, blackboard.ErrNotFound):
			a.log.Error("job ran on this node but Redis lost its record and its request", "job", ev.job, "request", ev.request)
			return false, nil
		case rerr != nil:
			return false, rerr
		case r.Withdrawn != "" || r.WrongType != "" || r.Job.JobID != ev.job:
			a.log.Error("job ran on this node; its record is gone and its request cannot remake it", "job", ev.job,
				"withdrawn", r.Withdrawn, "wrong_type", r.WrongType, "key_names", r.Job.JobID)
			return false, nil
		}
		a.log.Warn("job record lost with Redis; recreated from this node's task record and the request", "job", ev.job)
		cur, err = r.Job, nil
	}
	if err != nil {
		return false, err
	}
	t := &task{rec: cur, node: ev.node, handle: ev.handle, prov: ev.prov}
	switch {
	case cur.Status == wire.JobQueued && ev.attempt > cur.Attempt:
		hb, _ := json.Marshal(ev.handle)
		rec, err := a.cfg.Jobs.Transition(ctx, ev.job, wire.JobQueued, wire.JobRunning, jobs.Update{Node: ev.node, Handle: string(hb)})
		if err != nil && !(rec.JobID != "" && rec.Status == wire.JobRunning) {
			return false, fmt.Errorf("re-assert job %s from its task record: %w", ev.job, err)
		}
		t.rec = rec
	case cur.Status == wire.JobRunning && cur.Node == ev.node && cur.Attempt == ev.attempt:
		// Recorded here but not tracked: its node's job list lost it.
	default:
		if cur.Status == wire.JobRunning && cur.Attempt == ev.attempt && !ev.state.Terminal() {
			a.log.Error("job runs on this node but its record says another node after a Redis restart",
				"job", ev.job, "node", cur.Node)
		}
		return false, nil // a later attempt, or its end is recorded
	}
	a.track(t)
	a.log.Warn("re-asserted a job from this node's task record", "job", ev.job, "attempt", ev.attempt, "task", ev.state)
	if err := a.cfg.Channel.Hold(ctx, ev.node, ev.job); err != nil {
		return true, err
	}
	a.report(ctx, ev.node, ev.job, pool.EventStarted, wire.JobRunning)
	return true, nil
}
