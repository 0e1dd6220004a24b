package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Suspender = (*Provider)(nil)
	_ providers.Signaler  = (*Provider)(nil)
	_ providers.Notifier  = (*Provider)(nil)
)

// Why a task was stopped (a timeout's is supervise.ErrTimedOut).
var (
	errStopped = errors.New("stopped")
	errClosed  = errors.New("provider closed")
)

// Provider runs tasks as child processes. Create it with New and end it
// with Close, which stops every task it still runs and waits for them.
type Provider struct {
	name    string
	workDir string
	env     map[string]string
	log     *slog.Logger
	clock   Clock
	grace   time.Duration
	max     int
	// supervisor is Config.SupervisorPath: "" to watch tasks in-process.
	supervisor string
	// server is the socket of the WorkDir's supervisor server
	// (Config.SupervisorServer): "" for a supervisor per task. serverMu
	// serializes starting one.
	server    string
	serverMu  sync.Mutex
	user      string             // Config.User
	allowRoot bool               // Config.AllowRoot
	accounts  accountCache       // users looked up lately (account)
	limits    []supervise.Rlimit // Config.Limits
	maxOutput int64              // Config.MaxOutputBytes; negative: no cap
	// cgroups is what New found it can enforce (Config.Cgroups); never
	// changes.
	cgroups *cgroupHost

	// wg counts waiter goroutines, one per started task (see wait). It is
	// incremented in reserve, under mu, so Close never races an Add.
	wg sync.WaitGroup

	mu sync.Mutex
	// tasks holds the tasks this instance started whose exit record is not
	// yet on disk; once it is, Poll and Stop read the disk like a restarted
	// adapter would. Guarded by mu.
	tasks map[string]*task
	// starting holds the IDs of tasks between reserve and the end of
	// launch, whose directories Prune must not touch. Guarded by mu.
	starting map[string]bool
	running  int  // started and not yet reaped, for MaxConcurrent; guarded by mu
	closed   bool // set by Close; guarded by mu

	// notices carries Notifier's notices; notify is set by Ended, after
	// which adopted tasks are watched (see watchAdopted). Guarded by mu.
	notices providers.EndedQueue
	notify  bool
	// adopted holds the watches of tasks this instance did not start, by
	// task ID: nil for a task that cannot be watched (then only polls see
	// its end). Guarded by mu.
	adopted map[string]*exitWatch
}

// New returns a Provider for cfg, creating cfg.WorkDir if needed.
func New(cfg Config) (*Provider, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Provider{
		name:    cfg.Name,
		workDir: cfg.WorkDir,
		env:     cfg.Env,
		log:     cfg.Logger.With("component", "provider", "provider", cfg.Name),
		clock:   cfg.Clock,
		grace:   cfg.KillGrace,
		max:     cfg.MaxConcurrent,
		tasks:   make(map[string]*task),
		adopted: make(map[string]*exitWatch),

		starting:   make(map[string]bool),
		supervisor: cfg.SupervisorPath,
		server:     serverSocket(cfg),
		user:       cfg.User,
		allowRoot:  cfg.AllowRoot,
		limits:     cfg.Limits.list(),
		maxOutput:  cfg.MaxOutputBytes,
		accounts:   newAccountCache(),
	}
	if cfg.User != "" {
		// Every task without a user of its own runs as this one.
		if _, err := p.account(""); err != nil {
			return nil, fmt.Errorf("local: config: User: %w", err)
		}
	}
	p.cgroups = detectCgroups(cfg.Cgroups, cfg.Name)
	// Said once, here; tasks then run with what there is.
	if c := p.cgroups.conf; c.Missing != "" {
		level := slog.LevelWarn
		if cfg.Cgroups.Disable {
			level = slog.LevelInfo
		}
		p.log.Log(context.Background(), level, "tasks are not fully confined", "enforced", c.Names(), "missing", c.Missing)
	} else {
		p.log.Debug("tasks confined in cgroups", "parent", cfg.Cgroups.Parent, "enforced", c.Names())
	}
	return p, nil
}

