package blackboard

import "errors"

// Sentinel errors; test with errors.Is. Every error this package returns is
// wrapped once, as "blackboard: <op> <id>: <cause>".
var (
	// ErrNotFound: no such entry or module (an entry whose TTL has lapsed
	// counts as not found for Get).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the id or module name is taken, or the entry is not in the
	// status the operation expects.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: a malformed entry, id, query, event or config.
	ErrInvalid = errors.New("invalid")
	// ErrStale: an update's Guard did not hold; nothing was written.
	ErrStale = errors.New("stale")
)
