package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/computeboard/computeboard/engine"
)

// Suspend and resume: the scheduler's side of evictions in suspend mode
// (see the top of preempt.go).
//
// What a suspended job keeps. Its process is stopped in place (SIGSTOP, or
// scontrol suspend): it uses no CPU, but its memory stays resident, and
// its GPUs, MIG instances and storage stay its own. So the ledger keeps
// its "pin" on the node — its request with the CPU dimension zeroed — and
// only the CPU goes to the preemptor. A job is resumed, on the node it was
// suspended on, only when its whole request fits there again.
//
// The record is the truth: the agent stamps suspended_at (status still
// running) once the task is paused and clears it when it resumes, and
// syncSuspendLocked settles the scheduler's view on it after each report
// and rescan. A new term finds suspended jobs in the active records and
// pins them again (adopt, holdStarted).

// modesLocked returns the eviction modes the scheduler can carry out on
// node's jobs (s.mu held).
func (s *Scheduler) modesLocked(node string) []engine.EvictionMode {
	if s.health[node].rec.Suspend {
		return suspendModes
	}
	return LiveModes
}

// pinOf is what a suspended job keeps of j: everything but its CPU.
func pinOf(j engine.Job) engine.Job {
	j.Request[engine.DimCPU] = 0
	return j
}

// enginePlacement is t's placement as the ledger takes it.
func (t *tracked) enginePlacement() engine.Placement {
	p := engine.Placement{JobID: t.id(), Node: t.node(), NUMA: -1}
	if t.placement != nil {
		p.GPUs, p.MIG, p.NUMA = t.placement.GPUs, t.placement.MIG, t.placement.NUMA
	}
	return p
}

// checkSuspendsLocked turns the suspend evictions of evs into requeues
// where the preemptor would not fit beside what its suspended victims keep
// (s.mu held): their memory, or devices the preemptor's placement names.
// The engine plans every mode as freeing the whole victim; this is the
// check that a suspend frees enough.
func (s *Scheduler) checkSuspendsLocked(plan *engine.Plan, evs []Eviction) {
	byPre := map[string][]int{}
	suspends := false
	for i, ev := range evs {
		byPre[ev.Preemptor] = append(byPre[ev.Preemptor], i)
		suspends = suspends || ev.Mode == engine.ModeSuspend
	}
	if !suspends {
		return
	}
	for _, p := range plan.Placements {
		idx := byPre[p.JobID]
		pre := s.jobs_[p.JobID]
		if len(idx) == 0 || pre == nil {
			continue
		}
		n, ok := s.ledger.Node(p.Node)
		if !ok {
			continue
		}
		avail := n.Free()
		var kept []string // devices the suspended victims keep
		for _, i := range idx {
			a, ok := s.ledger.Allocation(evs[i].JobID)
			if !ok {
				continue
			}
			if evs[i].Mode != engine.ModeSuspend {
				avail = avail.Add(a.Vec)
				continue
			}
			avail[engine.DimCPU] += a.Vec[engine.DimCPU]
			kept = append(append(kept, a.GPUs...), a.MIG...)
		}
		short := ""
		switch {
		case pre.request[engine.DimMemory] > avail[engine.DimMemory]:
			short = fmt.Sprintf("the preemptor needs %d MiB of memory, %d MiB would be free beside the suspended jobs' memory",
				pre.request[engine.DimMemory], avail[engine.DimMemory])
		case slices.ContainsFunc(append(slices.Clone(p.GPUs), p.MIG...), func(d string) bool { return slices.Contains(kept, d) }):
			short = "the preemptor's devices would stay held by the suspended jobs"
		}
		if short == "" {
			continue
		}
		for _, i := range idx {
			if evs[i].Mode == engine.ModeSuspend {
				evs[i].Mode = engine.ModeRequeue
				evs[i].Reason += "; requeued instead of suspended: " + short
				if v := s.jobs_[evs[i].JobID]; v != nil && v.evicting != nil {
					evs[i].LostWork = s.lostWorkLocked(v, engine.ModeRequeue, evs[i].At)
					*v.evicting = evs[i]
				}
			}
		}
	}
}

