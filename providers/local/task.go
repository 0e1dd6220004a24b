package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// task is one child process started by this Provider instance.
type task struct {
	id        string
	dir       string
	cmd       *exec.Cmd
	pgid      int // the leader's pid: Setpgid makes a group named after it
	startedAt time.Time
	timeout   time.Duration

	ctx     context.Context         // the process context; its cause says who ended it
	cancel  context.CancelCauseFunc // stop with errStopped or errClosed; idempotent
	release context.CancelFunc      // frees the timeout timer

	// cancelAt is set by cmd.Cancel when the process context ended before
	// the process did, i.e. when we asked it to stop. Written by exec's
	// context watcher, read by wait after cmd.Wait.
	cancelAt atomic.Pointer[time.Time]

	done chan struct{} // closed by wait once final is set

	suspended bool              // guarded by Provider.mu
	final     *providers.Status // set once by wait; guarded by Provider.mu
}

// launch prepares the task directory and starts the process.
func (p *Provider) launch(ctx context.Context, t providers.Task) (_ *task, err error) {
	dir := p.taskDir(t.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: task ID already used (%s exists)", providers.ErrInvalidTask, dir)
		}
		return nil, err
	}
	defer func() {
		if err != nil { // the ID may be retried; the directory is ours, just made
			os.RemoveAll(dir)
		}
	}()
	payload := filepath.Join(dir, filePayload)
	if err := os.WriteFile(payload, t.Payload, 0o600); err != nil {
		return nil, err
	}
	stdout, err := createOutput(dir, fileStdout)
	if err != nil {
		return nil, err
	}
	defer stdout.Close() // the child has its own copy once started
	stderr, err := createOutput(dir, fileStderr)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()

	// The process outlives the Start call: its context keeps ctx's values
	// but not its cancellation.
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	release := context.CancelFunc(func() {})
	if t.Timeout > 0 {
		pctx, release = context.WithTimeoutCause(pctx, t.Timeout, errTimedOut)
	}
	tk := &task{
		id: t.ID, dir: dir, timeout: t.Timeout,
		ctx: pctx, cancel: cancel, release: release,
		done: make(chan struct{}),
	}
	cmd := exec.CommandContext(pctx, t.Argv[0], t.Argv[1:]...)
	cmd.Dir = t.Dir
	if cmd.Dir == "" {
		cmd.Dir = dir
	}
	cmd.Env = p.environ(t, payload)
	cmd.Stdout, cmd.Stderr = stdout, stderr // files, so exec starts no copying goroutines
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		now := time.Now()
		tk.cancelAt.Store(&now)
		terminate(cmd.Process.Pid)
		return nil
	}
	// After WaitDelay exec SIGKILLs the leader; wait then SIGKILLs the rest
	// of the group (see sweep).
	cmd.WaitDelay = p.grace
	if err := cmd.Start(); err != nil {
		cancel(nil)
		release()
		return nil, err
	}
	tk.cmd, tk.pgid, tk.startedAt = cmd, cmd.Process.Pid, p.clock.Now()

	rec := stateRecord{
		Version: recordVersion, Provider: p.name, TaskID: t.ID,
		PID: tk.pgid, PGID: tk.pgid, StartedAt: tk.startedAt, Labels: t.Labels,
	}
	// The child is not reaped before wait runs, so /proc/<pid> is there.
	if _, _, ticks, err := procStat(tk.pgid); err == nil {
		rec.StartTicks = ticks
	}
	rec.BootID, _ = bootID()
	if err := writeRecord(dir, fileState, rec); err != nil {
		// The task runs fine without it; only a restarted adapter loses it.
		p.log.Warn("task state not recorded; a restarted adapter will report it lost", "job", t.ID, "err", err)
	}
	return tk, nil
}

func createOutput(dir, name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// wait is the task's waiter goroutine: it reaps the process, clears out
// the rest of its process group, records the outcome and releases the
// slot. It ends within about 2×KillGrace of a stop or timeout.
func (p *Provider) wait(tk *task) {
	waitErr := tk.cmd.Wait()
	cause := context.Cause(tk.ctx) // read before our own cancel below
	grace := p.grace
	if at := tk.cancelAt.Load(); at != nil {
		grace -= time.Since(*at) // the group's grace started at cancel time
	} else {
		cause = nil // we never signalled it: it ended on its own...
		if groupAlive(tk.pgid) {
			terminate(tk.pgid) // ...but left processes behind
		}
	}
	// Leftovers (background children, or children that outlived the
	// leader) are part of the task and end with it. The leader is reaped,
	// so the group ID could in principle be reused by a new group; Linux
	// does not hand out a pid while a group of that ID has members, which
	// leaves only the instant after the last member exits.
	if err := p.drainGroup(context.Background(), tk.pgid, grace); err != nil {
		p.log.Warn("task's process group not cleared", "job", tk.id, "err", err)
	}
	tk.cancel(nil)
	tk.release()

	st := outcome(tk.cmd.ProcessState, waitErr, cause, tk.timeout)
	st.StartedAt, st.FinishedAt = tk.startedAt, p.clock.Now()
	st.StdoutPath, st.StderrPath = filepath.Join(tk.dir, fileStdout), filepath.Join(tk.dir, fileStderr)
	recorded := writeRecord(tk.dir, fileExit, exitRecordOf(st))
	if recorded != nil {
		// Kept in memory instead; only a restarted adapter loses it.
		p.log.Warn("task outcome not recorded; a restarted adapter will report it lost", "job", tk.id, "err", recorded)
	}
	p.mu.Lock()
	tk.final = &st
	p.running--
	if recorded == nil {
		delete(p.tasks, tk.id)
	}
	p.mu.Unlock()
	close(tk.done)
	p.log.Debug("task ended", "job", tk.id, "state", st.State, "error", st.Error)
}

// outcome classifies how a task ended. cause is non-nil only when we
// signalled it (stop, close, timeout).
func outcome(ps *os.ProcessState, waitErr, cause error, timeout time.Duration) providers.Status {
	var st providers.Status
	var ws syscall.WaitStatus
	if ps != nil {
		ws, _ = ps.Sys().(syscall.WaitStatus)
		if ps.Exited() {
			code := ps.ExitCode()
			st.ExitCode = &code
		}
	}
	switch {
	case errors.Is(cause, errTimedOut):
		st.State, st.TimedOut = providers.StateFailed, true
		st.Error = fmt.Sprintf("timeout: ran longer than %v", timeout)
	case cause != nil:
		st.State, st.Error = providers.StateCancelled, cause.Error()
	case ps == nil:
		st.State, st.Error = providers.StateFailed, fmt.Sprintf("wait: %v", waitErr)
	case ps.Success():
		st.State = providers.StateSucceeded
	case ws.Signaled():
		st.State, st.Error = providers.StateFailed, "killed by signal: "+ws.Signal().String()
	default:
		st.State, st.Error = providers.StateFailed, ps.String()
	}
	return st
}

// status is the task's current Status. The caller holds Provider.mu.
func (tk *task) status() providers.Status {
	if tk.final != nil {
		return *tk.final
	}
	return providers.Status{
		State:      providers.StateRunning,
		Suspended:  tk.suspended,
		StartedAt:  tk.startedAt,
		StdoutPath: filepath.Join(tk.dir, fileStdout),
		StderrPath: filepath.Join(tk.dir, fileStderr),
	}
}
