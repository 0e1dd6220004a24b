// Package fake is a FAKE provider, named as such: it runs nothing. Each task
// "runs" for its planned duration on the given clock and then succeeds. It
// backs the fake-node agent (adapter serve --fake-nodes N), which, like
// KWOK for Kubernetes, lets the scheduler drive thousands of virtual nodes
// for load tests, demos and the pool benchmark. It is never used to run a
// real job.
package fake

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// DurationLabel is the Task label holding the planned run time in seconds
// (the request's estimated duration); absent or unparsable = Default.
const DurationLabel = "duration_s"

// Clock tells the time.
type Clock interface{ Now() time.Time }

// CheckEvery is how often, at the longest, the provider's watcher reads a
// settable clock (one with an Advance or Set method, as a test's fake
// clock has) for tasks that have reached their end, once Ended has been
// called (see Ended): a Clock has no timers, and a settable one may jump.
// Another clock is taken to run at the wall clock's pace: the watcher
// sleeps until the soonest end, or MaxSleep if that is sooner.
const (
	CheckEvery = 10 * time.Millisecond
	MaxSleep   = time.Second
)

// Provider completes every task after its planned duration.
type Provider struct {
	name    string
	clk     Clock
	def     time.Duration
	mu      sync.Mutex
	tasks   map[string]*task // by task ID; guarded by mu
	started int              // guarded by mu
	// ends holds the tasks that have not ended, soonest end first; the
	// watcher takes them off as the clock passes their end. Guarded by mu.
	ends endHeap
	// notify: Ended was called, so the watcher runs while ends is not
	// empty; watching: it runs. Guarded by mu.
	notify, watching bool
	wake             chan struct{} // capacity 1: a new soonest end
	notices          providers.EndedQueue
	// sleep bounds the watcher's sleep: CheckEvery for a settable clock,
	// MaxSleep for another.
	sleep time.Duration
}

type task struct {
	id         string
	start, end time.Time
	timeout    time.Duration
	stopped    time.Time
	// at is when the task ends: end, or its timeout if that comes first.
	at    time.Time
	index int // in Provider.ends; -1 when not there
}

var (
	_ providers.Provider = (*Provider)(nil)
	_ providers.Notifier = (*Provider)(nil)
)

// New returns a fake provider named name whose tasks without a planned
// duration take def.
func New(name string, clk Clock, def time.Duration) *Provider {
	sleep := MaxSleep
	switch clk.(type) {
	case interface{ Advance(time.Duration) }, interface{ Set(time.Time) }:
		sleep = CheckEvery
	}
	return &Provider{name: name, clk: clk, def: def, tasks: map[string]*task{}, wake: make(chan struct{}, 1), sleep: sleep}
}

// Start records the task; it "ends" after its planned duration (or its
// Timeout, if shorter: it then fails as timed out).
func (p *Provider) Start(_ context.Context, t providers.Task) (providers.Handle, error) {
	if t.ID == "" {
		return providers.Handle{}, fmt.Errorf("fake: %w: empty task id", providers.ErrInvalidTask)
	}
	d := p.def
	if s, ok := t.Labels[DurationLabel]; ok {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 {
			d = time.Duration(f * float64(time.Second))
		}
	}
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.tasks[t.ID]; ok {
		return providers.Handle{}, fmt.Errorf("fake: %w: task %s started twice", providers.ErrInvalidTask, t.ID)
	}
	tk := &task{id: t.ID, start: now, end: now.Add(d), timeout: t.Timeout, at: now.Add(d)}
	if tk.timedOut() {
		tk.at = now.Add(t.Timeout)
	}
	p.tasks[t.ID] = tk
	p.started++
	heap.Push(&p.ends, tk)
	if tk.index == 0 {
		p.watchLocked() // a new soonest end
	}
	return providers.Handle{Provider: p.name, ID: t.ID}, nil
}

// timedOut reports whether the task's Timeout ends it before its planned end.
func (t *task) timedOut() bool { return t.timeout > 0 && t.end.Sub(t.start) > t.timeout }

