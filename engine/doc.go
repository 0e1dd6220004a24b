// Package engine is computeboard's scheduling engine: a pure function
// Schedule(State, Snapshot) (Plan, State) that decides which pending jobs
// start on which nodes.
//
// Vocabulary. A Snapshot is everything one cycle looks at (Now, Seed,
// Policy, nodes with their free resources, pending and running jobs,
// accounts). A Plan is the decision: placements, rejections with typed
// reason Codes, an Explanation per pending job, the EASY-backfill
// reservation, and Evictions: running jobs to stop so that a job that fits
// nowhere can start (preemption, off unless Snapshot.Preemption says which
// policy; preempt.go documents the policies, guard rails and modes). State is what carries over between cycles (decayed usage,
// WFQ tags, DRR deficits, lottery compensation, the last hour's
// evictions), versioned JSON. Resources is
// a fixed vector indexed by Dim. An entry is a job or a whole gang.
//
// The engine imports only the standard library, reads no clock, starts no
// goroutine, does no I/O, and takes its randomness from Snapshot.Seed: the
// same input gives the same Plan. README.md lists the cycle with its
// formulas; doc comments in schedule.go, queue.go, fairshare.go,
// binpack.go, backfill.go and preempt.go give each step.
package engine
