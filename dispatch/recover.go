package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// Recover rebuilds the pool's state at the start of a term: the report
// stream's position (so no report written from now on is missed), the
// engine checkpoint, the registry, and every active job — queued ones go
// to the engine (or stay assigned where their node still lists them),
// running ones hold their node's resources again, with the devices stored
// with their placement. A request retracted while no scheduler ran is
// cancelled (queued) or stopped (running).
func (s *Scheduler) Recover(ctx context.Context) error {
	last, err := s.orders.LastReport(ctx)
	if err != nil {
		return err
	}
	s.lastReport = last
	b, err := s.jobs.LoadEngineState(ctx, s.cfg.CheckpointName)
	if err != nil {
		return err
	}
	if b != nil {
		st, err := engine.UnmarshalState(b)
		if err != nil {
			s.log.Warn("ignoring engine checkpoint", "err", err)
		} else {
			s.mu.Lock()
			s.state = st
			s.mu.Unlock()
			s.savedState = st.LastNow
		}
	}
	if _, err := s.refreshNodes(ctx); err != nil {
		return fmt.Errorf("dispatch: recover: %w", err)
	}
	s.lastNodes = s.cfg.Clock.Now()
	s.lastRescan = s.lastNodes
	s.repairMirrors(ctx)
	if err := s.adopt(ctx); err != nil {
		return err
	}
	// Nodes already lost when the term began: their running jobs, just
	// adopted, end now.
	s.mu.Lock()
	var lost []string
	for name, h := range s.health {
		if h.lost {
			lost = append(lost, name)
		}
	}
	s.mu.Unlock()
	slices.Sort(lost)
	for _, n := range lost {
		if err := s.nodeLost(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// rescan re-reads the active jobs and adopts what reports missed, and
// mirrors the job changes whose writer did not (repairMirrors).
func (s *Scheduler) rescan(ctx context.Context) error {
	s.repairMirrors(ctx)
	return s.adopt(ctx)
}

// mirrorGrace is how old a job's change must be before the scheduler
// mirrors it onto the job entry in its writer's place: the writer's own
// mirror follows the change within milliseconds (a start's, once the
// provider started the task), unless the writer died.
const mirrorGrace = 10 * time.Second

// repairMirrors mirrors the job changes older than mirrorGrace whose
// writer (a node agent, or a scheduler before this one) died between the
// record's change and its mirror: without it an ended job's entry would
// say, for good, that the job still runs, and no compute.job.finished
// would come; a started one's would say queued until the job ends. A
// failure is logged; the next rescan tries again.
func (s *Scheduler) repairMirrors(ctx context.Context) {
	n, err := s.jobs.RepairMirrors(ctx, mirrorGrace)
	if n > 0 {
		s.log.Warn("mirrored job changes onto their entries in their writers' place", "jobs", n)
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn("repair job entries", "err", err)
	}
}

// adopt settles the scheduler's view on the active job records. It reads
// the state of each (jobs.Store.ActiveStates) and whole records only for
// the jobs its view lacks or has in another phase: a rescan of a deep
// queue that reports kept in step reads no request.
func (s *Scheduler) adopt(ctx context.Context) error {
	states, err := s.jobs.ActiveStates(ctx)
	if err != nil {
		return err
	}
	activeIDs := make(map[string]bool, len(states))
	var look []string
	s.mu.Lock()
	s.noteCheckpointsLocked(states)
	for _, st := range states {
		activeIDs[st.JobID] = true
		t, known := s.jobs_[st.JobID]
		switch {
		case adoptCase(t, known, st.Status) != adoptNone:
			look = append(look, st.JobID)
		case known && st.Status == wire.JobRunning && st.Node == t.node():
			s.syncSuspendLocked(t, st.SuspendedAt) // a suspend or resume whose report was missed
		}
	}
	// Tracked jobs no longer active ended while their reports were missed.
	var gone []string
	for id, t := range s.jobs_ {
		if !activeIDs[id] && t.phase != PhasePending {
			gone = append(gone, id)
		}
	}
	s.mu.Unlock()
	if err := s.reload(ctx, gone); err != nil {
		return err
	}
	active, err := s.jobs.GetMany(ctx, look)
	if err != nil {
		return err
	}
	var fresh, started []jobs.Job
	s.mu.Lock()
	for _, j := range active { // as read again: it may have moved on meanwhile
		t, known := s.jobs_[j.JobID]
		switch adoptCase(t, known, j.Status) {
		case adoptFresh:
			fresh = append(fresh, j)
		case adoptStarted:
			started = append(started, j)
		}
	}
	s.mu.Unlock()
	if err := s.holdStarted(ctx, started); err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	withdrawn, err := s.withdrawn(ctx, fresh)
	if err != nil {
		return err
	}
	var ids []string
	for _, j := range fresh {
		ids = append(ids, j.JobID)
	}
	placements, err := s.orders.Placements(ctx, ids)
	if err != nil {
		return err
	}
	listed := map[string]map[string]bool{} // node → its job set
	for _, j := range fresh {
		if withdrawn[j.JobID] && j.Status == wire.JobQueued {
			_, err := s.jobs.Transition(ctx, j.JobID, wire.JobQueued, wire.JobCancelled, jobs.Update{
				Error: &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}})
			if fenced(err) {
				return err
			}
			continue
		}
		s.mu.Lock()
		if t, ok := s.jobs_[j.JobID]; ok {
			s.dropLocked(t, s.cfg.Clock.Now()) // a stale view of a requeued job
		}
		s.mu.Unlock()
		t, werr := s.track(j)
		if werr != nil {
			if j.Status == wire.JobQueued {
				s.addPending(ctx, j) // fails it with the reason
			}
			continue
		}
		pl, hasPl := placements[j.JobID]
		switch j.Status {
		case wire.JobQueued:
			if j.Node != "" && hasPl && pl.Node == j.Node {
				set, ok := listed[j.Node]
				if !ok {
					ids, err := s.orders.NodeJobs(ctx, j.Node)
					if err != nil {
						return err
					}
					set = map[string]bool{}
					for _, id := range ids {
						set[id] = true
					}
					listed[j.Node] = set
				}
				t.started = s.cfg.Clock.Now() // AssignTimeout counts from this term
				if set[j.JobID] && s.hold(t, pl.Node, pl.GPUs, pl.MIG, pl.NUMA, PhaseAssigned) {
					t.placement = &pl
					continue
				}
			}
			s.mu.Lock()
			if _, ok := s.jobs_[j.JobID]; !ok {
				s.jobs_[j.JobID] = t
				s.gangJobsLocked(t, 1)
				s.newIDs = append(s.newIDs, j.JobID)
				s.countPendingLocked(t, 1)
				s.stats.submitted++
				s.replan = true
			}
			s.mu.Unlock()
		case wire.JobRunning:
			if !hasPl {
				pl.Node, pl.NUMA = j.Node, -1
			}
			t.started = epochOr(j.StartedAt, s.cfg.Clock.Now())
			s.hold(t, j.Node, pl.GPUs, pl.MIG, pl.NUMA, PhaseRunning)
			t.placement = &pl
			if j.SuspendedAt != nil {
				s.mu.Lock()
				s.pinLocked(t) // suspended in an earlier term: it keeps its pin
				s.mu.Unlock()
			}
			if withdrawn[j.JobID] {
				s.OnCancel(j.JobID)
			}
		}
	}
	return nil
}

// adoptOutcome is what adopt makes of an active record.
type adoptOutcome int

const (
	adoptNone    adoptOutcome = iota
	adoptFresh                // tracked anew: unknown, or requeued while its report was missed
	adoptStarted              // started while its report was missed
)

// adoptCase is what adopt makes of an active record in status st, whose
// job this view tracks as t (known) or not (s.mu held).
func adoptCase(t *tracked, known bool, st wire.JobStatus) adoptOutcome {
	switch {
	case st.Terminal():
		return adoptNone // ended since the states were read: its report settles it
	case !known:
		return adoptFresh
	case t.phase == PhaseRunning && st == wire.JobQueued:
		return adoptFresh
	case t.phase != PhaseRunning && st == wire.JobRunning:
		return adoptStarted
	}
	return adoptNone
}

// hold records t as holding resources on node (assigned or running).
// A running job is held even if its node is over-committed or gone (it
// runs whatever the ledger thinks); false when an assigned job no longer
// fits (it is placed again).
func (s *Scheduler) hold(t *tracked, node string, gpus, mig []string, numa int, phase Phase) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := engine.Placement{JobID: t.id(), Node: node, GPUs: gpus, MIG: mig, NUMA: numa}
	err := s.ledger.ApplyAt(t.job(), p, t.started)
	if err != nil && phase == PhaseAssigned {
		return false
	}
	if err != nil {
		var ae *engine.ApplyError
		if errors.As(err, &ae) && ae.Code != engine.ApplyDuplicate {
			s.ledger.Restore(t.job(), p, t.started)
		}
	}
	t.phase = phase
	if old, ok := s.jobs_[t.id()]; ok && old != t {
		s.gangJobsLocked(old, -1) // replaced: gone for the counts and lists
		old.dropped = true
		s.activeLocked(old)
	}
	s.jobs_[t.id()] = t
	s.gangJobsLocked(t, 1)
	s.activeLocked(t)
	s.newIDs = append(s.newIDs, t.id())
	s.replan = true
	return true
}

// withdrawn reports which jobs' request entries were retracted or
// superseded (or marked cancel_requested by a broker that saw it).
func (s *Scheduler) withdrawn(ctx context.Context, js []jobs.Job) (map[string]bool, error) {
	out := map[string]bool{}
	var ids []string
	for _, j := range js {
		if j.CancelRequested {
			out[j.JobID] = true
		}
		ids = append(ids, j.RequestEntryID)
	}
	if s.cfg.RequestStatus == nil || len(ids) == 0 {
		return out, nil
	}
	sts, err := s.cfg.RequestStatus(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i, j := range js {
		if st := sts[i]; st == string(blackboard.StatusRetracted) || st == string(blackboard.StatusSuperseded) {
			out[j.JobID] = true
		}
	}
	return out, nil
}

func epochOr(f *float64, def time.Time) time.Time {
	if f == nil {
		return def
	}
	return epochTime(*f)
}
