package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
)

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Suspender = (*Provider)(nil)
	_ providers.Signaler  = (*Provider)(nil)
)

// Why a task's process context was cancelled (context.Cause).
var (
	errStopped  = errors.New("stopped")
	errClosed   = errors.New("provider closed")
	errTimedOut = errors.New("timed out")
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

	// wg counts waiter goroutines, one per started task (see wait). It is
	// incremented in reserve, under mu, so Close never races an Add.
	wg sync.WaitGroup

	mu sync.Mutex
	// tasks holds the tasks this instance started whose exit record is not
	// yet on disk; once it is, Poll and Stop read the disk like a restarted
	// adapter would. Guarded by mu.
	tasks   map[string]*task
	running int  // started and not yet reaped, for MaxConcurrent; guarded by mu
	closed  bool // set by Close; guarded by mu
}

// New returns a Provider for cfg, creating cfg.WorkDir if needed.
func New(cfg Config) (*Provider, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Provider{
		name:    cfg.Name,
		workDir: cfg.WorkDir,
		env:     cfg.Env,
		log:     cfg.Logger.With("component", "provider", "provider", cfg.Name),
		clock:   cfg.Clock,
		grace:   cfg.KillGrace,
		max:     cfg.MaxConcurrent,
		tasks:   make(map[string]*task),
	}, nil
}

// Start launches t as a child process in its own process group and returns
// once the process exists.
func (p *Provider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	if err := validate(t); err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %q: %w", t.ID, err)
	}
	if err := ctx.Err(); err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	if err := p.reserve(); err != nil {
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	tk, err := p.launch(ctx, t)
	if err != nil {
		p.unreserve()
		return providers.Handle{}, fmt.Errorf("local: start %s: %w", t.ID, err)
	}
	p.mu.Lock()
	p.tasks[t.ID] = tk
	closed := p.closed
	p.mu.Unlock()
	go func() { // owned by p: counted in wg by reserve; ends when the process is reaped
		defer p.wg.Done()
		p.wait(tk)
	}()
	if closed { // Close ran while we launched; it did not see this task
		tk.cancel(errClosed)
	}
	p.log.Debug("task started", "job", t.ID, "pid", tk.pgid)
	return providers.Handle{Provider: p.name, ID: t.ID}, nil
}

// reserve claims a running slot and a waiter count.
func (p *Provider) reserve() error {
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
	return nil
}

// unreserve returns what reserve claimed, for a task that never started.
func (p *Provider) unreserve() {
	p.mu.Lock()
	p.running--
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
	return st, nil
}

// pollDisk reports a task this instance is not running: one it finished,
// or one started by an earlier adapter process.
func (p *Provider) pollDisk(id string) (providers.Status, error) {
	dir := p.taskDir(id)
	if ex, err := readExit(dir); err == nil {
		return ex.status(dir), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return providers.Status{}, err
	}
	st := providers.Status{
		StdoutPath: filepath.Join(dir, fileStdout),
		StderrPath: filepath.Join(dir, fileStderr),
	}
	rec, err := readState(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !exists(dir):
		return providers.Status{}, providers.ErrUnknownHandle
	case errors.Is(err, fs.ErrNotExist):
		st.State, st.Error = providers.StateLost, "task directory has no state record"
		return st, nil
	case err != nil:
		return providers.Status{}, err
	case rec.Provider != p.name || rec.TaskID != id:
		return providers.Status{}, fmt.Errorf("%w: recorded for %s/%s", providers.ErrUnknownHandle, rec.Provider, rec.TaskID)
	}
	st.StartedAt = rec.StartedAt
	state, why := rec.identify()
	if why != "" {
		st.State, st.Error = providers.StateLost, why
		return st, nil
	}
	st.State, st.Suspended = providers.StateRunning, state == 'T'
	return st, nil
}

