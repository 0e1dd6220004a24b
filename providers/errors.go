package providers

import "errors"

// Sentinel errors shared by every provider. Providers wrap them with
// context; callers check them with errors.Is.
var (
	// ErrUnknownHandle: the provider has no record of the handle (never
	// started here, started by a different provider, or its records were
	// removed). It is not the same as a lost task, which is a Status.
	ErrUnknownHandle = errors.New("unknown handle")

	// ErrInvalidTask: the Task cannot be run as given (empty or relative
	// argv[0], a malformed ID, an ID that was already used, a negative
	// timeout, ...). Retrying the same Task will fail again.
	ErrInvalidTask = errors.New("invalid task")

	// ErrTaskExists: the Task's ID was started here before (it comes
	// wrapped together with ErrInvalidTask). A caller that may be starting
	// the same attempt twice (after Redis lost the record of the first
	// start) polls that task instead: it is the attempt's run.
	ErrTaskExists = errors.New("task ID already used")

	// ErrAtCapacity: the provider is running as many tasks as it is
	// configured to; retry after one ends.
	ErrAtCapacity = errors.New("at capacity")

	// ErrNotRunning: an ability (suspend, resume, signal) was asked of a
	// task that has already finished or is lost.
	ErrNotRunning = errors.New("task not running")
)
