package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// task is one task started by this Provider instance. Its process is
// watched either by this process (cmd set: no supervisor configured) or by
// a supervisor process (sup set).
type task struct {
	id        string
	dir       string
	pgid      int                 // the task's process group: its leader's pid
	cgroup    supervise.CgroupSet // the task's cgroup; nil: unconfined
	startedAt time.Time

	// Without a supervisor: the task's own process, and what supervise
	// needs to watch it in the waiter goroutine.
	cmd      *exec.Cmd
	out      *supervise.Capture
	spec     *supervise.Spec
	deadline time.Time
	stopc    chan error // capacity 1; receives the first stop cause

	// With a supervisor: its process and the read end of its status pipe;
	// with a supervisor server, the task's connection to it (srv) instead
	// of the process and pipe.
	sup        *exec.Cmd
	statusPipe *os.File
	srv        *net.UnixConn
	statusIn   *bufio.Reader // owned by the waiter once Start returns

	stopOnce sync.Once
	cause    atomic.Pointer[error] // the first stop cause, once requested

	done chan struct{} // closed by wait once final is set

	suspended bool              // guarded by Provider.mu
	final     *providers.Status // set once by wait; guarded by Provider.mu
}

// noPayloadPath is $COMPUTEBOARD_PAYLOAD of a task without a payload.
const noPayloadPath = "/dev/null"

// launch prepares the task directory and starts the process, or the
// supervisor that starts it, as acct.
//
// The task directory belongs to the provider (mode 0700, or 0711 when the
// task runs as another user, who may pass through but not list it), and
// so do the records, stdout and stderr in it: the task writes its output
// to pipes, never to those files, and cannot replace any of them (with a
// symbolic link to a secret, or a FIFO that would hang a reader). The
// task's own part is the work directory inside (its default working
// directory and HOME) and its payload file (only a task with a payload
// has one), both owned by its user, mode 0700 and 0600.
func (p *Provider) launch(ctx context.Context, t providers.Task, acct account) (_ *task, err error) {
	dir := p.taskDir(t.ID)
	if acct.switchTo {
		if err := p.reachable(acct); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %w (%s exists)", providers.ErrInvalidTask, providers.ErrTaskExists, dir)
		}
		return nil, err
	}
	defer func() {
		// The ID may be retried: the directory is ours, just made. Unless
		// the task's process did start (its state is recorded right after):
		// a handshake cut short can come after that, and the directory is
		// then the only evidence that the task ran.
		if err != nil {
			if _, serr := os.Stat(filepath.Join(dir, supervise.FileState)); errors.Is(serr, fs.ErrNotExist) {
				os.RemoveAll(dir)
			}
		}
	}()
	if acct.switchTo && acct.uid != uint32(os.Geteuid()) {
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, err
		}
	}
	work := filepath.Join(dir, supervise.FileWork)
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, err
	}
	// A task without a payload reads an empty file all the same,
	// /dev/null, as the Kubernetes provider's do: no file is made for it
	// (on ext4 each file made costs the start path measurable CPU).
	payload, owned := noPayloadPath, []string{work}
	if len(t.Payload) > 0 {
		payload = filepath.Join(dir, supervise.FilePayload)
		if err := os.WriteFile(payload, t.Payload, 0o600); err != nil {
			return nil, err
		}
		owned = append(owned, payload)
	}
	if acct.switchTo {
		// Made just now in a directory only we can write to: nothing can
		// have swapped them for links.
		for _, f := range owned {
			if err := os.Lchown(f, int(acct.uid), int(acct.gid)); err != nil {
				return nil, err
			}
		}
	}
	stdout, err := createOutput(dir, supervise.FileStdout)
	if err != nil {
		return nil, err
	}
	stderr, err := createOutput(dir, supervise.FileStderr)
	if err != nil {
		stdout.Close()
		return nil, err
	}
	// A supervisor gets its own copies of the files; the capture of a task
	// watched in-process takes them over.
	handedOver := false
	defer func() {
		if !handedOver {
			stdout.Close()
			stderr.Close()
		}
	}()

	cwd := t.Dir
	if cwd == "" {
		cwd = work
	}
	spec := &supervise.Spec{
		Provider: p.name, TaskID: t.ID, Argv: t.Argv, Env: p.environ(t, payload, work, acct), Cwd: cwd,
		Timeout: t.Timeout, KillGrace: p.grace, StartedAt: p.clock.Now(), Labels: t.Labels, Note: t.Note,
		Credential: acct.credential(), Limits: p.limits, MaxOutput: p.maxOutput,
		Cgroup: p.cgroups.plan(t),
	}
	tk := &task{id: t.ID, dir: dir, startedAt: spec.StartedAt, done: make(chan struct{})}
	if spec.Cgroup != nil {
		tk.cgroup = spec.Cgroup.Dirs
	}
	if p.server != "" {
		if err := p.launchServed(ctx, tk, spec, stdout, stderr); err != nil {
			return nil, err
		}
		return tk, nil
	}
	if p.supervisor != "" {
		if err := p.launchSupervised(ctx, tk, spec, stdout, stderr); err != nil {
			return nil, err
		}
		return tk, nil
	}
	deadline := time.Now().Add(t.Timeout)
	handedOver = true
	cmd, out, warn, err := supervise.Start(dir, spec, stdout, stderr, supervise.ProcIdentity{}, nil, true)
	if err != nil {
		return nil, err
	}
	if warn != nil {
		// The task runs, with less than it should have.
		p.log.Warn("task started with a problem", "job", t.ID, "err", warn)
	}
	tk.cmd, tk.out, tk.spec, tk.deadline, tk.pgid = cmd, out, spec, deadline, cmd.Process.Pid
	tk.stopc = make(chan error, 1)
	return tk, nil
}

