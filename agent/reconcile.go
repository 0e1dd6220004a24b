package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
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
// What remains open (README, Delivery guarantees): a node that is down or
// cut off during the round cannot re-assert, and its jobs can run again
// once the round times out; an agent that restarted across the rollback
// knows only the jobs the restored records name.

// recentEnds is how long the agent remembers the jobs it ended, to record
// an end again if a rollback lost it: far longer than the second an AOF
// with appendfsync everysec can lose plus a heartbeat to learn of it, short
// enough to stay small; maxEnds bounds it for a very busy agent (a
// fake-node agent ending thousands of jobs a second keeps the latest).
const (
	recentEnds = 30 * time.Second
	maxEnds    = 20_000
)

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
	var errs []error
	fixed := 0
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
	for _, t := range ts {
		alive()
		ok, err := a.reassertRunning(ctx, t)
		errs = append(errs, err)
		if ok {
			fixed++
		}
	}
	for _, e := range es {
		alive()
		ok, err := a.reassertEnd(ctx, e)
		errs = append(errs, err)
		if ok {
			fixed++
		}
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
			"redis_run", run, "jobs", fixed, "running", len(ts), "ended_lately", len(es))
	} else {
		a.log.Info("reconciled after a Redis (re)start: every record agreed with this node", "redis_run", run,
			"running", len(ts), "ended_lately", len(es))
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
	switch {
	case cur.Status == wire.JobRunning && cur.Node == t.node:
		return false, nil
	case cur.Status == wire.JobQueued:
		rec, err := a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobQueued, wire.JobRunning,
			jobs.Update{Node: t.node, Handle: string(hb)})
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
