package local

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// Suspend pauses every process of the task with SIGSTOP. Its timeout keeps
// running; Stop still works (SIGTERM is followed by SIGCONT).
func (p *Provider) Suspend(ctx context.Context, h providers.Handle) error {
	return p.signal(h, syscall.SIGSTOP, "suspend")
}

// Resume continues a suspended task with SIGCONT.
func (p *Provider) Resume(ctx context.Context, h providers.Handle) error {
	return p.signal(h, syscall.SIGCONT, "resume")
}

// Signal sends sig to every process of the task.
func (p *Provider) Signal(ctx context.Context, h providers.Handle, sig syscall.Signal) error {
	return p.signal(h, sig, "signal "+sig.String())
}

func (p *Provider) signal(h providers.Handle, sig syscall.Signal, op string) error {
	id, err := p.handleID(h)
	if err != nil {
		return fmt.Errorf("local: %s: %w", op, err)
	}
	if err := p.signalTask(id, sig); err != nil {
		return fmt.Errorf("local: %s %s: %w", op, id, err)
	}
	return nil
}

func (p *Provider) signalTask(id string, sig syscall.Signal) error {
	p.mu.Lock()
	tk := p.tasks[id]
	if tk != nil {
		// mu is held across kill(2) so that the task cannot be marked final
		// in between.
		defer p.mu.Unlock()
		if tk.final != nil {
			return providers.ErrNotRunning
		}
		if err := syscall.Kill(-tk.pgid, sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return providers.ErrNotRunning
			}
			return err
		}
		switch sig {
		case syscall.SIGSTOP:
			tk.suspended = true
		case syscall.SIGCONT:
			tk.suspended = false
		}
		return nil
	}
	p.mu.Unlock()

	// Not running in this instance: finished, or started by an earlier
	// adapter process.
	st, err := p.pollDisk(id)
	if err != nil {
		return err
	}
	if st.State.Terminal() {
		return providers.ErrNotRunning
	}
	rec, err := supervise.ReadState(p.taskDir(id))
	if err != nil {
		return err
	}
	// Only while the leader itself is provably the task: a supervised task
	// whose leader has ended is still "running" while its supervisor clears
	// up, but its group ID is no longer safe to signal.
	if identify(rec).leader == 0 {
		return providers.ErrNotRunning
	}
	if err := syscall.Kill(-rec.PGID, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return providers.ErrNotRunning
		}
		return err
	}
	return nil
}
