// Package jobs is the durable job record store: P:job:<id> HASHes, created
// once per idempotency key of a source module (Accept, AcceptBatch), moved
// through their lifecycle by compare-and-set (Transition), mirrored into
// each job's compute.job entry and its duplicates' entries, retired with a
// retention when they end, and announced by compute.job.finished. It also
// keeps the scheduling engine's checkpoint (SaveEngineState). IntakeStep and
// LuaIntake give a new request's acceptance (record, job entry, consume) as
// one part of a composed Lua script: the broker's one-step intake.
//
// Vocabulary: a record is the source of truth, the job entry its copy on
// the board; a duplicate is another request of the same module with the
// same idempotency key, whose own job entry follows the record; a fence is
// an epoch key and the epoch a writer was elected with: a Fenced view's
// accepts and transitions change nothing once the key holds another epoch.
package jobs
