package agent

import (
	"context"
	"errors"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// Suspend and resume: evictions in suspend mode (pool.EvictSuspend) and
// resume orders (pool.KindResume).
//
// An eviction in suspend mode pauses the job's task in place through its
// provider's providers.Suspender (the local provider: SIGSTOP to the
// task's process group; Slurm: scontrol suspend). The task keeps its
// memory, devices and node; the record stays running, with suspended_at
// stamped, and the agent reports "suspended", so the scheduler gives the
// task's CPU to the preemptor and keeps the rest held. A resume order
// continues it (SIGCONT; scontrol resume), clears suspended_at and reports
// "resumed". A provider that cannot suspend (the scheduler orders suspend
// only on nodes whose record says Suspend, so this is a safety net), or a
// suspend that fails, gets the eviction carried out as a requeue.
//
// A stop (cancel) of a paused task continues it first, so it can take its
// stop signal; its end clears suspended_at (any transition out of running
// does). A paused task whose node is lost is ended by the scheduler like
// any running task there. After an agent restart a task re-attached with
// suspended_at on its record is known to be paused.

// suspendTask carries out an eviction in suspend mode; false: leave the
// order unacknowledged, to try again (the record could not be written).
func (a *Agent) suspendTask(ctx context.Context, m pool.Message) bool {
	a.mu.Lock()
	t := a.tasks[m.JobID]
	busy := t != nil && (t.stop != "" || t.suspended)
	a.mu.Unlock()
	if t == nil {
		a.log.Info("suspension of a job this agent does not run", "job", m.JobID)
		return true
	}
	if busy {
		return true // being stopped already, or a repeated order
	}
	requeue := func(why string) bool {
		a.log.Warn("eviction: cannot suspend; requeueing instead", "job", m.JobID, "why", why)
		m.Mode, m.Reason = pool.EvictRequeue, firstNonEmpty(m.Reason, "preempted")+"; requeued instead of suspended: "+why
		a.evictTask(ctx, m)
		return true
	}
	sp, ok := t.prov.(providers.Suspender)
	if !ok {
		return requeue("the node's provider cannot suspend")
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := sp.Suspend(sctx, t.handle)
	cancel()
	if errors.Is(err, providers.ErrNotRunning) {
		return true // it ended: the poll loop records how
	}
	if err != nil {
		return requeue(err.Error())
	}
	a.mu.Lock()
	t.suspended = true
	a.mu.Unlock()
	_, err = a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, wire.JobRunning, jobs.Update{Suspend: true, ExpectNode: t.node})
	switch {
	case errors.Is(err, jobs.ErrConflict) || errors.Is(err, jobs.ErrNotFound):
		// The job is no longer running here (ended, lost): nothing to
		// hold paused.
		a.log.Info("suspended job's record moved on; continuing it", "job", t.rec.JobID, "err", err)
		a.continueTask(ctx, t)
		return true
	case err != nil:
		a.log.Warn("record suspension", "job", t.rec.JobID, "err", err)
		return false // again: Suspend is idempotent
	}
	a.log.Info("eviction: suspended the job in place", "job", t.rec.JobID, "node", t.node)
	a.report(ctx, t.node, t.rec.JobID, pool.EventSuspended, wire.JobRunning)
	return true
}

// resumeTask carries out a resume order; false: try again.
func (a *Agent) resumeTask(ctx context.Context, m pool.Message) bool {
	a.mu.Lock()
	t := a.tasks[m.JobID]
	a.mu.Unlock()
	if t == nil {
		a.log.Info("resume of a job this agent does not run", "job", m.JobID)
		return true
	}
	if sp, ok := t.prov.(providers.Suspender); ok {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := sp.Resume(sctx, t.handle)
		cancel()
		if errors.Is(err, providers.ErrNotRunning) {
			return true // it ended: the poll loop records how
		}
		if err != nil {
			a.log.Warn("resume", "job", t.rec.JobID, "err", err)
			return false
		}
	}
	a.mu.Lock()
	t.suspended = false
	a.mu.Unlock()
	_, err := a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, wire.JobRunning, jobs.Update{Resume: true, ExpectNode: t.node})
	switch {
	case errors.Is(err, jobs.ErrConflict) || errors.Is(err, jobs.ErrNotFound):
		a.log.Info("resumed job's record moved on", "job", t.rec.JobID, "err", err)
		return true
	case err != nil:
		a.log.Warn("record resume", "job", t.rec.JobID, "err", err)
		return false
	}
	a.log.Info("resumed the job", "job", t.rec.JobID, "node", t.node)
	a.report(ctx, t.node, t.rec.JobID, pool.EventResumed, wire.JobRunning)
	return true
}

// continueTask continues t if it is paused (before a stop).
func (a *Agent) continueTask(ctx context.Context, t *task) {
	a.mu.Lock()
	paused := t.suspended
	t.suspended = false
	a.mu.Unlock()
	if !paused {
		return
	}
	if sp, ok := t.prov.(providers.Suspender); ok {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := sp.Resume(sctx, t.handle); err != nil && !errors.Is(err, providers.ErrNotRunning) {
			a.log.Warn("continue a suspended task", "job", t.rec.JobID, "err", err)
		}
	}
}
