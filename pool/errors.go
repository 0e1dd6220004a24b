package pool

import "errors"

// Errors returned by the pool.
var (
	// ErrFenced: the write carried an epoch that is no longer current (a
	// newer scheduler was elected); nothing was changed.
	ErrFenced = errors.New("pool: fenced: another scheduler holds the lease")
	// ErrNotQueued: an assignment found the job no longer queued.
	ErrNotQueued = errors.New("pool: job is not queued")
	// ErrNoJob: an assignment found no job record.
	ErrNoJob = errors.New("pool: no such job")
	// ErrReconciling: Redis restarted and its nodes have not all
	// re-asserted their jobs yet (a reconciliation round is open); nothing
	// new is assigned until they have or the round times out.
	ErrReconciling = errors.New("pool: reconciling after a Redis restart")
)
