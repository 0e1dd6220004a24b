package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// publishExplanations writes changed explanations onto the job records
// and entries, at most limit per call and at most once per job every
// minGap, so a deep queue cannot flood Redis. It looks at the last plan
// only while some of its explanations remain to publish (explainMore),
// so an idle scheduler does not walk every pending job each second. Only the Run goroutine calls
// it, in sequence with the transitions, so a stale "queued" never
// overwrites "running".
func (s *Scheduler) publishExplanations(ctx context.Context, limit int, minGap time.Duration) error {
	now := s.cfg.Clock.Now()
	type upd struct {
		id string
		e  engine.Explanation
	}
	var todo []upd
	s.mu.Lock()
	if !s.explainMore {
		// Nothing new since the last pass: no plan ran, and that pass
		// published everything that had changed.
		s.mu.Unlock()
		return nil
	}
	more := false
	for i := range s.expl.held {
		h := &s.expl.held[i]
		if len(todo) >= limit {
			more = true
			break
		}
		t, ok := s.jobs_[h.id]
		if !ok || t.phase != PhasePending {
			continue
		}
		k := explainKey{reason: h.reason, pos: h.pos, placed: h.flags&heldPlaced != 0}
		if k == t.explained {
			continue
		}
		if now.UnixNano()-t.explAt < int64(minGap) {
			more = true // changed again too soon: a later pass
			continue
		}
		t.explained, t.explAt = k, now.UnixNano()
		todo = append(todo, upd{h.id, s.expl.at(i)})
	}
	s.explainMore = more
	s.mu.Unlock()
	for _, u := range todo {
		b, err := json.Marshal(s.explained(u.e))
		if err != nil {
			continue
		}
		_, err = s.jobs.Transition(ctx, u.id, wire.JobQueued, wire.JobQueued, jobs.Update{Explanation: b})
		if fenced(err) {
			return err
		}
		if err != nil && !errors.Is(err, jobs.ErrConflict) && ctx.Err() == nil {
			s.log.Warn("publish explanation", "job", u.id, "err", err)
		}
	}
	return nil
}

// Explanation returns the latest plan's explanation of job id (a copy;
// false when the plan has none: the job is not pending, or in no plan
// yet). A scan, not a map of every explanation built per call (10,000
// entries for one answer, each time an operator asks).
func (s *Scheduler) Explanation(id string) (engine.Explanation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.waiting[id]; ok && t.hold != nil {
		return t.hold.expl, true // out of the plans while it waits for its victims
	}
	if t, ok := s.jobs_[id]; ok && t.inOrder {
		if i := int(t.pos) - 1; i < len(s.expl.held) && s.expl.held[i].id == id {
			return s.expl.at(i), true
		}
	}
	for i := range s.expl.held {
		if s.expl.held[i].id == id {
			return s.expl.at(i), true
		}
	}
	return engine.Explanation{}, false
}

// explanations are a full plan's explanations, in its order, kept compact:
// the scheduler holds them until the next full plan (about 10,000 of them
// over a deep queue), for publication and for the explain API. A placed
// job's node and victims, which only a handful have, are kept aside.
type explanations struct {
	held   []heldExpl
	placed map[int]placedExpl // by index in held
}

// heldExpl is an engine.Explanation without its node and victims (see
// placed), its estimated start as Unix nanoseconds: 128 B against 208.
type heldExpl struct {
	id, account, message                        string
	reason                                      engine.Code
	priority, ageHours, age, fairShare, urgency float64
	slack                                       time.Duration
	estStart                                    int64 // 0: unknown
	pos                                         int32
	level                                       int16
	flags                                       uint8
}

// heldExpl flags.
const (
	heldPlaced uint8 = 1 << iota
	heldHasDeadline
	heldDeadlineMiss
	heldGuaranteed
)

type placedExpl struct {
	node   string
	evicts []string
}

// add keeps e, the next explanation in the plan's order, compact. The
// engine hands a full plan's explanations to add one at a time
// (engine.ScheduleEach), so that they are held once, in this form.
func (x *explanations) add(e *engine.Explanation) {
	f := &e.Factors
	h := heldExpl{
		id: e.JobID, account: e.Account, message: e.Message, reason: e.Reason,
		priority: e.Priority, ageHours: f.AgeHours, age: f.Age, fairShare: f.FairShare, urgency: f.Urgency,
		slack: f.Slack, pos: int32(e.Position), level: int16(f.Level),
	}
	if !e.EstStart.IsZero() {
		h.estStart = e.EstStart.UnixNano()
	}
	h.flags = flagIf(e.Placed, heldPlaced) | flagIf(f.HasDeadline, heldHasDeadline) |
		flagIf(f.DeadlineMiss, heldDeadlineMiss) | flagIf(f.Guaranteed, heldGuaranteed)
	if e.Node != "" || len(e.Evicts) > 0 {
		if x.placed == nil {
			x.placed = map[int]placedExpl{}
		}
		x.placed[len(x.held)] = placedExpl{node: e.Node, evicts: e.Evicts}
	}
	x.held = append(x.held, h)
}

