package adapter

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/dispatch"
	"github.com/computeboard/computeboard/wire"
)

// publisher posts the ComputeMetricsEntry topics on change and on an
// interval. It runs in its own goroutine and reads a snapshot through
// stats, so scheduling never waits for it and it never holds a lock while
// it talks to Redis.
type publisher struct {
	store    *blackboard.Store
	stats    func() dispatch.Stats
	provider func(node string) string // the provider of a node (nil: none named)
	interval time.Duration
	logger   *slog.Logger
	changed  chan struct{}          // one-slot wake-up: something changed
	evicted  chan dispatch.Eviction // evictions to post (Evicted); full: dropped, counted
	dropped  atomic.Int64

	// Owned by the Run goroutine only.
	lastUtil      map[string]float64
	lastCounts    [3]int
	exhausted     bool
	lastCompleted int
}

func newPublisher(store *blackboard.Store, stats func() dispatch.Stats, interval time.Duration, logger *slog.Logger) *publisher {
	return &publisher{store: store, stats: stats, interval: interval, logger: logger,
		changed: make(chan struct{}, 1), evicted: make(chan dispatch.Eviction, 256), lastCounts: [3]int{-1, -1, -1}}
}

// Notify asks for a publish soon; it never blocks.
func (p *publisher) Notify() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Evicted queues a compute.preemption entry and event for ev; it never
// blocks (past 256 waiting, evictions go unposted and are counted; the
// metrics still count them).
func (p *publisher) Evicted(ev dispatch.Eviction) {
	select {
	case p.evicted <- ev:
	default:
		p.dropped.Add(1)
	}
	p.Notify()
}

// postEvictions posts the queued evictions.
func (p *publisher) postEvictions(ctx context.Context) {
	for {
		select {
		case ev := <-p.evicted:
			d := wire.PreemptionData{Victim: ev.JobID, Preemptor: ev.Preemptor, Node: ev.Node, Account: ev.Account, Priority: ev.Priority,
				Policy: string(ev.Policy), Mode: string(ev.Mode), Reason: ev.Reason, LostWorkSeconds: ev.LostWork,
				At: float64(ev.At.UnixNano()) / 1e9}
			if p.provider != nil {
				d.Provider = p.provider(ev.Node)
			}
			id := p.post(ctx, func() (wire.EntryFields, error) { return wire.PreemptionEntryFields(d), nil })
			p.emit(ctx, wire.EventJobPreempted, wire.JobPreemptedEvent{PreemptionData: d, EntryID: id})
		default:
			return
		}
	}
}

// Run publishes until ctx is done. Changes are coalesced: at most one
// publish per 100ms, and at least one per interval.
func (p *publisher) Run(ctx context.Context) error {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	p.step(ctx, true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			p.step(ctx, true)
		case <-p.changed:
			p.step(ctx, false)
			select { // coalesce bursts of changes
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// step publishes the entries whose content changed (or all of them when
// force is set, the interval heartbeat).
func (p *publisher) step(ctx context.Context, force bool) {
	p.postEvictions(ctx)
	s := p.stats()
	if force || utilMoved(p.lastUtil, s.Utilization, 0.05) {
		p.postUtilization(ctx, s.Utilization)
	}
	counts := [3]int{s.Jobs.PendingJobs, s.Jobs.RunningJobs, s.Jobs.CompletedJobs}
	if force || counts != p.lastCounts {
		p.postJobStatus(ctx, s.Jobs)
		p.lastCounts = counts
	}
	if force {
		p.post(ctx, func() (wire.EntryFields, error) { return wire.MetricsEntryFields(s.Metrics) })
	}
}

func (p *publisher) postUtilization(ctx context.Context, util map[string]float64) {
	id := p.post(ctx, func() (wire.EntryFields, error) { return wire.UtilizationEntryFields(util) })
	if id == "" {
		return
	}
	p.lastUtil = util
	peak := wire.MaxUtilization(util)
	var fire bool
	p.exhausted, fire = wire.ExhaustionEdge(p.exhausted, peak)
	if fire {
		p.emit(ctx, "compute.resource.exhausted", wire.ResourceExhaustedEvent{
			Utilization: util, MaxUtilization: peak, Threshold: wire.ExhaustionThreshold, EntryID: id})
	}
}

func (p *publisher) postJobStatus(ctx context.Context, js wire.JobStatusData) {
	id := p.post(ctx, func() (wire.EntryFields, error) { return wire.JobStatusEntryFields(js) })
	if id == "" {
		return
	}
	if js.CompletedJobs > p.lastCompleted {
		p.emit(ctx, "compute.job.completed", wire.JobCompletedEvent{
			CompletedCount: js.CompletedJobs - p.lastCompleted, TotalCompleted: js.CompletedJobs, EntryID: id})
	}
	p.lastCompleted = js.CompletedJobs
}

// post writes one telemetry entry; it returns the entry id, or "" after
// logging a failure (telemetry never stops the adapter).
func (p *publisher) post(ctx context.Context, build func() (wire.EntryFields, error)) string {
	f, err := build()
	if err != nil {
		p.logger.Error("telemetry: build entry", "err", err)
		return ""
	}
	e := toEntry(f)
	id, err := p.store.Post(ctx, e)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Warn("telemetry: post", "topic", f.Topic, "err", err)
		}
		return ""
	}
	return id
}

func (p *publisher) emit(ctx context.Context, typ string, payload any) {
	b, err := json.Marshal(payload)
	if err != nil {
		p.logger.Error("telemetry: encode event", "type", typ, "err", err)
		return
	}
	if _, err := p.store.Emit(ctx, blackboard.Event{Type: typ, Source: sourceCompute, Payload: b}); err != nil && ctx.Err() == nil {
		p.logger.Warn("telemetry: emit", "type", typ, "err", err)
	}
}

// sourceCompute is the adapter's module name on the blackboard.
const sourceCompute = "compute"

func toEntry(f wire.EntryFields) *blackboard.Entry {
	e := blackboard.NewEntry(f.Topic, sourceCompute, f.Data)
	e.Metadata = f.Metadata
	e.Priority = blackboard.Priority(f.Priority)
	e.Confidence = f.Confidence
	ttl := f.TTLSeconds
	e.TTLSeconds = &ttl
	e.Tags = f.Tags
	return e
}

// utilMoved reports whether any resource moved by at least eps (or the key
// set changed), as the original adapter's change detection did.
func utilMoved(old, cur map[string]float64, eps float64) bool {
	if old == nil || len(old) != len(cur) {
		return true
	}
	for k, v := range cur {
		o, ok := old[k]
		if !ok || math.Abs(o-v) >= eps {
			return true
		}
	}
	return false
}
