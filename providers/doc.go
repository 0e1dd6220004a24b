// Package providers is the seam between the adapter and the machines that
// run work. A Provider runs a Task and answers for it through a Handle:
// Start launches, Poll reports a Status, Stop cancels. That is all every
// backend must do; optional abilities (Suspender, Signaler, Notifier,
// Checkpointer, Restorer) are separate small interfaces the adapter finds
// with a type assertion.
//
// Vocabulary: a task is one attempt at running a job; a handle is the
// serialisable name of a started task, stored by the adapter so that a
// restarted adapter can re-attach to the task or learn that it is lost.
//
// This package imports nothing of ours; implementations live in
// providers/local (child processes), and later providers/slurm and
// providers/kube. providers/providertest is the conformance suite every
// implementation runs first.
package providers