// all yields the explanations in order, by index, as at gives them.
func (x *explanations) all() iter.Seq2[int, engine.Explanation] {
	return func(yield func(int, engine.Explanation) bool) {
		for i := range x.held {
			if !yield(i, x.at(i)) {
				return
			}
		}
	}
}

func flagIf(on bool, f uint8) uint8 {
	if on {
		return f
	}
	return 0
}

// at is the i-th explanation as the engine gave it, its EstStart as
// time.Unix (the same instant, without a monotonic reading).
func (x *explanations) at(i int) engine.Explanation {
	h := &x.held[i]
	e := engine.Explanation{
		JobID: h.id, Account: h.account, Position: int(h.pos), Priority: h.priority,
		Factors: engine.Factors{
			Level: int(h.level), AgeHours: h.ageHours, Age: h.age, FairShare: h.fairShare, Urgency: h.urgency,
			Slack: h.slack, HasDeadline: h.flags&heldHasDeadline != 0, DeadlineMiss: h.flags&heldDeadlineMiss != 0,
			Guaranteed: h.flags&heldGuaranteed != 0,
		},
		Placed: h.flags&heldPlaced != 0, Reason: h.reason, Message: h.message,
	}
	if h.estStart != 0 {
		e.EstStart = time.Unix(0, h.estStart)
	}
	if p, ok := x.placed[i]; ok {
		e.Node, e.Evicts = p.node, p.evicts
	}
	return e
}

// Explain returns job id's explanation for publication: the latest plan's
// (Explanation), with the eviction it suffered in the last hour, if any;
// for a job in no plan that was evicted, the eviction alone. False when
// there is neither.
func (s *Scheduler) Explain(id string) (Explained, bool) {
	if e, ok := s.Explanation(id); ok {
		return s.explained(e), true
	}
	s.mu.Lock()
	ev, ok := s.lastEvictionLocked(id)
	s.mu.Unlock()
	if !ok {
		return Explained{}, false
	}
	return Explained{Reason: "preempted", Message: ev.Reason, Preempted: preemptedView(ev)}, true
}

// NodeProvider names the provider of a registered node ("" when the node
// is unknown).
func (s *Scheduler) NodeProvider(node string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health[node].rec.Provider
}

// explained is ExplanationJSON(e) with the provider of the node it was
// placed on and the job's latest eviction.
func (s *Scheduler) explained(e engine.Explanation) Explained {
	out := ExplanationJSON(e)
	s.mu.Lock()
	if e.Node != "" {
		out.Provider = s.health[e.Node].rec.Provider
	}
	ev, ok := s.lastEvictionLocked(e.JobID)
	s.mu.Unlock()
	if ok {
		out.Preempted = preemptedView(ev)
	}
	return out
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
	// Node is where the job was placed, Provider that node's provider
	// (config providers; "local" or "fake" without).
	Node     string   `json:"node,omitempty"`
	Provider string   `json:"provider,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Message  string   `json:"message,omitempty"`
	EstStart *float64 `json:"estimated_start"`
	// Evicts are the running jobs evicted to make room for this job
	// (placed by preemption); Preempted is this job's own latest
	// eviction (within the last hour).
	Evicts    []string       `json:"evicts,omitempty"`
	Preempted *PreemptedView `json:"preempted,omitempty"`
}

// ExplanationJSON converts an engine explanation for publication.
func ExplanationJSON(e engine.Explanation) Explained {
	f := e.Factors
	out := Explained{
		Position: e.Position, Priority: round3(e.Priority), Level: f.Level, AgeHours: round3(f.AgeHours),
		AgeTerm: round3(f.Age), FairShare: round3(f.FairShare), Urgency: round3(f.Urgency),
		DeadlineMiss: f.DeadlineMiss, Guaranteed: f.Guaranteed, Placed: e.Placed, Node: e.Node,
		Reason: string(e.Reason), Message: e.Message, Evicts: e.Evicts,
	}
	if f.HasDeadline {
		sl := f.Slack.Seconds()
		out.SlackSeconds = &sl
	}
	if !e.EstStart.IsZero() {
		st := float64(e.EstStart.UnixNano()) / 1e9
		out.EstStart = &st
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
