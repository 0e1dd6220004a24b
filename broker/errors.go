package broker

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is. ErrInboxFull and ErrLeaseLost are
// declared with the inbox (inbox.go).
var (
	// ErrNotFound: no such job, held request or dead letter.
	ErrNotFound = errors.New("broker: not found")
	// ErrConflict: the id is already held (Inbox.Push), or a job is not in
	// the status a transition expects.
	ErrConflict = errors.New("broker: conflict")
	// ErrWithdrawn: a start (queued → running) found the request withdrawn
	// and cancelled the job instead. It is also an ErrConflict.
	ErrWithdrawn = fmt.Errorf("%w: request withdrawn, job cancelled", ErrConflict)
	// ErrTruncated: a dead letter keeps only the start of its entry (it was
	// over Config.DLQEntryBytes), so it cannot be replayed faithfully.
	ErrTruncated = errors.New("broker: dead letter truncated")
)