// pinLocked holds only t's pin in the ledger: t is suspended (s.mu held).
func (s *Scheduler) pinLocked(t *tracked) {
	started := t.started
	if a, ok := s.ledger.Release(t.id()); ok {
		started = a.Started
	}
	s.ledger.Restore(pinOf(t.job()), t.enginePlacement(), started)
	s.setSuspendedLocked(t, true)
	t.resuming = false
	s.replan = true // its CPU is free
}

// unpinLocked holds t's whole request again, whatever the node has room
// for (s.mu held): its task runs, resumed.
func (s *Scheduler) unpinLocked(t *tracked) {
	started := t.started
	if a, ok := s.ledger.Release(t.id()); ok {
		started = a.Started
	}
	s.ledger.Restore(t.job(), t.enginePlacement(), started)
	s.setSuspendedLocked(t, false)
}

// setSuspendedLocked marks t suspended or not, keeping the count of the
// suspended jobs (s.mu held).
func (s *Scheduler) setSuspendedLocked(t *tracked, v bool) {
	switch {
	case v && !t.suspended:
		s.suspendedN++
	case !v && t.suspended:
		s.suspendedN--
	}
	t.suspended = v
}

// syncSuspendLocked settles t, a job the scheduler sees running where its
// record runs, on whether the record says it is suspended: suspendedAt
// is its suspended_at (s.mu held).
func (s *Scheduler) syncSuspendLocked(t *tracked, suspendedAt *float64) {
	switch {
	case suspendedAt != nil && !t.suspended && !t.resuming:
		s.pinLocked(t)
		s.log.Info("job suspended", "job", t.id(), "node", t.node())
	case suspendedAt == nil && t.resuming:
		t.resuming = false // the agent resumed it
		s.log.Info("job resumed", "job", t.id(), "node", t.node())
	case suspendedAt == nil && t.suspended:
		s.unpinLocked(t) // running again without a resume of ours (an agent's fallback)
	}
}

// resumeLocked picks the suspended jobs whose whole request fits on their
// node again, applies them to the ledger there and marks them resuming
// (s.mu held). Jobs go by level (highest first), then the earliest
// started, then ID; a node where a preemptor waits for its
// victims resumes nothing (the room being freed is the preemptor's).
func (s *Scheduler) resumeLocked() []*tracked {
	if s.suspendedN == 0 {
		return nil // the walk below was a hundredth of a deep queue's cycle
	}
	var cands []*tracked
	for _, t := range s.jobs_ {
		if t.suspended && !t.resuming && t.phase == PhaseRunning {
			cands = append(cands, t)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	held := map[string]bool{}
	for _, w := range s.waiting {
		if w.hold != nil {
			held[w.hold.p.Node] = true
		}
	}
	slices.SortFunc(cands, func(a, b *tracked) int {
		return cmp.Or(-cmp.Compare(a.priority, b.priority), a.started.Compare(b.started), strings.Compare(a.id(), b.id()))
	})
	var out []*tracked
	for _, t := range cands {
		node := t.node()
		if held[node] || s.health[node].unhealthy || s.health[node].lost {
			continue
		}
		pin, ok := s.ledger.Release(t.id())
		p := t.enginePlacement()
		if err := s.ledger.ApplyAt(t.job(), p, t.started); err != nil {
			if ok {
				s.ledger.Restore(pin.Job, p, pin.Started)
			}
			continue
		}
		s.setSuspendedLocked(t, false)
		t.resuming, t.evicting = true, nil
		out = append(out, t)
	}
	return out
}

// sendResumes writes the resume orders of ts (chosen by resumeLocked). A
// failed order leaves the job suspended, pinned again, for a later cycle.
func (s *Scheduler) sendResumes(ctx context.Context, ts []*tracked) error {
	for _, t := range ts {
		err := s.orders.Resume(ctx, s.fence, t.node(), t.id(), "room freed on "+t.node())
		if fenced(err) {
			return err
		}
		if err != nil {
			s.log.Warn("resume order", "job", t.id(), "node", t.node(), "err", err)
			s.mu.Lock()
			s.pinLocked(t)
			s.mu.Unlock()
			continue
		}
		s.log.Info("resuming", "job", t.id(), "node", t.node())
	}
	return nil
}