// Start launches t as a process in its own process group and cgroup (a
// child of this process, or of the task's supervisor) and returns once the
// process exists. ctx bounds the handshake with a supervisor.
func (p *Provider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	if err := validate(t); err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %q: %w", t.ID, err)
	}
	if err := ctx.Err(); err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	acct, err := p.account(t.User)
	if err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	if err := p.reserve(t.ID); err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	tk, err := p.launch(ctx, t, acct)
	if err != nil {
		p.unreserve(t.ID)
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	p.mu.Lock()
	delete(p.starting, t.ID)
	p.tasks[t.ID] = tk
	closed := p.closed
	p.mu.Unlock()
	go func() { // owned by p: counted in wg by reserve; ends when the process is reaped
		defer p.wg.Done()
		p.wait(tk)
	}()
	if closed { // Close ran while we launched; it did not see this task
		tk.requestStop(errClosed)
	}
	if tk.sup != nil {
		p.log.Debug("task started", "job", t.ID, "pid", tk.pgid, "supervisor", tk.sup.Process.Pid)
	} else {
		p.log.Debug("task started", "job", t.ID, "pid", tk.pgid)
	}
	return providers.Handle{Provider: p.name, ID: t.ID}, nil
}

// reserve claims a running slot and a waiter count, and marks task id as
// starting (so Prune leaves its directory alone).
func (p *Provider) reserve(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errClosed
	case p.max > 0 && p.running >= p.max:
		return fmt.Errorf("%w: %d tasks running", providers.ErrAtCapacity, p.running)
	}
	p.running++
	p.wg.Add(1)
	p.starting[id] = true
	return nil
}

// unreserve returns what reserve claimed, for a task that never started.
func (p *Provider) unreserve(id string) {
	p.mu.Lock()
	p.running--
	delete(p.starting, id)
	p.mu.Unlock()
	p.wg.Done()
}

// Poll reports the task's status: from memory for tasks this instance is
// running, otherwise from the task directory.
func (p *Provider) Poll(ctx context.Context, h providers.Handle) (providers.Status, error) {
	id, err := p.handleID(h)
	if err != nil {
		return providers.Status{}, fmt.Errorf("local: poll: %w", err)
	}
	p.mu.Lock()
	tk := p.tasks[id]
	var st providers.Status
	if tk != nil {
		st = tk.status()
	}
	p.mu.Unlock()
	if tk != nil {
		return st, nil
	}
	st, err = p.pollDisk(id)
	if err != nil {
		return providers.Status{}, fmt.Errorf("local: poll %s: %w", id, err)
	}
	switch {
	case st.State == providers.StateRunning:
		p.watchAdopted(id)
	case st.State.Terminal():
		p.unwatchEnded(id)
	}
	return st, nil
}

// startGrace is how long a task directory may exist without a state record
// before Poll concludes that the task never started.
const startGrace = time.Minute

// pollDisk reports a task this instance is not running: one it finished,
// or one started by an earlier adapter process.
func (p *Provider) pollDisk(id string) (providers.Status, error) {
	dir := p.taskDir(id)
	if ex, err := supervise.ReadExit(dir); err == nil {
		return exitStatus(ex, dir), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return providers.Status{}, err
	}
	st := providers.Status{
		StdoutPath: filepath.Join(dir, supervise.FileStdout),
		StderrPath: filepath.Join(dir, supervise.FileStderr),
	}
	rec, err := supervise.ReadState(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !supervise.Exists(dir):
		return providers.Status{}, providers.ErrUnknownHandle
	case errors.Is(err, fs.ErrNotExist):
		// A task's state is recorded right after its process starts. A
		// directory without one is a Start cut short (its adapter died
		// before the supervisor got the task): give a supervisor that is
		// still starting up startGrace, then report that the task never
		// started, so the caller may start the job afresh.
		fi, serr := os.Stat(dir)
		if serr == nil && p.clock.Now().Sub(fi.ModTime()) < startGrace {
			st.State = providers.StatePending
			return st, nil
		}
		return providers.Status{}, fmt.Errorf("%w: task directory has no state record: the task never started", providers.ErrUnknownHandle)
	case err != nil:
		return providers.Status{}, err
	case rec.Provider != p.name || rec.TaskID != id:
		return providers.Status{}, fmt.Errorf("%w: recorded for %s/%s", providers.ErrUnknownHandle, rec.Provider, rec.TaskID)
	}
	st.StartedAt = rec.StartedAt
	live := identify(rec)
	switch {
	case live.leader != 0:
		st.State, st.Suspended = providers.StateRunning, live.leader == 'T'
		return st, nil
	case live.supervisor:
		// The task's process has ended and its supervisor is clearing up
		// the group and recording the outcome.
		st.State = providers.StateRunning
		return st, nil
	}
	// Nothing is left to observe. The outcome may have been published
	// since we first looked (a supervisor records it before it exits).
	if ex, err := supervise.ReadExit(dir); err == nil {
		return exitStatus(ex, dir), nil
	}
	st.State, st.Error = providers.StateLost, live.why
	return st, nil
}

