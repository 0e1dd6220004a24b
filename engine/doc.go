// Package engine is computeboard's scheduling engine: a pure function
// Schedule(State, Snapshot) (Plan, State) that decides which pending jobs
// start on which nodes.
//
// Vocabulary. A Snapshot is everything one cycle looks at (Now, Seed,
// Policy, nodes with their free resources, pending and running jobs,
// accounts). A Plan is the decision: placements, rejections with typed
// reason Codes, an Explanation per pending job, and the EASY-backfill
// reservation. State is what carries over between cycles (decayed usage,
// WFQ tags, DRR deficits, lottery compensation), versioned JSON. Resources is
// a fixed vector indexed by Dim. An entry is a job or a whole gang.
//
// The engine imports only the standard library, reads no clock, starts no
// goroutine, does no I/O, and takes its randomness from Snapshot.Seed: the
// same input gives the same Plan. README.md lists the cycle with its
// formulas; doc comments in schedule.go, queue.go, fairshare.go,
// binpack.go and backfill.go give each step.
package engine
