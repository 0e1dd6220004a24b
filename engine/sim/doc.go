// Package sim replays a workload trace through the real scheduling engine on
// a virtual clock and reports what a policy did with it: per-account share
// versus target with Jain's fairness index, waits by priority level,
// utilization per resource, deadline misses, makespan and the engine's
// decision rate. It can run the same trace under several policies and
// compare them.
//
// The simulator is a discrete-event loop over a heap of events ordered by
// time, then sequence number: job arrivals, job completions and periodic
// scheduling ticks. It is the clock: at every event time (and tick) it
// builds an engine.Snapshot (nodes with their allocations and device flags,
// the waiting jobs, the running jobs plus those that ended since the last
// cycle with Running.Ended set, so their usage is charged), calls
// engine.Schedule, checks each placement against the nodes as the adapter
// would, and starts the placed jobs at once. A job ends after its actual
// duration from the trace; the engine only ever sees the estimate. Jobs the
// engine rejects as final are dropped. The engine's State is carried from
// cycle to cycle and each cycle's Seed is derived from the trace seed, so a
// trace and seed always give the same report (except the wall-clock timing
// fields; see Report.WithoutTimings).
//
// With preemption on (Trace.Preemption, Options.Preemption) it applies
// each plan's evictions before its placements and reports lost work,
// urgent jobs' waits and eviction counts (preempt.go, ComparePreemption).
//
// The trace format (JSON, optionally with jobs in CSV) is documented in
// README.md next to this file, with examples under examples/traces.
//
// The package imports only the standard library and the engine.
package sim
