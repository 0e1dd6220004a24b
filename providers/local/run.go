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
	// Cgroup is the cgroup the task's process starts in; nil: unconfined.
	Cgroup *taskCgroup `json:"cgroup,omitempty"`
}

// procIdentity names one process for as long as it lives: pid plus its
// start time in clock ticks after boot. Zero means none.
type procIdentity struct {
	PID        int
	StartTicks uint64
}

// startTask starts spec's process in a new process group and in its
// cgroup (spec.Cgroup, made here; see startIn), as spec's user,
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
	var lerr error
	setLimits := func() { lerr = applyChildLimits(cmd.Process.Pid, spec.Limits) }
	if !inProcess {
		setLimits = nil
	}
	if spec.Cgroup != nil {
		err = spec.Cgroup.create()
	}
	if err == nil {
		err = startIn(cmd, spec.Cgroup, setLimits)
		if err != nil && spec.Cgroup != nil {
			_ = spec.Cgroup.Dirs.remove()
		}
	}
	pipes[0].Close() // the task has its own copies
	pipes[1].Close()
	if err != nil {
		out.wait(0)
		return nil, nil, nil, err
	}
	if lerr != nil {
		warn = fmt.Errorf("resource limits not applied; the task runs under the provider's own (set SupervisorPath, whose supervisor applies them without CAP_SYS_RESOURCE): %w", lerr)
	}
	rec := stateRecord{
		Version: recordVersion, Provider: spec.Provider, TaskID: spec.TaskID,
		PID: cmd.Process.Pid, PGID: cmd.Process.Pid, StartedAt: spec.StartedAt, Labels: spec.Labels,
		SupervisorPID: sup.PID, SupervisorStartTicks: sup.StartTicks,
	}
	if spec.Cgroup != nil {
		rec.Cgroups = spec.Cgroup.Dirs
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
// process of its group and cgroup, has ended, and returns the task's
// outcome. It stops the task (SIGTERM and SIGCONT to the group and the
// cgroup, SIGKILL to both after KillGrace) when a cause arrives on stop or
// when deadline passes (if spec.Timeout is set). Processes the task leaves
// behind when it ends on its own are stopped the same way: they are part
// of the task. Once they are all gone it reads the cgroup's OOM kills,
// removes the cgroup, and waits (up to KillGrace) for out to take the last
// of the output. now stamps FinishedAt.
//
// It runs in the provider's waiter goroutine when there is no supervisor,
// and in the supervisor process otherwise; either way it is the one place
// that turns a wait status into an outcome.
func supervise(cmd *exec.Cmd, out *capture, spec *taskSpec, deadline time.Time, stop <-chan error, now func() time.Time, log *slog.Logger) exitRecord {
	procs := taskProcs{pgid: cmd.Process.Pid} // Setpgid makes a group named after the leader
	if spec.Cgroup != nil {
		procs.cg = spec.Cgroup.Dirs
	}
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
		procs.terminate() // the leader is not reaped yet, so the group is ours
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
			procs.kill()
			kill = nil
		}
	}

	grace := spec.KillGrace
	if cause != nil {
		grace -= time.Since(askedAt) // the group's grace started when we asked
	} else if procs.alive() {
		procs.terminate() // it ended on its own but left processes behind
	}
	// The leader is reaped, so the group ID could in principle be reused by
	// a new group; Linux does not hand out a pid while a group of that ID
	// has members, which leaves only the instant after the last one exits.
	drained := drain(context.Background(), procs, grace)
	if drained != nil {
		log.Warn("task's processes not cleared", "err", drained)
	}
	st := outcome(cmd.ProcessState, waitErr, cause, spec.Timeout)
	if spec.Cgroup != nil {
		oomOutcome(&st, cmd.ProcessState, procs.cg, spec.Cgroup.MemoryBytes)
		if drained == nil {
			if err := procs.cg.remove(); err != nil {
				log.Warn("task's cgroup not removed; Prune retries", "err", err)
			}
		}
	}
	st.StdoutDropped, st.StderrDropped = out.wait(spec.KillGrace)
	st.StartedAt, st.FinishedAt = spec.StartedAt, now()
	return exitRecordOf(st)
}

// oomOutcome marks a failed task OOMKilled when the kernel's OOM killer
// killed any of its processes (the leader, or a child whose death failed
// the task): memory.events or memory.oom_control count the kills. A v1
// kernel too old to count them (before 4.13) is taken at its word when
// the task hit its limit and its leader died of SIGKILL. A task stopped
// or timed out keeps that cause.
func oomOutcome(st *providers.Status, ps *os.ProcessState, cg cgroupSet, limit int64) {
	if st.State != providers.StateFailed || st.TimedOut {
		return
	}
	kills, known, hits := cg.oomKills()
	if !known && hits > 0 && ps != nil {
		if ws, _ := ps.Sys().(syscall.WaitStatus); ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			kills = 1
		}
	}
	if kills == 0 {
		return
	}
	st.OOMKilled = true
	what := "its memory limit"
	if limit > 0 {
		what = fmt.Sprintf("its memory limit of %d bytes", limit)
	}
	st.Error = fmt.Sprintf("out of memory: the kernel killed the task for going over %s (%s)", what, st.Error)
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

// taskProcs is every process of a task: its process group and, when it
// is confined, its cgroup, which also holds those that left the group
// (setsid, a double fork into a new group).
type taskProcs struct {
	pgid int       // 0: none (only the cgroup is left to clear)
	cg   cgroupSet // nil: unconfined
}

func (tp taskProcs) alive() bool { return tp.pgid > 0 && groupAlive(tp.pgid) || tp.cg.alive() }

// terminate asks every process of the task to end.
func (tp taskProcs) terminate() {
	if tp.pgid > 0 {
		terminate(tp.pgid)
	}
	tp.cg.signal(syscall.SIGTERM)
	tp.cg.signal(syscall.SIGCONT)
}

// kill kills every process of the task.
func (tp taskProcs) kill() {
	if tp.pgid > 0 {
		_ = syscall.Kill(-tp.pgid, syscall.SIGKILL)
	}
	tp.cg.kill()
}

// terminate asks every process in the group to end. SIGCONT follows
// SIGTERM so that a suspended group can act on it.
func terminate(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// errSurvivors: processes outlived SIGKILL (stuck in the kernel, say).
var errSurvivors = errors.New("processes of the task survived SIGKILL")

// drain waits until no process of the task is alive, killing them all
// once grace has passed, then waiting up to grace (at least a second)
// more; the cgroup is killed again on every tick meanwhile, for kills
// that cannot freeze it first. It polls because neither a process group
// nor a cgroup can be waited on.
func drain(ctx context.Context, tp taskProcs, grace time.Duration) error {
	if !tp.alive() {
		return nil
	}
	deadline := time.NewTimer(max(grace, 0))
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	killed := false
	for tp.alive() {
		select {
		case <-deadline.C:
			if killed {
				return errSurvivors
			}
			tp.kill()
			killed = true
			deadline.Reset(max(grace, time.Second))
		case <-tick.C:
			if killed {
				tp.cg.kill()
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}