// identify checks that the recorded process is still alive and still the
// same process. It returns the /proc state letter, or why it cannot be
// trusted to be the task.
func (r stateRecord) identify() (state byte, why string) {
	const unknown = "the adapter that started it is gone, so its exit status is unknown"
	boot, err := bootID()
	if err != nil || r.BootID == "" || r.StartTicks == 0 {
		return 0, "process identity cannot be checked; " + unknown
	}
	if boot != r.BootID {
		return 0, "the machine rebooted since the task started"
	}
	st, _, ticks, err := procStat(r.PID)
	if err != nil || dead(st) || ticks != r.StartTicks {
		return 0, "process ended; " + unknown
	}
	return st, ""
}

// Stop cancels the task (SIGTERM to its process group, SIGKILL after
// KillGrace) and waits, bounded by ctx, until it has ended.
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
		return nil
	}
	tk.cancel(errStopped) // no effect if it already ended or was cancelled
	select {
	case <-tk.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("local: stop %s: %w", id, context.Cause(ctx))
	}
}

// stopAdopted stops a task started by an earlier adapter process, if it
// is still alive and provably the same process. Its exit status cannot be
// known (this process is not its parent), so it is recorded as cancelled
// without an exit code.
func (p *Provider) stopAdopted(ctx context.Context, id string) error {
	st, err := p.pollDisk(id)
	if err != nil {
		return err
	}
	if st.State.Terminal() {
		return nil
	}
	dir := p.taskDir(id)
	rec, err := readState(dir)
	if err != nil {
		return err
	}
	// identify just checked rec.PID; the group cannot be reused while its
	// leader (even as a zombie) or any member exists.
	terminate(rec.PGID)
	if err := p.drainGroup(ctx, rec.PGID, p.grace); err != nil {
		return err
	}
	if exists(filepath.Join(dir, fileExit)) {
		return nil
	}
	st.State, st.Suspended = providers.StateCancelled, false
	st.Error = "stopped after an adapter restart; exit status unknown"
	st.FinishedAt = p.clock.Now()
	return writeRecord(dir, fileExit, exitRecordOf(st))
}

// Close stops every task this instance is running and waits, bounded by
// ctx, for them to end. Start fails after Close. Tasks end as cancelled
// ("provider closed"); a later adapter reads them from disk.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	tasks := slices.Collect(maps.Values(p.tasks))
	p.mu.Unlock()
	for _, tk := range tasks {
		tk.cancel(errClosed)
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
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func validate(t providers.Task) error {
	switch {
	case !validID.MatchString(t.ID):
		return fmt.Errorf("%w: ID must match %s", providers.ErrInvalidTask, validID)
	case len(t.Argv) == 0:
		return fmt.Errorf("%w: empty argv", providers.ErrInvalidTask)
	case !filepath.IsAbs(t.Argv[0]):
		return fmt.Errorf("%w: argv[0] %q is not an absolute path", providers.ErrInvalidTask, t.Argv[0])
	case slices.ContainsFunc(t.Argv, func(s string) bool { return strings.IndexByte(s, 0) >= 0 }):
		return fmt.Errorf("%w: NUL in argv", providers.ErrInvalidTask)
	case t.Dir != "" && !filepath.IsAbs(t.Dir):
		return fmt.Errorf("%w: dir %q is not an absolute path", providers.ErrInvalidTask, t.Dir)
	case t.Timeout < 0:
		return fmt.Errorf("%w: negative timeout %v", providers.ErrInvalidTask, t.Timeout)
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

// environ builds the child's environment: the base, then the task's, then
// what the provider itself sets.
func (p *Provider) environ(t providers.Task, payload string) []string {
	m := make(map[string]string, len(p.env)+len(t.Env)+2)
	maps.Copy(m, p.env)
	maps.Copy(m, t.Env)
	if len(t.Resources.GPUs) > 0 {
		m["CUDA_VISIBLE_DEVICES"] = strings.Join(t.Resources.GPUs, ",")
	}
	m[providers.PayloadEnv] = payload
	env := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
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
func (p *Provider) drainGroup(ctx context.Context, pgid int, grace time.Duration) error {
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