func createOutput(dir, name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// requestStop asks the task to stop, for cause (errStopped or errClosed);
// only the first request counts. It returns at once: the waiter, or the
// supervisor, stops the process group and records the outcome.
func (tk *task) requestStop(cause error) {
	select {
	case <-tk.done:
		return // nothing left to stop
	default:
	}
	tk.stopOnce.Do(func() {
		tk.cause.Store(&cause)
		if tk.srv != nil {
			_ = supervise.PublishRecord(tk.dir, supervise.FileStop, supervise.StopRecord{Version: supervise.RecordVersion, Cause: cause.Error(), RequestedAt: time.Now()}, false)
			_, _ = tk.srv.Write([]byte(supervise.StopLine))
			return
		}
		if tk.sup == nil {
			tk.stopc <- cause // capacity 1, one send
			return
		}
		// The record first: the supervisor reads it when the signal comes.
		// Should it fail, the signal alone still stops the task (cancelled,
		// with a vaguer reason).
		// Not synced: only the live supervisor reads it (see stopViaSupervisor).
		_ = supervise.PublishRecord(tk.dir, supervise.FileStop, supervise.StopRecord{Version: supervise.RecordVersion, Cause: cause.Error(), RequestedAt: time.Now()}, false)
		// A pidfd-backed handle: never another process, even once reaped.
		_ = tk.sup.Process.Signal(syscall.SIGTERM)
	})
}

// stopCause is the first stop cause requested, or nil.
func (tk *task) stopCause() error {
	if c := tk.cause.Load(); c != nil {
		return *c
	}
	return nil
}

// wait is the task's waiter goroutine: it waits for the task to end (by
// watching it, or its supervisor), publishes the outcome and releases the
// slot. It ends within about 2×KillGrace of a stop or timeout.
func (p *Provider) wait(tk *task) {
	var rec supervise.ExitRecord
	switch {
	case tk.srv != nil:
		rec = p.waitServed(tk)
	case tk.sup != nil:
		rec = p.waitSupervised(tk)
	default:
		rec = supervise.Supervise(tk.cmd, tk.out, tk.spec, nil, tk.deadline, tk.stopc, p.clock.Now, p.log.With("job", tk.id))
	}
	st, recorded, published := p.settle(tk.id, tk.dir, rec)
	p.mu.Lock()
	tk.final = &st
	p.running--
	if recorded {
		delete(p.tasks, tk.id)
	}
	p.mu.Unlock()
	close(tk.done)
	// Poll reports st from here on, and the outcome is on disk (or, when
	// it could not be put there, kept in memory).
	p.notices.Send(providers.Handle{Provider: p.name, ID: tk.id})
	p.log.Debug("task ended", "job", tk.id, "state", st.State, "error", st.Error)
	if published {
		// Synced after the notice, not before: see supervise.SyncPublished
		// for why an outcome need not be durable before it is reported.
		if err := supervise.SyncPublished(tk.dir, supervise.FileExit); err != nil {
			p.log.Warn("task outcome not synced", "job", tk.id, "err", err)
		}
	}
}

// settle publishes rec as the task's exit record unless one is there
// already, and returns the status that is now the task's for good: the
// published record, whoever wrote it (the supervisor, this waiter, or
// another adapter that stopped the task), so that every instance reports
// the same outcome. recorded is false when the outcome could not be put on
// disk; it is then kept in memory, and only a restarted adapter loses it.
// published is true when this call published it, unsynced (the caller
// syncs it once the end is announced).
func (p *Provider) settle(id, dir string, rec supervise.ExitRecord) (st providers.Status, recorded, published bool) {
	// A supervisor has published the outcome before it reported it (the
	// usual case): read, not written again.
	if disk, err := supervise.ReadExit(dir); err == nil {
		return exitStatus(disk, dir), true, false
	}
	err := supervise.PublishRecord(dir, supervise.FileExit, rec, false)
	if errors.Is(err, supervise.ErrRecordExists) {
		var disk supervise.ExitRecord
		if disk, err = supervise.ReadExit(dir); err == nil {
			return exitStatus(disk, dir), true, false
		}
	}
	if err != nil {
		p.log.Warn("task outcome not recorded; a restarted adapter will report it lost", "job", id, "err", err)
		return exitStatus(rec, dir), false, false
	}
	return exitStatus(rec, dir), true, true
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
		StdoutPath: filepath.Join(tk.dir, supervise.FileStdout),
		StderrPath: filepath.Join(tk.dir, supervise.FileStderr),
	}
}
