package jobs

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is. Every error this package returns is
// wrapped once, as "jobs: <op> <id>: <cause>".
var (
	// ErrNotFound: no such job record (or idempotency key).
	ErrNotFound = errors.New("jobs: not found")
	// ErrConflict: the job is not in the status a transition expects, or
	// not on the node it expects (Update.ExpectNode).
	ErrConflict = errors.New("jobs: conflict")
	// ErrWithdrawn: a start (queued → running) found the request withdrawn
	// and cancelled the job instead. It is also an ErrConflict.
	ErrWithdrawn = fmt.Errorf("%w: request withdrawn, job cancelled", ErrConflict)
	// ErrFenced: a Fenced view's write found the fence key holding another
	// epoch (its writer was deposed); nothing was changed.
	ErrFenced = errors.New("jobs: fenced")
)
