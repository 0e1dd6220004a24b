package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// refreshNodes reads the registry into the ledger and acts on node health:
// a node silent past NodeUnhealthy gets nothing new and its assigned but
// unstarted jobs are placed again; past NodeTimeout its running jobs end
// lost (or go back to the queue when their template allows it).
//
// Silence is measured in Redis's time (heartbeats are stamped with it),
// and a node is declared lost only for silence the scheduler witnessed:
// over a window in which its own reads of Redis kept succeeding. The
// window starts with the term and starts again after any gap longer than
// NodeUnhealthy between two successful reads (Redis down, or this process
// stalled): while Redis was down nobody could beat, so that time proves
// nothing. Unhealthy (no new work) needs no witness: it is harmless.
func (s *Scheduler) refreshNodes(ctx context.Context) (bool, error) {
	states, rnow, err := s.nodes.Nodes(ctx)
	if err != nil {
		if len(states) == 0 {
			return false, err
		}
		s.log.Warn("registry", "err", err)
	}
	if s.seenAt.IsZero() || rnow.Sub(s.seenAt) > s.cfg.NodeUnhealthy {
		if !s.seenAt.IsZero() {
			s.log.Warn("no view of Redis for a while: node silence counts again from now", "gap", rnow.Sub(s.seenAt).Round(time.Millisecond))
		}
		s.witnessFrom = rnow
	}
	s.seenAt = rnow
	now := s.cfg.Clock.Now()
	changed := false
	var lostNodes []string
	seen := map[string]bool{}
	s.mu.Lock()
	feasible := slices.Clone(s.cfg.NodeClasses)
	for _, ns := range states {
		seen[ns.Name] = true
		en := ns.Node.Engine()
		silent := rnow.Sub(ns.LastBeat)
		unhealthy := ns.LastBeat.IsZero() || silent > s.cfg.NodeUnhealthy || ns.Unhealthy != ""
		witnessed := rnow.Sub(maxTime(ns.LastBeat, s.witnessFrom)) // silence seen while Redis answered
		en.Unhealthy = unhealthy
		if err := s.ledger.SetNode(en); err != nil {
			s.log.Warn("node inventory refused", "node", ns.Name, "err", err)
			continue
		}
		fe := en
		fe.Unhealthy = false // a silent node is still a node the pool has
		feasible = append(feasible, fe)
		h, known := s.health[ns.Name]
		if !known || !sameNode(h.inv, en) {
			s.replan = true // new capacity, or changed inventory or health
		}
		if !known {
			changed = true // a new node: new capacity to publish and place on
			s.log.Info("node registered", "node", ns.Name, "agent", ns.Agent, "provider", ns.Provider)
		}
		if h.unhealthy != unhealthy {
			changed = true
			switch {
			case unhealthy && ns.Unhealthy != "":
				s.log.Warn("node unhealthy: its agent says so", "node", ns.Name, "why", ns.Unhealthy)
			case unhealthy:
				s.log.Warn("node unhealthy: no heartbeat", "node", ns.Name, "silent", silent.Round(time.Millisecond))
			case h.rec.Name != "":
				s.log.Info("node healthy again", "node", ns.Name)
			}
		}
		lost := witnessed > s.cfg.NodeTimeout
		if lost && !h.lost {
			s.log.Warn("node lost: ending its running jobs", "node", ns.Name, "silent", silent.Round(time.Millisecond), "node_timeout", s.cfg.NodeTimeout)
		}
		s.health[ns.Name] = nodeHealth{lastBeat: ns.LastBeat, unhealthy: unhealthy, lost: lost, rec: ns.NodeRecord, inv: en}
		delete(s.silentSince, ns.Name)
	}
	// A node gone from the registry (deregistered, or its record lost) is
	// unhealthy at once and lost after NodeTimeout.
	for _, name := range s.ledger.Names() {
		if seen[name] {
			continue
		}
		first, ok := s.silentSince[name]
		if !ok {
			first = now
			s.silentSince[name] = now
			s.ledger.SetHealthy(name, false)
			h := s.health[name]
			h.unhealthy = true
			h.inv.Unhealthy = true
			s.health[name] = h
			changed = true
			s.replan = true
		}
		if now.Sub(first) > s.cfg.NodeTimeout && !s.health[name].lost {
			h := s.health[name]
			h.lost = true
			s.health[name] = h
			s.log.Warn("node lost (gone from the registry): ending its running jobs", "node", name, "node_timeout", s.cfg.NodeTimeout)
		}
	}
	// Assigned but unstarted jobs on unhealthy nodes, or waiting longer
	// than AssignTimeout, are placed again: the agent's compare-and-set
	// checks the node, so a late start there changes nothing. Their
	// records are read again at once: one the agent did start (its report
	// not written yet, or never: the agent died right after its
	// compare-and-set) holds its node again, and ends lost with it.
	var moved []string
	lostSet := map[string]bool{}
	for _, t := range s.jobs_ {
		switch {
		case t.phase == PhaseAssigned && (s.health[t.node()].unhealthy || now.Sub(t.started) > s.cfg.AssignTimeout):
			s.setPhaseLocked(t, PhasePending)
			s.stats.reassigned++
			moved = append(moved, t.id())
			changed = true
		case t.phase == PhaseRunning && s.health[t.node()].lost && !lostSet[t.node()]:
			// Every refresh, not only when the node turns lost: a job
			// found running there later ends lost too.
			lostSet[t.node()] = true
			lostNodes = append(lostNodes, t.node())
		}
	}
	s.mu.Unlock()
	s.feasible.Store(&feasible)
	slices.Sort(moved)
	if err := s.reload(ctx, moved); err != nil {
		return changed, err
	}
	slices.Sort(lostNodes)
	for _, n := range lostNodes {
		if err := s.nodeLost(ctx, n); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

// nodeLost ends the running jobs of a node silent past NodeTimeout.
func (s *Scheduler) nodeLost(ctx context.Context, node string) error {
	s.mu.Lock()
	var victims []*tracked
	for _, t := range s.jobs_ {
		if t.phase == PhaseRunning && t.node() == node {
			victims = append(victims, t)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(victims, func(a, b *tracked) int {
		if a.id() < b.id() {
			return -1
		}
		return 1
	})
	if len(victims) > 0 {
		s.log.Warn("ending the running jobs of a lost node", "node", node, "jobs", len(victims))
	}
	for _, t := range victims {
		msg := fmt.Sprintf("node %s has not been heard from for over %v", node, s.cfg.NodeTimeout)
		to := wire.JobFailed
		u := jobs.Update{Error: &wire.JobError{Code: "lost", Message: msg}}
		if t.requeueLost || s.resumable(ctx, t) {
			// The template allows running it again, or it saved verified
			// progress and has retries left: it resumes from its last
			// checkpoint elsewhere. At least once, as the process may
			// still run on the silent node.
			to = wire.JobQueued
			u = jobs.Update{}
		}
		_, err := s.jobs.Transition(ctx, t.id(), wire.JobRunning, to, u)
		if fenced(err) {
			return err
		}
		if err != nil && !errors.Is(err, jobs.ErrConflict) {
			s.log.Warn("end lost job", "job", t.id(), "err", err)
			continue
		}
		now := s.cfg.Clock.Now()
		s.mu.Lock()
		s.stats.lost++
		if err == nil {
			s.countLostLocked(t, now)
		}
		if to == wire.JobQueued && err == nil {
			s.stats.requeued++
			s.dropLocked(t, now)
			s.mu.Unlock()
			if err := s.reload(ctx, []string{t.id()}); err != nil {
				return err
			}
			continue
		}
		if err == nil {
			s.stats.failed++
		}
		s.dropLocked(t, now)
		s.mu.Unlock()
		if err != nil {
			if err := s.reload(ctx, []string{t.id()}); err != nil {
				return err
			}
		}
	}
	return nil
}

// resumable: t's record has a verified checkpoint and retries left, so
// that a lost node need not fail it.
func (s *Scheduler) resumable(ctx context.Context, t *tracked) bool {
	rec, err := s.jobs.Get(ctx, t.id())
	return err == nil && rec.Checkpoint != nil && rec.Attempt <= rec.Request.MaxRetries
}

// Admission returns the intake's impossible-request test: a request no
// registered node and no declared node class could ever run is refused;
// anything else waits (its explanation says what it lacks). With no node
// registered and no class declared, nothing is refused.
func (s *Scheduler) Admission(j engine.Job) *engine.Rejection {
	nodes := *s.feasible.Load()
	if len(nodes) == 0 {
		return nil
	}
	return engine.Feasible(nodes, j)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sameNode reports whether two inventories of a node, with their health,
// are the same for the ledger and the engine (Allocated and the InUse
// flags are the ledger's own and not compared).
func sameNode(a, b engine.Node) bool {
	if a.Name != b.Name || a.Capacity != b.Capacity || a.Unhealthy != b.Unhealthy ||
		!maps.Equal(a.Labels, b.Labels) || len(a.GPUs) != len(b.GPUs) || len(a.NUMA) != len(b.NUMA) {
		return false
	}
	for i := range a.GPUs {
		x, y := &a.GPUs[i], &b.GPUs[i]
		if x.ID != y.ID || x.Model != y.Model || x.MemoryMiB != y.MemoryMiB || len(x.MIG) != len(y.MIG) {
			return false
		}
		for k := range x.MIG {
			if x.MIG[k].ID != y.MIG[k].ID || x.MIG[k].Profile != y.MIG[k].Profile {
				return false
			}
		}
	}
	for i := range a.NUMA {
		x, y := &a.NUMA[i], &b.NUMA[i]
		if x.ID != y.ID || x.CPU != y.CPU || x.Memory != y.Memory || !slices.Equal(x.CPUs, y.CPUs) {
			return false
		}
	}
	return true
}
