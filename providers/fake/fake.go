// Package fake is a FAKE provider, named as such: it runs nothing. Each task
// "runs" for its planned duration on the given clock and then succeeds. It
// backs the fake-node agent (adapter serve --fake-nodes N), which, like
// KWOK for Kubernetes, lets the scheduler drive thousands of virtual nodes
// for load tests, demos and the pool benchmark. It is never used to run a
// real job.
package fake

import (
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

// Provider completes every task after its planned duration.
type Provider struct {
	name    string
	clk     Clock
	def     time.Duration
	mu      sync.Mutex
	tasks   map[string]*task // by task ID; guarded by mu
	started int              // guarded by mu
}

type task struct {
	start, end time.Time
	timeout    time.Duration
	stopped    time.Time
}

var _ providers.Provider = (*Provider)(nil)

// New returns a fake provider named name whose tasks without a planned
// duration take def.
func New(name string, clk Clock, def time.Duration) *Provider {
	return &Provider{name: name, clk: clk, def: def, tasks: map[string]*task{}}
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
	p.tasks[t.ID] = &task{start: now, end: now.Add(d), timeout: t.Timeout}
	p.started++
	return providers.Handle{Provider: p.name, ID: t.ID}, nil
}

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
	case t.timeout > 0 && now.Sub(t.start) >= t.timeout && t.end.Sub(t.start) > t.timeout:
		st.State, st.FinishedAt, st.TimedOut, st.Error = providers.StateFailed, t.start.Add(t.timeout), true, "timed out"
	case !now.Before(t.end):
		zero := 0
		st.State, st.FinishedAt, st.ExitCode = providers.StateSucceeded, t.end, &zero
	}
	return st, nil
}

// Stop cancels a task that has not reached its end.
func (p *Provider) Stop(_ context.Context, h providers.Handle) error {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[h.ID]
	if !ok || h.Provider != p.name {
		return providers.ErrUnknownHandle
	}
	if t.stopped.IsZero() && now.Before(t.end) {
		t.stopped = now
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
	delete(p.tasks, h.ID)
}
