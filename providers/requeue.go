package providers

import "context"

// Requeuer puts a running task back in its backend's queue, to run again
// from the start under the same handle (the backend's own requeue, as
// Slurm's scontrol requeue): Poll reports it pending, then running again.
// Like the other abilities it returns ErrUnknownHandle for a handle the
// provider does not know and ErrNotRunning for a task that has ended.
// Implemented by providers/slurm.
type Requeuer interface {
	Requeue(ctx context.Context, h Handle) error
}