// liveness is what identify finds of a recorded task's processes.
type liveness struct {
	leader     byte   // the leader's /proc state letter if it is alive and provably the task; 0 if not
	supervisor bool   // the task's supervisor is alive and provably the one recorded
	why        string // when neither is: why the task cannot be observed
}

// identify checks whether the recorded processes are still alive and still
// the same processes (same boot, pid and start time).
func identify(r supervise.StateRecord) liveness {
	const unknown = "the adapter that started it is gone, so its exit status is unknown"
	boot, err := supervise.BootID()
	if err != nil || r.BootID == "" || r.StartTicks == 0 {
		return liveness{why: "process identity cannot be checked; " + unknown}
	}
	if boot != r.BootID {
		return liveness{why: "the machine rebooted since the task started"}
	}
	var live liveness
	if st, _, ticks, err := supervise.ProcStat(r.PID); err == nil && !supervise.Dead(st) && ticks == r.StartTicks {
		live.leader = st
	}
	live.supervisor = supervisorAlive(r)
	switch {
	case live.leader != 0 || live.supervisor:
	case r.SupervisorPID != 0:
		live.why = "the task's supervisor ended without recording its outcome"
	default:
		live.why = "process ended; " + unknown
	}
	return live
}

// supervisorAlive reports whether the recorded supervisor is alive and
// provably the same process. The caller has checked the boot ID.
func supervisorAlive(r supervise.StateRecord) bool {
	if r.SupervisorPID <= 0 || r.SupervisorStartTicks == 0 {
		return false
	}
	st, _, ticks, err := supervise.ProcStat(r.SupervisorPID)
	return err == nil && !supervise.Dead(st) && ticks == r.SupervisorStartTicks
}

// Stop cancels the task (SIGTERM to its process group and every process
// in its cgroup, SIGKILL to all of them after KillGrace) and waits,
// bounded by ctx, until it has ended.
func (p *Provider) Stop(ctx context.Context, h providers.Handle) error {
	id, err := p.handleID(h)
	if err != nil {
		return fmt.Errorf("local: stop: %w", err)
	}
	p.mu.Lock()
	tk := p.tasks[id]
	p.mu.Unlock()
	if tk == nil {
		if err := p.stopAdopted(ctx, id); err != nil {
			return fmt.Errorf("local: stop %s: %w", id, err)
		}
		p.notices.Send(h) // terminal now; a repeat if it already was
		return nil
	}
	tk.requestStop(errStopped) // no effect if it already ended or was asked to stop
	select {
	case <-tk.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("local: stop %s: %w", id, context.Cause(ctx))
	}
}

