package providers

import (
	"context"
	"syscall"
	"time"
)

// Optional abilities. Each is a small interface the adapter detects with a
// type assertion (if s, ok := p.(providers.Suspender); ok { ... }), so a new
// backend needs only the three Provider methods. Each method returns
// ErrUnknownHandle for a handle the provider does not know and ErrNotRunning
// for a task that has finished or is lost.
//
// Implemented today: Suspender and Signaler (providers/local).
// Later work (roadmap items 4 and 5): Checkpointer and Restorer; nothing
// implements them yet.

// Suspender pauses a running task in place and resumes it later: the
// "suspend/resume" preemption mode. A suspended task keeps its memory and
// still counts against its node; Timeout keeps running while it is paused.
type Suspender interface {
	Suspend(ctx context.Context, h Handle) error
	Resume(ctx context.Context, h Handle) error
}

// Signaler delivers a signal to every process of a task. It carries the job
// author's checkpoint protocol ("on SIGUSR1, write a checkpoint to the
// checkpoint directory") until Checkpointer exists.
type Signaler interface {
	Signal(ctx context.Context, h Handle, sig syscall.Signal) error
}

// Checkpointer takes a checkpoint of a running task and describes where it
// is. Later work: no provider implements it yet.
type Checkpointer interface {
	Checkpoint(ctx context.Context, h Handle) (Checkpoint, error)
}

// Restorer starts a task from a checkpoint instead of from scratch.
// Migration is Checkpoint on one provider (or node) followed by Restore on
// another that can read the checkpoint's Location; a provider must refuse a
// checkpoint it cannot really restore rather than fake it. Later work: no
// provider implements it yet.
type Restorer interface {
	Restore(ctx context.Context, t Task, cp Checkpoint) (Handle, error)
}

// Checkpoint describes one checkpoint, as data the adapter can store.
type Checkpoint struct {
	Provider string    `json:"provider"` // who took it
	TaskID   string    `json:"task_id"`  // the task it was taken from
	Location string    `json:"location"` // URI or path of the checkpoint data
	TakenAt  time.Time `json:"taken_at"`
	// Metadata is the verified metadata the checkpoint protocol records
	// (format, size, checksum, ...).
	Metadata map[string]string `json:"metadata,omitempty"`
}
