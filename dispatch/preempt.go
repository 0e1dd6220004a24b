package dispatch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// Preemption in the live scheduler: how a plan's Evictions are carried out.
//
//  1. The engine plans an eviction (engine/preempt.go) and places the
//     preemptor on the victims' node in the same plan. The scheduler sends
//     each victim's node a fenced eviction order (pool.KindEvict: mode,
//     reason, grace) and writes the eviction on the victim's record
//     (its explanation's "preempted").
//  2. The preemptor is not assigned yet: the victims still hold their
//     resources in the ledger until their agent reports their end, and an
//     assignment now would double-book the node. It stays pending with a
//     hold (preemptHold: the plan's placement, its victims), out of the
//     engine's input, and its node is shown to the engine as unhealthy
//     while the hold lasts, so no other job takes the room being freed
//     and no second eviction is planned there.
//  3. The agent stops the victim (checkpoint: SIGUSR1 first, the stop
//     after PreemptGrace) and records it cancelled (error.code preempted)
//     or queued again (requeue, checkpoint; its attempt counts on its next
//     start), then reports the end. The report releases the victim's hold
//     in the ledger.
//  4. At the start of the next cycle, before the engine runs, a preemptor
//     whose victims have all released their holds on its node is applied
//     to the ledger at the plan's placement and assigned. A hold whose
//     victims did not end within PreemptWait is dropped (the preemptor
//     waits in the queue again; the victims, in their cool-down, are not
//     chosen again at once).
//
// Victims are only running jobs (an assigned job not started yet, one
// being evicted, or a suspended one, is never a candidate). The engine's
// State, with its record of evictions (budgets, cool-downs), is the
// scheduler's checkpoint, as ever.
//
// Suspend (suspend.go). A running job offers the engine LiveModes, plus
// suspend when its node's provider can pause a task in place (the node
// record's Suspend: providers.Suspender); elsewhere a job that asks for
// suspend falls back to requeue (engine.ResolveMode), and its eviction's
// reason says so. A suspended job keeps its node, its memory and its
// devices (GPUs, MIG instances, storage): only its CPU goes to the
// preemptor, so a suspend eviction is ordered only if the preemptor then
// fits beside what the suspended victims keep (else they are requeued,
// the reason saying why). The agent pauses the task and stamps the record
// (still running, suspended_at set) and reports "suspended"; the
// scheduler then holds the job's pin (its request without CPU) in the
// ledger, leaves it out of the engine's input, and resumes it on the same
// node (a fenced resume order) once its whole request fits there again
// and no preemptor waits on the node.

// LiveModes are the eviction modes the scheduler carries out on any node;
// suspendModes adds suspend, for the jobs of nodes that can suspend.
var (
	LiveModes    = []engine.EvictionMode{engine.ModeCancel, engine.ModeRequeue, engine.ModeCheckpoint}
	suspendModes = []engine.EvictionMode{engine.ModeCancel, engine.ModeRequeue, engine.ModeCheckpoint, engine.ModeSuspend}
)

// Eviction is one eviction the scheduler ordered.
type Eviction struct {
	JobID     string               `json:"job_id"`    // the victim
	Preemptor string               `json:"preemptor"` // the job it makes room for
	Node      string               `json:"node"`
	Account   string               `json:"account"` // the victim's
	Priority  int                  `json:"priority"`
	Policy    engine.PreemptPolicy `json:"policy"`
	Mode      engine.EvictionMode  `json:"mode"`
	Reason    string               `json:"reason"`
	At        time.Time            `json:"at"`
	// LostWork estimates the work the eviction throws away: the victim's
	// run time since its start or, unless it is cancelled, its last
	// verified checkpoint (checkpoint.go), in seconds.
	LostWork float64 `json:"lost_work_seconds"`
}

// preemptHold is a preemptor waiting for its victims to end.
type preemptHold struct {
	p       engine.Placement
	victims []string
	until   time.Time
	expl    engine.Explanation // the plan's explanation of the preemptor
}

