package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// taskSpec is everything needed to run a task's process and record it:
// the provider builds it in Start and either runs it itself or hands it to
// a supervisor as JSON. Argv and Env are lists, never a shell string.
type taskSpec struct {
	Provider  string            `json:"provider"`
	TaskID    string            `json:"task_id"`
	Argv      []string          `json:"argv"`
	Env       []string          `json:"env"`
	Cwd       string            `json:"cwd"`
	Timeout   time.Duration     `json:"timeout,omitempty"`
	KillGrace time.Duration     `json:"kill_grace"`
	StartedAt time.Time         `json:"started_at"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Credential is the user the task's process switches to; nil runs it
	// as the process that starts it.
	Credential *credential `json:"credential,omitempty"`
	// Limits are set on the task's process before it runs (after, for a
	// task watched in-process; see applyChildLimits).
	Limits []rlimit `json:"limits,omitempty"`
	// MaxOutput caps each of stdout and stderr, in bytes; negative: no
	// cap; zero: the default.
	MaxOutput int64 `json:"max_output"`
}

// procIdentity names one process for as long as it lives: pid plus its
// start time in clock ticks after boot. Zero means none.
type procIdentity struct {
	PID        int
	StartTicks uint64
}

// startTask starts spec's process in a new process group, as spec's user,
// with its stdout and stderr captured into the given files (see capture;
// when inProcess, the capture takes the files over and closes them), and
// records its identity (and sup's, the supervisor's, when it has one) in
// dir/state. The process runs even if the record cannot be written; warn
// says so.
//
// A supervisor has set spec.Limits on itself already, for the task to
// inherit. For a task watched in-process (inProcess) they are set right
// after it starts, which leaves it a moment under the provider's own
// limits, and needs CAP_SYS_RESOURCE when the task runs as another user:
// without it the task runs under the provider's limits, and warn says so.
func startTask(dir string, spec *taskSpec, stdout, stderr *os.File, sup procIdentity, inProcess bool) (cmd *exec.Cmd, out *capture, warn, err error) {
	if len(spec.Argv) == 0 || !filepath.IsAbs(spec.Argv[0]) {
		if inProcess {
			stdout.Close()
			stderr.Close()
		}
		return nil, nil, nil, fmt.Errorf("%w: argv[0] must be an absolute path", providers.ErrInvalidTask)
	}
	limit := spec.MaxOutput
	if limit == 0 {
		limit = DefaultMaxOutputBytes // a spec from a provider that did not say
	}
	out, pipes, err := startCapture([2]*os.File{stdout, stderr}, limit, inProcess)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("output pipes: %w", err)
	}
	cmd = exec.Command(spec.Argv[0], spec.Argv[1:]...) // absolute: no PATH lookup
	cmd.Dir = spec.Cwd
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would mean "inherit ours"
	}
	cmd.Stdout, cmd.Stderr = pipes[0], pipes[1] // files, so exec starts no copying goroutines
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential.sys()}
	err = cmd.Start()
	pipes[0].Close() // the task has its own copies
	pipes[1].Close()
	if err != nil {
		out.wait(0)
		return nil, nil, nil, err
	}
	if inProcess {
		if lerr := applyChildLimits(cmd.Process.Pid, spec.Limits); lerr != nil {
			warn = fmt.Errorf("resource limits not applied; the task runs under the provider's own (set SupervisorPath, whose supervisor applies them without CAP_SYS_RESOURCE): %w", lerr)
		}
	}
	rec := stateRecord{
		Version: recordVersion, Provider: spec.Provider, TaskID: spec.TaskID,
		PID: cmd.Process.Pid, PGID: cmd.Process.Pid, StartedAt: spec.StartedAt, Labels: spec.Labels,
		SupervisorPID: sup.PID, SupervisorStartTicks: sup.StartTicks,
	}
	// The child is not reaped before supervise runs, so /proc/<pid> is there.
	if _, _, ticks, err := procStat(rec.PID); err == nil {
		rec.StartTicks = ticks
	}
	rec.BootID, _ = bootID()
	if serr := writeRecord(dir, fileState, rec); serr != nil {
		warn = errors.Join(warn, fmt.Errorf("task state not recorded; a restarted adapter will report it lost: %w", serr))
	}
	return cmd, out, warn, nil
}

// supervise watches a started task process until it, and every other
// process of its group, has ended, and returns the task's outcome. It stops
// the task (SIGTERM and SIGCONT to the group, SIGKILL after KillGrace) when
// a cause arrives on stop or when deadline passes (if spec.Timeout is set).
// Processes the task leaves behind when it ends on its own are stopped the
// same way: they are part of the task. Once the group is empty it waits
// (up to KillGrace) for out to take the last of the output. now stamps
// FinishedAt.
//
// It runs in the provider's waiter goroutine when there is no supervisor,
// and in the supervisor process otherwise; either way it is the one place
// that turns a wait status into an outcome.
func supervise(cmd *exec.Cmd, out *capture, spec *taskSpec, deadline time.Time, stop <-chan error, now func() time.Time, log *slog.Logger) exitRecord {
	pgid := cmd.Process.Pid // Setpgid makes a group named after the leader
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // ends when the leader is reaped

	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	var (
		cause   error // non-nil once we asked the task to stop
		askedAt time.Time
		kill    <-chan time.Time // fires KillGrace after we asked
		waitErr error
	)
	ask := func(c error) {
		if cause != nil {
			return
		}
		cause, askedAt = c, time.Now()
		terminate(pgid) // the leader is not reaped yet, so the group is ours
		t := time.NewTimer(spec.KillGrace)
		kill = t.C
	}
	for running := true; running; {
		select {
		case waitErr = <-waited:
			running = false
		case c := <-stop:
			ask(c)
		case <-timeout:
			ask(errTimedOut)
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			kill = nil
		}
	}

	grace := spec.KillGrace
	if cause != nil {
		grace -= time.Since(askedAt) // the group's grace started when we asked
	} else if groupAlive(pgid) {
		terminate(pgid) // it ended on its own but left processes behind
	}
	// The leader is reaped, so the group ID could in principle be reused by
	// a new group; Linux does not hand out a pid while a group of that ID
	// has members, which leaves only the instant after the last one exits.
	if err := drainGroup(context.Background(), pgid, grace); err != nil {
		log.Warn("task's process group not cleared", "err", err)
	}
	st := outcome(cmd.ProcessState, waitErr, cause, spec.Timeout)
	st.StdoutDropped, st.StderrDropped = out.wait(spec.KillGrace)
	st.StartedAt, st.FinishedAt = spec.StartedAt, now()
	return exitRecordOf(st)
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

// terminate asks every process in the group to end. SIGCONT follows
// SIGTERM so that a suspended group can act on it.
func terminate(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// errSurvivors: processes outlived SIGKILL (stuck in the kernel, say).
var errSurvivors = errors.New("processes in the group survived SIGKILL")

// drainGroup waits until process group pgid has no live member, sending
// SIGKILL to the group once grace has passed, then waiting up to grace
// (at least a second) more. It polls because a process group cannot be
// waited on.
func drainGroup(ctx context.Context, pgid int, grace time.Duration) error {
	if !groupAlive(pgid) {
		return nil
	}
	deadline := time.NewTimer(max(grace, 0))
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	killed := false
	for groupAlive(pgid) {
		select {
		case <-deadline.C:
			if killed {
				return errSurvivors
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			killed = true
			deadline.Reset(max(grace, time.Second))
		case <-tick.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}
