package providers

import (
	"context"
	"encoding/json"
	"time"
)

// Provider runs tasks on one kind of backend. Implementations are safe for
// concurrent use. Each one declares var _ providers.Provider = (*Provider)(nil).
type Provider interface {
	// Start launches t and returns without waiting for it to end. ctx bounds
	// the launch only, never the task's life; a task runs until it exits,
	// its Timeout passes, or Stop is called. A Task.ID may be started only
	// once per provider: retries use a new ID.
	Start(ctx context.Context, t Task) (Handle, error)

	// Poll reports the task's current Status. It returns ErrUnknownHandle
	// when the provider has no record of h; a task it knows about but can
	// no longer observe is reported as StateLost, not as an error.
	Poll(ctx context.Context, h Handle) (Status, error)

	// Stop cancels the task and waits, bounded by ctx, for it to end; after
	// a nil return Poll reports a terminal state, StateCancelled unless the
	// task had already finished. Stopping a finished, cancelled or lost task
	// is a no-op, so Stop may be called any number of times.
	Stop(ctx context.Context, h Handle) error
}

// Task is one attempt at running a job: plain data, filled in by the
// adapter from a plan placement. Nothing here is a shell string.
type Task struct {
	// ID names the attempt; unique per provider, [A-Za-z0-9._-], at most
	// 128 bytes, starting with a letter or digit (a job ID plus attempt
	// number fits).
	ID string
	// Argv is the command. Argv[0] is an absolute path the caller resolved
	// from an operator template or allowlist; it is never looked up on PATH
	// and never passed to a shell.
	Argv []string
	// Template names the operator template Argv came from; empty when it
	// came from the allowlist (a request's own command line). A backend
	// may run only templates (providers/kube, by default).
	Template string
	// Image is the container image a container backend runs Argv in (the
	// template's image); empty means the provider's default. Backends that
	// run on the host ignore it.
	Image string
	// Priority is the job's priority, 0..9, 9 most urgent, for backends
	// that rank work themselves (providers/kube: a PriorityClass).
	Priority int
	// Env is the task's environment, laid over the provider's base
	// environment. Providers add COMPUTEBOARD_PAYLOAD (see Payload).
	Env map[string]string
	// Dir is the working directory, an absolute path; empty means a
	// provider-chosen per-task directory.
	Dir string
	// User is the account the task runs as on the backend: a user name or
	// a numeric user ID, resolved there (the local provider uses the
	// machine's user database). Empty means the provider's default; a
	// provider refuses a task it would have to run as root unless its
	// operator allowed that, and a task user it cannot switch to.
	User string
	// Resources is what the placement reserved for the task.
	Resources Resources
	// Placement is where the scheduler put the task: node, CPU set, NUMA
	// domain and devices. Providers confine the task to it where they can.
	Placement Placement
	// Timeout bounds the run time from Start; zero means none. A task that
	// runs past it is stopped and reported failed with TimedOut set.
	Timeout time.Duration
	// Payload is written to a file whose path the task finds in the
	// environment variable COMPUTEBOARD_PAYLOAD (the file exists, possibly
	// empty, for every task).
	Payload []byte
	// Labels are opaque key/values recorded with the task (job, account,
	// attempt, ...), for operators and for backends that index by label.
	Labels map[string]string
	// Note is an opaque JSON value (at most MaxNoteBytes) the provider
	// records with the task, before Start returns, and gives back with it
	// in Lister.Tasks: the caller's own evidence of what the task is for
	// (the agent's: the job's request, to remake a record Redis lost).
	Note json.RawMessage
}

// MaxNoteBytes bounds Task.Note.
const MaxNoteBytes = 1 << 20

// PayloadEnv is the environment variable that holds the payload file's path.
const PayloadEnv = "COMPUTEBOARD_PAYLOAD"

// Resources is a task's reservation. Whether it is enforced depends on the
// provider (see the provider's Confinement).
type Resources struct {
	CPUCores    float64 // fractional cores
	MemoryBytes int64   // bytes
}

// Placement is the scheduler's choice for one task.
type Placement struct {
	Node string   `json:"node"`
	CPUs []int    `json:"cpus,omitempty"` // CPU IDs the task may run on; empty = any of the node's
	NUMA int      `json:"numa"`           // NUMA domain; -1 = none chosen
	GPUs []string `json:"gpus,omitempty"` // whole GPUs by UUID
	MIG  []string `json:"mig,omitempty"`  // MIG instances by UUID
}

// Handle names a started task. It is a plain value that survives JSON and
// an adapter restart: a new provider instance given an old Handle re-attaches
// to the task or reports it lost.
type Handle struct {
	Provider string `json:"provider"` // the provider's configured name
	ID       string `json:"id"`       // provider-specific; the task ID for local
}

// String returns "provider/id", for logs.
func (h Handle) String() string { return h.Provider + "/" + h.ID }

// State is where a task is in its life. Terminal states never change.
type State string

// The task states.
const (
	StatePending   State = "pending"   // accepted, not yet running (queued in the backend)
	StateRunning   State = "running"   // running, or suspended (see Status.Suspended)
	StateSucceeded State = "succeeded" // exited with code 0
	StateFailed    State = "failed"    // non-zero exit, killed by a signal, timed out, or could not run
	StateCancelled State = "cancelled" // ended because Stop was called
	StateLost      State = "lost"      // the provider can no longer tell what happened to it
)

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateLost:
		return true
	}
	return false
}

// Status is a task's observed state, as of one Poll.
type Status struct {
	State State `json:"state"`
	// ExitCode is set when the process exited on its own terms (including
	// after a stop request it handled); nil when it was killed by a signal,
	// is still running, or is lost.
	ExitCode *int `json:"exit_code,omitempty"`
	// Error explains a failed, cancelled or lost task in words, for people.
	Error string `json:"error,omitempty"`
	// TimedOut is set when the task was stopped for running past its
	// Timeout; State is then StateFailed.
	TimedOut bool `json:"timed_out,omitempty"`
	// OOMKilled is set when the task was killed for going over its memory
	// limit; State is then StateFailed.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Suspended is set while a running task is paused by a Suspender.
	Suspended  bool      `json:"suspended,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// StdoutPath and StderrPath locate the captured output, in the
	// provider's namespace (a local path for the local provider).
	StdoutPath string `json:"stdout_path,omitempty"`
	StderrPath string `json:"stderr_path,omitempty"`
	// StdoutDropped and StderrDropped count the bytes of output the task
	// wrote past the provider's cap on each stream, which were discarded:
	// the file at StdoutPath (StderrPath) then holds exactly the first
	// cap bytes. Set once the task has ended; zero while it runs.
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
}

// OutputTruncated reports whether some of the task's output was dropped
// for going past the provider's cap.
func (s Status) OutputTruncated() bool { return s.StdoutDropped > 0 || s.StderrDropped > 0 }
