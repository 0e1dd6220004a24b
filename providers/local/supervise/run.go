package supervise

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
)

// ErrTimedOut is the stop cause of a task that ran past its Timeout.
var ErrTimedOut = errors.New("timed out")

// ErrBadArgv: the Spec's argv[0] is missing or not an absolute path.
var ErrBadArgv = errors.New("argv[0] must be an absolute path")

// Start starts spec's process in a new process group and in its cgroup
// (spec.Cgroup, made here or taken from spares, which may be nil; see
// StartIn), as spec's user, with its stdout and stderr captured into the
// given files (when inProcess, the capture takes the files over and
// closes them), and records its identity (and sup's, the supervisor's,
// when it has one) in dir/state. The process runs even if the record
// cannot be written; warn says so.
//
// A supervisor has set spec.Limits on itself already, for the task to
// inherit. For a task watched in-process (inProcess) they are set right
// after it starts, which leaves it a moment under the provider's own
// limits, and needs CAP_SYS_RESOURCE when the task runs as another user:
// without it the task runs under the provider's limits, and warn says so.
func Start(dir string, spec *Spec, stdout, stderr *os.File, sup ProcIdentity, spares *Spares, inProcess bool) (cmd *exec.Cmd, out *Capture, warn, err error) {
	if len(spec.Argv) == 0 || !filepath.IsAbs(spec.Argv[0]) {
		if inProcess {
			stdout.Close()
			stderr.Close()
		}
		return nil, nil, nil, ErrBadArgv
	}
	limit := spec.MaxOutput
	if limit == 0 {
		limit = DefaultMaxOutputBytes // a spec from a provider that did not say
	}
	// No start without evidence: room for the state record is taken
	// before the task starts, so a full (or read-only) work directory
	// fails the start cleanly (the job goes back to the queue to run
	// elsewhere) rather than leaving a task that runs with no record a
	// restarted adapter could find (issue 11, defect 2).
	reserve := filepath.Join(dir, FileState+".reserve")
	if rerr := os.WriteFile(reserve, make([]byte, stateReserve+len(spec.Note)), 0o600); rerr != nil {
		_ = os.Remove(reserve)
		if inProcess {
			stdout.Close()
			stderr.Close()
		}
		return nil, nil, nil, fmt.Errorf("no room for the task's state record, so it was not started: %w", rerr)
	}
	out, pipes, err := startCapture([2]*os.File{stdout, stderr}, limit, inProcess)
	if err != nil {
		_ = os.Remove(reserve)
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
		err = spares.Create(spec.Cgroup)
	}
	if err == nil {
		err = StartIn(cmd, spec.Cgroup, setLimits)
		if err != nil && spec.Cgroup != nil {
			_ = spec.Cgroup.Dirs.Remove()
		}
	}
	pipes[0].Close() // the task has its own copies
	pipes[1].Close()
	if err != nil {
		_ = os.Remove(reserve)
		out.wait(0)
		return nil, nil, nil, err
	}
	if lerr != nil {
		warn = fmt.Errorf("resource limits not applied; the task runs under the provider's own (set SupervisorPath, whose supervisor applies them without CAP_SYS_RESOURCE): %w", lerr)
	}
	rec := StateRecord{
		Version: RecordVersion, Provider: spec.Provider, TaskID: spec.TaskID,
		PID: cmd.Process.Pid, PGID: cmd.Process.Pid, StartedAt: spec.StartedAt, Labels: spec.Labels, Note: spec.Note,
		SupervisorPID: sup.PID, SupervisorStartTicks: sup.StartTicks, SupervisorServer: sup.Server,
	}
	if spec.Cgroup != nil {
		rec.Cgroups = spec.Cgroup.Dirs
	}
	// The child is not reaped before Supervise runs, so /proc/<pid> is there.
	if _, _, ticks, err := ProcStat(rec.PID); err == nil {
		rec.StartTicks = ticks
	}
	rec.BootID, _ = BootID()
	// Durable (synced) before anyone hears that the task started: the
	// state record is the evidence that it did. A restarted adapter that
	// finds a task directory without one reports "never started"
	// (providers.ErrUnknownHandle), on which the agent puts the job back in
	// the queue and runs it again; so if the machine lost power right
	// after Start was reported and the record had not reached the disk, a
	// task that ran would run a second time. With it on disk the task is
	// reported lost instead (the boot ID differs), and only requeue_lost
	// runs it again. This is the one fsync left on the start path.
	// It is written into the reservation, which becomes the record: it
	// fits in that room, and no file is made or unlinked for it.
	if serr := syncRecordFrom(dir, filepath.Base(reserve), FileState, rec); serr != nil {
		_ = os.Remove(reserve)
		// Without the evidence the task must not run on: a restarted
		// adapter would find no trace of it and run the job again beside
		// it. It is killed at once, before the start is reported (it may
		// have run for that instant), and the start fails.
		tp := TaskProcs{PGID: cmd.Process.Pid}
		if spec.Cgroup != nil {
			tp.Cgroup = spec.Cgroup.Dirs
		}
		tp.Kill()
		_ = cmd.Wait()
		_ = Drain(context.Background(), tp, spec.KillGrace)
		if spec.Cgroup != nil {
			_ = spec.Cgroup.Dirs.Remove()
		}
		out.wait(0)
		return nil, nil, nil, fmt.Errorf("task state not recorded, so the task was killed as it started: %w", serr)
	}
	return cmd, out, warn, nil
}

