// Package supervise is the supervisor side of the local provider
// (providers/local): the process that starts one task, waits for it and
// records its outcome, outliving the adapter that asked for it; and the
// protocol both sides share (Spec, Ready, the records in a task directory
// and how they are written).
//
// It imports nothing outside the standard library, so that a binary made
// of it alone, cmd/cb-supervisor, starts in about the time /bin/true
// does: a supervisor is started for every task, and the adapter binary,
// which pays every package's initialisation on each start, made that
// start several times slower. A test in this package keeps it so.
//
// The provider runs the same code in-process for a task without a
// supervisor (Start, then Supervise), so both modes classify outcomes,
// enforce timeouts and clear process groups identically. See
// providers/local's documentation for the protocol and the guarantees.
package supervise