// stopAdopted stops a task this instance did not start (an earlier
// adapter process did, or another instance on the same WorkDir), if it is
// still alive and provably the same process.
//
// A supervised task is stopped through its supervisor, which records the
// real outcome (cancelled, with the exit code if the task exited on its
// own terms). Without a live supervisor the process group and cgroup are
// signalled directly; the exit status then cannot be known (this process
// is not the task's parent), so the task is recorded cancelled without an
// exit code.
func (p *Provider) stopAdopted(ctx context.Context, id string) error {
	st, err := p.pollDisk(id)
	if err != nil {
		return err
	}
	if st.State.Terminal() {
		return nil
	}
	dir := p.taskDir(id)
	rec, err := supervise.ReadState(dir)
	if err != nil {
		return err
	}
	if rec.SupervisorPID != 0 {
		recorded, err := p.stopViaSupervisor(ctx, dir, rec)
		if err != nil || recorded {
			return err
		}
		// The supervisor is gone and recorded nothing: stop what is left of
		// the task ourselves.
	}
	if identify(rec).leader == 0 {
		// It ended on its own since pollDisk looked: nothing was stopped,
		// and Poll now reports what is known of it (recorded or lost).
		return nil
	}
	// identify just checked rec.PID; the group cannot be reused while its
	// leader (even as a zombie) or any member exists.
	procs := supervise.TaskProcs{PGID: rec.PGID, Cgroup: rec.Cgroups}
	procs.Terminate()
	if err := supervise.Drain(ctx, procs, p.grace); err != nil {
		return err
	}
	if err := rec.Cgroups.Remove(); err != nil {
		p.log.Warn("task's cgroup not removed; Prune retries", "job", id, "err", err)
	}
	st.State, st.Suspended = providers.StateCancelled, false
	st.Error = "stopped after an adapter restart; exit status unknown"
	st.FinishedAt = p.clock.Now()
	// Synced: a rare path, and Stop returning is as good as reporting it.
	if err := supervise.PublishRecord(dir, supervise.FileExit, exitRecordOf(st), true); err != nil && !errors.Is(err, supervise.ErrRecordExists) {
		return err
	}
	return nil
}

// stopViaSupervisor asks a live supervisor to stop its task and waits,
// bounded by ctx, until the outcome is recorded. It reports false (and no
// error) if the supervisor is gone, or goes, without recording one.
func (p *Provider) stopViaSupervisor(ctx context.Context, dir string, rec supervise.StateRecord) (recorded bool, err error) {
	exitPath := filepath.Join(dir, supervise.FileExit)
	stop := supervise.StopRecord{Version: supervise.RecordVersion, Cause: errStopped.Error(), RequestedAt: p.clock.Now()}
	if rec.SupervisorServer {
		// The work directory's supervisor server: asked over its socket
		// (a signal would stop every task it runs), and watched on a tick
		// (it does not exit when the task ends).
		if !identify(rec).supervisor {
			return supervise.Exists(exitPath), nil
		}
		if err := supervise.PublishRecord(dir, supervise.FileStop, stop, false); err != nil && !errors.Is(err, supervise.ErrRecordExists) {
			p.log.Warn("stop request not recorded; the task will be stopped with a vaguer reason", "job", rec.TaskID, "err", err)
		}
		if !p.stopViaServer(ctx, dir) {
			return supervise.Exists(exitPath), nil
		}
		return awaitRecord(ctx, exitPath, rec)
	}
	// On Linux the handle is a pidfd, taken before the identity check: if
	// the check passes, the handle is that process and stays so.
	proc, err := os.FindProcess(rec.SupervisorPID)
	if err != nil {
		return false, nil
	}
	defer proc.Release()
	// So is this one, to learn of its exit (after it has recorded the
	// outcome) as it happens; nil where pidfds are not to be had.
	exited, _ := openPidfd(rec.SupervisorPID)
	if exited != nil {
		defer exited.Close() // ends the waitExit below, if still waiting
	}
	if !identify(rec).supervisor {
		return supervise.Exists(exitPath), nil
	}
	// Not synced (nor any stop record): it is read only by a supervisor
	// alive to get the signal, and whatever ends the machine ends that
	// supervisor too.
	if err := supervise.PublishRecord(dir, supervise.FileStop, stop, false); err != nil && !errors.Is(err, supervise.ErrRecordExists) {
		p.log.Warn("stop request not recorded; the task will be stopped with a vaguer reason", "job", rec.TaskID, "err", err)
	}
	_ = proc.Signal(syscall.SIGTERM)
	// A stop takes it up to about 2×KillGrace.
	if exited != nil {
		done := make(chan error, 1)
		go func() { done <- waitExit(exited) }() // ends when it exits, or when exited is closed
		select {
		case err := <-done:
			if err == nil {
				return supervise.Exists(exitPath), nil
			}
			// Cannot be polled after all: watch it on a tick below.
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
	// It is not our child, so it cannot be waited on: poll.
	return awaitRecord(ctx, exitPath, rec)
}

// awaitRecord waits, bounded by ctx, until the exit record at exitPath is
// there (true) or rec's supervisor is gone without one (false).
func awaitRecord(ctx context.Context, exitPath string, rec supervise.StateRecord) (bool, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if supervise.Exists(exitPath) {
			return true, nil
		}
		if !supervisorAlive(rec) {
			return supervise.Exists(exitPath), nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
}

// Close stops every task this instance is running and waits, bounded by
// ctx, for them to end. Start fails after Close. Tasks end as cancelled
// ("provider closed"); a later adapter reads them from disk.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	tasks := slices.Collect(maps.Values(p.tasks))
	watches := slices.Collect(maps.Values(p.adopted))
	p.mu.Unlock()
	for _, tk := range tasks {
		tk.requestStop(errClosed)
	}
	for _, w := range watches {
		w.close() // nil-safe
	}
	done := make(chan struct{})
	go func() { // ends when the last waiter ends; waiters end within about 2×KillGrace
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("local: close: %w", context.Cause(ctx))
	}
}

func (p *Provider) taskDir(id string) string { return filepath.Join(p.workDir, id) }

// handleID checks that h is one of ours and returns the task ID.
func (p *Provider) handleID(h providers.Handle) (string, error) {
	if h.Provider != p.name {
		return "", fmt.Errorf("%w: %s belongs to provider %q, not %q", providers.ErrUnknownHandle, h, h.Provider, p.name)
	}
	if !validID.MatchString(h.ID) {
		return "", fmt.Errorf("%w: %s: malformed task ID", providers.ErrUnknownHandle, h)
	}
	return h.ID, nil
}

// validID keeps task IDs safe as a single path element.
var validID = providers.ValidTaskID

func validate(t providers.Task) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := checkPlacement(t.Placement); err != nil {
		return fmt.Errorf("%w: %w", providers.ErrInvalidTask, err)
	}
	if err := checkEnv(t.Env); err != nil {
		return fmt.Errorf("%w: env: %w", providers.ErrInvalidTask, err)
	}
	return nil
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("bad variable %q", k)
		}
	}
	return nil
}

