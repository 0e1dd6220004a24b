// Package dispatch is the pool's scheduler: the one adapter holding the
// scheduler lease runs it (see package pool). It owns its config, its job
// phases and its figures:
//
//   - intake: requests from the broker become durable jobs (the broker's
//     AcceptBatch), at most Config.MaxPending shared by the accounts'
//     shares, and wait in the engine;
//   - a cycle that saw a change that may let a job start (an end, a
//     cancel, a node added, changed or unhealthy, a new job, unless every
//     waiting job is stuck and it fits on no node now), and every
//     FullReplan (10 s) in any case, builds an engine.Snapshot from the Ledger (every
//     registered node, with its GPUs, MIG instances and NUMA domains, and
//     every job placed on it), runs engine.Schedule, re-checks each
//     placement with Ledger.Apply and gives the placed jobs to their nodes
//     through the pool's fenced assignment step; other cycles leave the
//     engine alone (Scheduler.schedule says why that places nothing less);
//   - agents report starts and ends on the report stream; the scheduler
//     releases what ended and charges its usage to fair share;
//   - a node that stops beating gets no new work after NodeUnhealthy (its
//     assigned-but-unstarted jobs are placed again elsewhere) and after
//     NodeTimeout its running jobs end `lost`, or go back to the queue when
//     their template allows it (at least once);
//   - preemption (Config.Preemption, off by default; preempt.go): a
//     plan's evictions become fenced eviction orders to the victims'
//     nodes, and each preemptor is held, out of the engine's input, until
//     its victims' ends release their room; then it is assigned;
//   - final rejections, incomplete gangs, retracted requests and
//     explanations are written to the job records, every write fenced by
//     the scheduler's epoch.
//
// A newly elected scheduler rebuilds everything from Redis (Recover): the
// engine checkpoint, the registry, the active job records, and the
// placements stored with them. Jobs phases: pending (in the engine),
// assigned (order written, not started), running (the agent started it).
package dispatch
