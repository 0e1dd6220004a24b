package broker

import "errors"

// Sentinel errors; test with errors.Is. ErrInboxFull and ErrLeaseLost are
// declared with the inbox (inbox.go).
var (
	// ErrNotFound: no such job, held request or dead letter.
	ErrNotFound = errors.New("broker: not found")
	// ErrConflict: the id is already held (Inbox.Push), or a job is not in
	// the status a transition expects.
	ErrConflict = errors.New("broker: conflict")
)