// environ builds the child's environment: the base; then HOME (the task's
// work directory), USER and LOGNAME (its user), which replace the
// adapter's own that the base may carry; then the task's; then what the
// provider itself sets. Nothing comes from this process's environment.
func (p *Provider) environ(t providers.Task, payload, home string, acct account) []string {
	m := make(map[string]string, len(p.env)+len(t.Env)+5)
	maps.Copy(m, p.env)
	m["HOME"] = home
	delete(m, "USER")
	delete(m, "LOGNAME")
	if acct.name != "" {
		m["USER"], m["LOGNAME"] = acct.name, acct.name
	}
	maps.Copy(m, t.Env)
	// A task sees the GPUs placed on it, in order (whole GPUs, then MIG
	// instances, by UUID), and none otherwise: "void" is the NVIDIA
	// container runtime's "no GPU", an empty list CUDA's.
	if gpus := append(slices.Clone(t.Placement.GPUs), t.Placement.MIG...); len(gpus) > 0 {
		m["CUDA_VISIBLE_DEVICES"] = strings.Join(gpus, ",")
		m["NVIDIA_VISIBLE_DEVICES"] = strings.Join(gpus, ",")
	} else {
		m["CUDA_VISIBLE_DEVICES"] = ""
		m["NVIDIA_VISIBLE_DEVICES"] = "void"
	}
	m[providers.PayloadEnv] = payload
	env := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
}

var _ providers.Prober = (*Provider)(nil)

// Probe checks that tasks can start here at all: it creates, writes,
// syncs and removes a file in the work directory, which fails on a full
// or read-only file system (what makes every start fail).
func (p *Provider) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.CreateTemp(p.workDir, ".probe-*")
	if err != nil {
		return fmt.Errorf("local: probe: %w", err)
	}
	name := f.Name()
	_, werr := f.Write([]byte("probe\n"))
	serr := f.Sync()
	cerr := f.Close()
	rerr := os.Remove(name)
	if err := errors.Join(werr, serr, cerr, rerr); err != nil {
		return fmt.Errorf("local: probe %s: %w", p.workDir, err)
	}
	return nil
}
