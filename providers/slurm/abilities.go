package slurm

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// Suspend pauses the job with scontrol suspend: Slurm stops every process
// of the job (SIGSTOP) and keeps its resources. Poll reports it running
// with Suspended set. A job still pending cannot be suspended.
func (p *Provider) Suspend(ctx context.Context, h providers.Handle) error {
	return p.act(ctx, h, "suspend", p.tr.Suspend)
}

// Resume continues a suspended job with scontrol resume. Slurm reports it
// running at once; its processes continue a second or two later.
func (p *Provider) Resume(ctx context.Context, h providers.Handle) error {
	return p.act(ctx, h, "resume", p.tr.Resume)
}

// Signal sends sig to every process of the job with scancel --signal
// --full: the batch step (the task itself, which the batch script execs)
// and its children, and any other step.
func (p *Provider) Signal(ctx context.Context, h providers.Handle, sig syscall.Signal) error {
	return p.act(ctx, h, "signal "+sig.String(), func(ctx context.Context, id string) error {
		return p.tr.Signal(ctx, id, sig)
	})
}

// Requeue puts the job back in the queue (scontrol requeue) and makes it
// eligible again (scontrol update StartTime=now): Slurm otherwise holds a
// requeued job back for about two minutes (BeginTime). It waits until the
// job is pending and requeueDelay has passed since the requeue first:
// slurmd refuses to launch a job whose credential it revoked in the same
// second ("Job credential revoked"), and the job would end FAILED. The
// job keeps its ID, so the handle stays valid; its output files are
// appended to. The cluster must allow requeue (JobRequeue=1, Slurm's
// default).
func (p *Provider) Requeue(ctx context.Context, h providers.Handle) error {
	return p.act(ctx, h, "requeue", func(ctx context.Context, id string) error {
		eligible := time.Now().Add(requeueDelay)
		if err := p.tr.Requeue(ctx, id); err != nil {
			return err
		}
		// StartTime can be set only once the job is pending again (it
		// goes through COMPLETING first).
		r, err := p.resolve(h)
		if err != nil {
			return err
		}
		for {
			p.changed()
			st, _, err := p.poll(ctx, r, time.Now())
			if err != nil {
				return err
			}
			if st.State == providers.StatePending && !time.Now().Before(eligible) {
				return p.tr.Release(ctx, id)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("job %s requeued, but not pending yet (%s): %w", id, st.State, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// requeueDelay is how long after a requeue the job is made eligible.
const requeueDelay = 2 * time.Second

// act runs op on h's job if the job has not ended.
func (p *Provider) act(ctx context.Context, h providers.Handle, what string, op func(context.Context, string) error) error {
	id, _, err := p.running(ctx, h)
	if err == nil {
		err = op(ctx, id)
		p.changed()
	}
	if err != nil {
		return fmt.Errorf("slurm: %s %s: %w", what, h.ID, err)
	}
	return nil
}