// evictionWindow is how long the scheduler remembers an eviction (its
// explanations and the per-hour figure).
const evictionWindow = time.Hour

// orderModeOf maps an engine mode to the order's.
func orderModeOf(m engine.EvictionMode) string {
	switch m {
	case engine.ModeCancel:
		return pool.EvictCancel
	case engine.ModeCheckpoint:
		return pool.EvictCheckpoint
	case engine.ModeSuspend:
		return pool.EvictSuspend
	}
	return pool.EvictRequeue
}

// takeEvictionsLocked records plan's evictions on their victims and
// returns them with the holds of their preemptors, by preemptor (s.mu
// held). A victim no longer running where the plan saw it is skipped.
func (s *Scheduler) takeEvictionsLocked(plan *engine.Plan, expls iter.Seq2[int, engine.Explanation]) ([]Eviction, map[string]*preemptHold) {
	if len(plan.Evictions) == 0 {
		return nil, nil
	}
	var evs []Eviction
	holds := map[string]*preemptHold{}
	for _, e := range plan.Evictions {
		v, ok := s.jobs_[e.JobID]
		if !ok || v.phase != PhaseRunning || v.node() != e.Node || v.evicting != nil || v.suspended || v.resuming {
			continue
		}
		mode := engine.ResolveMode(e.Mode, s.modesLocked(e.Node))
		ev := Eviction{JobID: e.JobID, Preemptor: e.Preemptor, Node: e.Node, Account: v.acct, Priority: int(v.priority),
			Policy: e.Policy, Mode: mode, Reason: e.Reason, At: plan.Now}
		if want := cmp.Or(v.preemptMode(), s.cfg.Preemption.DefaultMode, engine.ModeRequeue); want == engine.ModeSuspend && mode != want {
			ev.Reason += fmt.Sprintf("; suspend not possible: node %s's provider cannot suspend (%s instead)", e.Node, mode)
		}
		ev.LostWork = s.lostWorkLocked(v, mode, plan.Now)
		v.evicting = &ev
		h := holds[e.Preemptor]
		if h == nil {
			h = &preemptHold{}
			holds[e.Preemptor] = h
		}
		h.victims = append(h.victims, e.JobID)
		evs = append(evs, ev)
	}
	for _, ex := range expls {
		if h := holds[ex.JobID]; h != nil {
			h.expl = ex
		}
	}
	s.checkSuspendsLocked(plan, evs)
	return evs, holds
}

// lostWorkLocked is the work evicting v in mode loses at now, in seconds
// (s.mu held): none when suspended; else its run time since its start or,
// unless it is cancelled, its last verified checkpoint.
func (s *Scheduler) lostWorkLocked(v *tracked, mode engine.EvictionMode, now time.Time) float64 {
	if mode == engine.ModeSuspend {
		return 0 // it goes on where it stopped
	}
	since := v.started
	if c := s.lastCheckpointLocked(v.id()); mode != engine.ModeCancel && c.After(since) {
		since = c // it resumes from there
	}
	if !since.IsZero() && now.After(since) {
		return now.Sub(since).Seconds()
	}
	return 0
}