// stateReserve is the room Start takes for a task's state record before
// the task starts, beyond its Note: more than any state record needs.
const stateReserve = 8 << 10

// Supervise watches a started task process until it, and every other
// process of its group and cgroup, has ended, and returns the task's
// outcome. It stops the task (SIGTERM and SIGCONT to the group and the
// cgroup, SIGKILL to both after KillGrace) when a cause arrives on stop or
// when deadline passes (if spec.Timeout is set). Processes the task leaves
// behind when it ends on its own are stopped the same way: they are part
// of the task. Once they are all gone it reads the cgroup's OOM kills,
// removes the cgroup (or keeps it in spares: Spares.Release), and waits
// (up to KillGrace) for out to take the last of the output. now stamps
// FinishedAt.
//
// It runs in the provider's waiter goroutine when there is no supervisor,
// and in the supervisor process otherwise; either way it is the one place
// that turns a wait status into an outcome.
func Supervise(cmd *exec.Cmd, out *Capture, spec *Spec, spares *Spares, deadline time.Time, stop <-chan error, now func() time.Time, log *slog.Logger) ExitRecord {
	procs := TaskProcs{PGID: cmd.Process.Pid} // Setpgid makes a group named after the leader
	if spec.Cgroup != nil {
		procs.Cgroup = spec.Cgroup.Dirs
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
		procs.Terminate() // the leader is not reaped yet, so the group is ours
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
			ask(ErrTimedOut)
		case <-kill:
			procs.Kill()
			kill = nil
		}
	}

	grace := spec.KillGrace
	left := true // processes may be left: Drain looks
	if cause != nil {
		grace -= time.Since(askedAt) // the group's grace started when we asked
	} else if left = procs.Alive(); left {
		procs.Terminate() // it ended on its own but left processes behind
	}
	// The leader is reaped, so the group ID could in principle be reused by
	// a new group; Linux does not hand out a pid while a group of that ID
	// has members, which leaves only the instant after the last one exits.
	// Nothing was left (the common case): Drain would only read the
	// cgroup's process list a second time.
	var drained error
	if left {
		drained = Drain(context.Background(), procs, grace)
	}
	if drained != nil {
		log.Warn("task's processes not cleared", "err", drained)
	}
	rec := outcome(cmd.ProcessState, waitErr, cause, spec.Timeout)
	if spec.Cgroup != nil {
		oomOutcome(&rec, cmd.ProcessState, procs.Cgroup, spec.Cgroup.MemoryBytes)
		if drained == nil {
			// A task that ended on its own and left nothing running may
			// leave its cgroup to the next (a supervisor server's spares).
			if err := spares.Release(spec.Cgroup, cause == nil && !left && cmd.ProcessState != nil); err != nil {
				log.Warn("task's cgroup not removed; Prune retries", "err", err)
			}
		} else {
			spec.Cgroup.Dirs.closeFiles() // left to Prune
		}
	}
	rec.StdoutDropped, rec.StderrDropped = out.wait(spec.KillGrace)
	rec.StartedAt, rec.FinishedAt = spec.StartedAt, now()
	return rec
}