// Poll reports running until the planned end, then succeeded (exit 0), or
// failed with TimedOut past a shorter Timeout, or cancelled after Stop.
func (p *Provider) Poll(_ context.Context, h providers.Handle) (providers.Status, error) {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[h.ID]
	if !ok || h.Provider != p.name {
		return providers.Status{}, providers.ErrUnknownHandle
	}
	st := providers.Status{State: providers.StateRunning, StartedAt: t.start}
	switch {
	case !t.stopped.IsZero():
		st.State, st.FinishedAt, st.Error = providers.StateCancelled, t.stopped, "stopped on request"
	case t.timedOut() && !now.Before(t.at):
		st.State, st.FinishedAt, st.TimedOut, st.Error = providers.StateFailed, t.at, true, "timed out"
	case !now.Before(t.end):
		zero := 0
		st.State, st.FinishedAt, st.ExitCode = providers.StateSucceeded, t.end, &zero
	}
	return st, nil
}

// Stop cancels a task that has not reached its end (nor its timeout).
func (p *Provider) Stop(_ context.Context, h providers.Handle) error {
	now := p.clk.Now()
	p.mu.Lock()
	t, ok := p.tasks[h.ID]
	if !ok || h.Provider != p.name {
		p.mu.Unlock()
		return providers.ErrUnknownHandle
	}
	cancelled := t.stopped.IsZero() && now.Before(t.at)
	if cancelled {
		t.stopped = now
		p.unwatchLocked(t)
	}
	p.mu.Unlock()
	if cancelled {
		p.notices.Send(h)
	}
	return nil
}

// Started is how many tasks were started.
func (p *Provider) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Forget drops an ended task's record (the agent calls it once the outcome
// is recorded), so a long-running fake node does not grow without bound.
func (p *Provider) Forget(h providers.Handle) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.tasks[h.ID]; ok {
		p.unwatchLocked(t)
		delete(p.tasks, h.ID)
	}
}

// Ended returns the channel on which the provider sends the handle of
// each task that ends: when the clock has passed its end (or its timeout),
// within CheckEvery on a settable clock (at once on another), or at once
// when it is stopped. From the first call on, a watcher goroutine runs
// while some task has not ended; it reads the clock when the soonest end
// is due, and every CheckEvery (a settable clock) or MaxSleep (another) in
// any case.
func (p *Provider) Ended() <-chan providers.Handle {
	c := p.notices.C()
	p.mu.Lock()
	p.notify = true
	p.watchLocked()
	p.mu.Unlock()
	return c
}

// watchLocked starts the watcher, or wakes it (a sooner end). The caller
// holds mu.
func (p *Provider) watchLocked() {
	switch {
	case !p.notify || len(p.ends) == 0:
	case !p.watching:
		p.watching = true
		go p.watch() // ends once no task is left to end
	default:
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// unwatchLocked takes t off the ends heap, if it is there. The caller
// holds mu.
func (p *Provider) unwatchLocked(t *task) {
	if t.index >= 0 && t.index < len(p.ends) && p.ends[t.index] == t {
		heap.Remove(&p.ends, t.index)
	}
}

// watch is the watcher: it sends a notice for every task whose end the
// clock has passed, and returns when no task is left to end.
func (p *Provider) watch() {
	timer := time.NewTimer(CheckEvery)
	defer timer.Stop()
	var due []providers.Handle
	for {
		now := p.clk.Now()
		p.mu.Lock()
		for len(p.ends) > 0 && !now.Before(p.ends[0].at) {
			t := heap.Pop(&p.ends).(*task)
			due = append(due, providers.Handle{Provider: p.name, ID: t.id})
		}
		left := len(p.ends) > 0
		wait := p.sleep
		if left {
			wait = min(wait, p.ends[0].at.Sub(now))
		} else {
			p.watching = false
		}
		p.mu.Unlock()
		// After the clock has passed their ends: Poll reports them ended.
		for _, h := range due {
			p.notices.Send(h)
		}
		due = due[:0]
		if !left {
			return
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-p.wake:
		}
	}
}

// endHeap orders tasks by their end (container/heap).
type endHeap []*task

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h endHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *endHeap) Push(x any) {
	t := x.(*task)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *endHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