// orderEvictions sends the eviction orders, writes each eviction on its
// victim's record and the preemptor's explanation (evicts) on its own,
// and counts them. A failed order frees the victim and drops its
// preemptor's hold.
func (s *Scheduler) orderEvictions(ctx context.Context, evs []Eviction) error {
	if err := s.explainPreemptors(ctx, evs); err != nil {
		return err
	}
	for _, ev := range evs {
		// The victim's record says why it stops (jobs explain on a job
		// that is not pending shows the record's explanation); written
		// before the order, so that the victim's end cannot come first.
		b, err := json.Marshal(Explained{Reason: "preempted", Message: ev.Reason, Preempted: preemptedView(ev)})
		if err == nil {
			_, err = s.jobs.Transition(ctx, ev.JobID, wire.JobRunning, wire.JobRunning, jobs.Update{Explanation: b, ExpectNode: ev.Node})
		}
		if fenced(err) {
			return err
		}
		if err != nil && !errors.Is(err, jobs.ErrConflict) && !errors.Is(err, jobs.ErrNotFound) {
			s.log.Warn("record eviction on the job", "job", ev.JobID, "err", err)
		}
		err = s.orders.Evict(ctx, s.fence, ev.Node, ev.JobID, pool.Eviction{Mode: orderModeOf(ev.Mode), Reason: ev.Reason, Grace: s.cfg.PreemptGrace})
		if fenced(err) {
			return err
		}
		if err != nil {
			s.log.Warn("eviction order", "job", ev.JobID, "node", ev.Node, "err", err)
			s.mu.Lock()
			if v, ok := s.jobs_[ev.JobID]; ok && v.evicting != nil {
				v.evicting = nil
			}
			if t, ok := s.waiting[ev.Preemptor]; ok {
				t.hold = nil
				delete(s.waiting, ev.Preemptor)
				s.replan = true
			}
			s.mu.Unlock()
			continue
		}
		s.log.Info("evicting", "job", ev.JobID, "node", ev.Node, "preemptor", ev.Preemptor, "policy", ev.Policy, "mode", ev.Mode)
		s.mu.Lock()
		s.stats.preemptions++
		s.stats.lostWork += ev.LostWork
		s.evictLog = append(s.evictLog, ev)
		s.mu.Unlock()
		s.cfg.OnEviction(ev)
	}
	return nil
}

// explainPreemptors publishes, once, the explanation of each preemptor of
// evs now (its hold may be over before the next explanation pass).
func (s *Scheduler) explainPreemptors(ctx context.Context, evs []Eviction) error {
	now := s.cfg.Clock.Now()
	for i, ev := range evs {
		if i > 0 && evs[i-1].Preemptor == ev.Preemptor {
			continue
		}
		s.mu.Lock()
		t, ok := s.waiting[ev.Preemptor]
		var e engine.Explanation
		if ok && t.hold != nil {
			e = t.hold.expl
			t.explained, t.explAt = explainKey{reason: e.Reason, pos: int32(e.Position), placed: e.Placed}, now.UnixNano()
		}
		s.mu.Unlock()
		if !ok || e.JobID == "" {
			continue
		}
		b, err := json.Marshal(s.explained(e))
		if err != nil {
			continue
		}
		_, err = s.jobs.Transition(ctx, ev.Preemptor, wire.JobQueued, wire.JobQueued, jobs.Update{Explanation: b})
		if fenced(err) {
			return err
		}
		if err != nil && !errors.Is(err, jobs.ErrConflict) && ctx.Err() == nil {
			s.log.Warn("publish preemptor's explanation", "job", ev.Preemptor, "err", err)
		}
	}
	return nil
}

// holdPreemptorLocked keeps t, placed by p, pending until its victims end
// (s.mu held).
func (s *Scheduler) holdPreemptorLocked(t *tracked, h *preemptHold, p engine.Placement, now time.Time) {
	h.p = p
	h.until = now.Add(s.cfg.PreemptWait)
	t.hold = h
	s.waiting[t.id()] = t
}