// oomOutcome marks a failed task OOMKilled when the kernel's OOM killer
// killed any of its processes (the leader, or a child whose death failed
// the task): memory.events or memory.oom_control count the kills. A v1
// kernel too old to count them (before 4.13) is taken at its word when
// the task hit its limit and its leader died of SIGKILL. A task stopped
// or timed out keeps that cause.
func oomOutcome(rec *ExitRecord, ps *os.ProcessState, cg CgroupSet, limit int64) {
	if rec.State != StateFailed || rec.TimedOut {
		return
	}
	kills, known, hits := cg.OOMKills()
	if !known && hits > 0 && ps != nil {
		if ws, _ := ps.Sys().(syscall.WaitStatus); ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			kills = 1
		}
	}
	if kills == 0 {
		return
	}
	rec.OOMKilled = true
	what := "its memory limit"
	if limit > 0 {
		what = fmt.Sprintf("its memory limit of %d bytes", limit)
	}
	rec.Error = fmt.Sprintf("out of memory: the kernel killed the task for going over %s (%s)", what, rec.Error)
}

// outcome classifies how a task ended. cause is non-nil only when we
// signalled it (stop, close, timeout).
func outcome(ps *os.ProcessState, waitErr, cause error, timeout time.Duration) ExitRecord {
	rec := ExitRecord{Version: RecordVersion}
	var ws syscall.WaitStatus
	if ps != nil {
		ws, _ = ps.Sys().(syscall.WaitStatus)
		if ps.Exited() {
			code := ps.ExitCode()
			rec.ExitCode = &code
		}
	}
	switch {
	case errors.Is(cause, ErrTimedOut):
		rec.State, rec.TimedOut = StateFailed, true
		rec.Error = fmt.Sprintf("timeout: ran longer than %v", timeout)
	case cause != nil:
		rec.State, rec.Error = StateCancelled, cause.Error()
	case ps == nil:
		rec.State, rec.Error = StateFailed, fmt.Sprintf("wait: %v", waitErr)
	case ps.Success():
		rec.State = StateSucceeded
	case ws.Signaled():
		rec.State, rec.Error = StateFailed, "killed by signal: "+ws.Signal().String()
	default:
		rec.State, rec.Error = StateFailed, ps.String()
	}
	return rec
}

// TaskProcs is every process of a task: its process group and, when it
// is confined, its cgroup, which also holds those that left the group
// (setsid, a double fork into a new group).
type TaskProcs struct {
	PGID   int       // 0: none (only the cgroup is left to clear)
	Cgroup CgroupSet // nil: unconfined
}

// Alive reports whether any process of the task is alive.
func (tp TaskProcs) Alive() bool { return tp.PGID > 0 && GroupAlive(tp.PGID) || tp.Cgroup.Alive() }

// Terminate asks every process of the task to end. SIGCONT follows
// SIGTERM so that a suspended task can act on it.
func (tp TaskProcs) Terminate() {
	if tp.PGID > 0 {
		_ = syscall.Kill(-tp.PGID, syscall.SIGTERM)
		_ = syscall.Kill(-tp.PGID, syscall.SIGCONT)
	}
	tp.Cgroup.Signal(syscall.SIGTERM)
	tp.Cgroup.Signal(syscall.SIGCONT)
}

// Kill kills every process of the task.
func (tp TaskProcs) Kill() {
	if tp.PGID > 0 {
		_ = syscall.Kill(-tp.PGID, syscall.SIGKILL)
	}
	tp.Cgroup.Kill()
}

// errSurvivors: processes outlived SIGKILL (stuck in the kernel, say).
var errSurvivors = errors.New("processes of the task survived SIGKILL")

// Drain waits until no process of the task is alive, killing them all
// once grace has passed, then waiting up to grace (at least a second)
// more; the cgroup is killed again on every tick meanwhile, for kills
// that cannot freeze it first. It polls because neither a process group
// nor a cgroup can be waited on. (It returns at once for a task whose
// processes are all gone, the common case: a leader that ended on its
// own with nothing left behind.)
func Drain(ctx context.Context, tp TaskProcs, grace time.Duration) error {
	if !tp.Alive() {
		return nil
	}
	deadline := time.NewTimer(max(grace, 0))
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	killed := false
	for tp.Alive() {
		select {
		case <-deadline.C:
			if killed {
				return errSurvivors
			}
			tp.Kill()
			killed = true
			deadline.Reset(max(grace, time.Second))
		case <-tick.C:
			if killed {
				tp.Cgroup.Kill()
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}