// placeWaitingLocked assigns, in the ledger, the preemptors whose victims
// have all released their node, and drops the holds that waited too long
// (s.mu held). It returns the assignments to write.
func (s *Scheduler) placeWaitingLocked(now time.Time) ([]pool.Assignment, []*tracked) {
	if len(s.waiting) == 0 {
		return nil, nil
	}
	var as []pool.Assignment
	var ts []*tracked
	for _, id := range slices.Sorted(maps.Keys(s.waiting)) {
		t := s.waiting[id]
		h := t.hold
		if h == nil || t.phase != PhasePending || s.jobs_[id] != t {
			delete(s.waiting, id)
			continue
		}
		released := true
		for _, v := range h.victims {
			if vt := s.jobs_[v]; vt != nil && vt.suspended {
				continue // paused: what it keeps is not the preemptor's (checkSuspendsLocked)
			}
			if a, ok := s.ledger.Allocation(v); ok && a.Node == h.p.Node {
				released = false
				break
			}
		}
		if !released {
			if now.After(h.until) {
				s.log.Warn("victims did not stop in time; the preemptor waits in the queue again", "job", id, "node", h.p.Node, "victims", h.victims)
				t.hold = nil
				delete(s.waiting, id)
				s.replan = true
			}
			continue
		}
		t.hold = nil
		delete(s.waiting, id)
		s.replan = true
		if err := s.ledger.ApplyAt(t.job(), h.p, now); err != nil {
			s.stats.refusedApply++
			s.log.Warn("preemptor's placement refused by the ledger", "job", id, "node", h.p.Node, "err", err)
			continue
		}
		alloc, _ := s.ledger.Allocation(id)
		pl := providers.Placement{Node: h.p.Node, NUMA: h.p.NUMA, GPUs: slices.Clone(h.p.GPUs), MIG: slices.Clone(h.p.MIG), CPUs: slices.Clone(alloc.CPUs)}
		s.setPhaseLocked(t, PhaseAssigned)
		t.placement = &pl
		as = append(as, pool.Assignment{JobID: id, Placement: pl})
		ts = append(ts, t)
	}
	return as, ts
}

// heldNodesLocked marks the nodes preemptors wait on unhealthy in nodes,
// the engine's input (s.mu held): the room being freed there is theirs.
func (s *Scheduler) heldNodesLocked(nodes []engine.Node) {
	if len(s.waiting) == 0 {
		return
	}
	held := map[string]bool{}
	for _, t := range s.waiting {
		if t.hold != nil {
			held[t.hold.p.Node] = true
		}
	}
	for i := range nodes {
		if held[nodes[i].Name] {
			nodes[i].Unhealthy = true
		}
	}
}

// pruneEvictionsLocked forgets evictions older than evictionWindow.
func (s *Scheduler) pruneEvictionsLocked(now time.Time) {
	k := 0
	for k < len(s.evictLog) && now.Sub(s.evictLog[k].At) >= evictionWindow {
		k++
	}
	if k > 0 {
		s.evictLog = slices.Delete(s.evictLog, 0, k)
	}
}

// lastEvictionLocked returns the latest remembered eviction of job id as
// a victim (s.mu held).
func (s *Scheduler) lastEvictionLocked(id string) (Eviction, bool) {
	for i := len(s.evictLog) - 1; i >= 0; i-- {
		if s.evictLog[i].JobID == id {
			return s.evictLog[i], true
		}
	}
	return Eviction{}, false
}

// Evictions returns the evictions of the last hour, oldest first.
func (s *Scheduler) Evictions() []Eviction {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneEvictionsLocked(s.cfg.Clock.Now())
	return slices.Clone(s.evictLog)
}

// PreemptedView is an eviction on the victim's explanation.
type PreemptedView struct {
	By       string  `json:"by"` // the preemptor
	Node     string  `json:"node"`
	Policy   string  `json:"policy"`
	Mode     string  `json:"mode"`
	Reason   string  `json:"reason"`
	At       float64 `json:"at"` // epoch seconds
	LostWork float64 `json:"lost_work_seconds"`
}

func preemptedView(ev Eviction) *PreemptedView {
	return &PreemptedView{By: ev.Preemptor, Node: ev.Node, Policy: string(ev.Policy), Mode: string(ev.Mode), Reason: ev.Reason,
		At: float64(ev.At.UnixNano()) / 1e9, LostWork: round3(ev.LostWork)}
}

// mayPreemptLocked reports whether one of the jobs added since the last
// plan could evict (so that plan must run even if they fit nowhere).
func (s *Scheduler) mayPreemptLocked() bool {
	if !s.cfg.Preemption.Enabled() {
		return false
	}
	for _, t := range s.added {
		if t.phase == PhasePending && t.gangID == "" && int(t.priority) >= s.cfg.Preemption.MinPreemptorLevel {
			return true
		}
	}
	return false
}
