package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// Provider runs tasks as Slurm batch jobs.
type Provider struct {
	name, partition, workDir, prefix string
	env                              map[string]string
	user                             string
	allowRoot                        bool
	interval                         time.Duration
	tr                               Transport
	log                              *slog.Logger
	// born is when New made the provider: a squeue taken since shows
	// every job an earlier adapter (or provider) submitted.
	born time.Time

	// fetching is held (a token in it) while one squeue call runs, so
	// concurrent Polls share that call; a channel, so a waiter can give up
	// with its ctx.
	fetching chan struct{}
	mu       sync.Mutex
	snap     *snapshot // the last squeue --json; guarded by mu
}

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Suspender = (*Provider)(nil)
	_ providers.Signaler  = (*Provider)(nil)
	_ providers.Requeuer  = (*Provider)(nil)
	_ providers.Lister    = (*Provider)(nil)
	_ providers.Prober    = (*Provider)(nil)
)

// New returns a provider. It checks the config and creates WorkDir; it
// does not contact Slurm (see Probe).
func New(cfg Config) (*Provider, error) {
	p := &Provider{name: cfg.Name, partition: cfg.Partition, workDir: cfg.WorkDir, prefix: cfg.JobNamePrefix,
		env: maps.Clone(cfg.Env), user: cfg.User, allowRoot: cfg.AllowRoot, interval: cfg.PollInterval,
		tr: cfg.Transport, log: cfg.Logger, fetching: make(chan struct{}, 1), born: time.Now()}
	if p.name == "" {
		p.name = DefaultName
	}
	if p.prefix == "" {
		p.prefix = DefaultJobNamePrefix
	}
	if p.interval <= 0 {
		p.interval = DefaultPollInterval
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("provider", p.name)
	timeout := cfg.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	switch {
	case p.tr != nil:
	case cfg.REST != nil:
		r, err := NewREST(*cfg.REST, cfg.BinDir, cfg.SlurmConf, timeout)
		if err != nil {
			return nil, err
		}
		p.tr = r
	default:
		p.tr = &CLI{Run: Exec(cfg.BinDir, cfg.SlurmConf, timeout)}
	}
	if !filepath.IsAbs(p.workDir) || !validPath(p.workDir) {
		return nil, fmt.Errorf("slurm: WorkDir %q must be an absolute path without %% or \\ (sbatch expands them in output paths)", p.workDir)
	}
	if strings.ContainsAny(p.prefix, ", \n") {
		return nil, fmt.Errorf("slurm: JobNamePrefix %q has a comma or blank", p.prefix)
	}
	if err := checkEnv(p.env); err != nil {
		return nil, fmt.Errorf("slurm: Env: %w", err)
	}
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o711 // task users pass through to their own task directories
	}
	for _, d := range []string{p.workDir, p.jobsDir()} {
		if err := os.MkdirAll(d, mode); err != nil {
			return nil, fmt.Errorf("slurm: %w", err)
		}
	}
	if err := os.Chmod(p.workDir, mode); err != nil {
		return nil, fmt.Errorf("slurm: %w", err)
	}
	return p, nil
}

// Files in a task directory.
const (
	fileRecord  = "job.json"   // record: written once the job is submitted
	fileOutcome = "final.json" // the terminal Status, once Poll has seen it
	filePayload = "payload"
	fileStdout  = "stdout"
	fileStderr  = "stderr"
	dirWork     = "work" // the default working directory
)

// record is what the provider keeps of a submitted task, in its
// directory: how to find the job again, and the Lister's evidence.
type record struct {
	Provider    string            `json:"provider"`
	TaskID      string            `json:"task_id"`
	JobID       string            `json:"job_id"`
	SubmittedAt time.Time         `json:"submitted_at"` // before sbatch was called
	Labels      map[string]string `json:"labels,omitempty"`
	Note        json.RawMessage   `json:"note,omitempty"`
}

// comment is the job's --comment: who started it, for which task, with
// which labels, so that a task can be found again in squeue alone.
type comment struct {
	Provider string            `json:"provider"`
	Task     string            `json:"task"`
	Labels   map[string]string `json:"labels,omitempty"`
}

func (p *Provider) taskDir(id string) string { return filepath.Join(p.workDir, id) }

// jobsDir holds one file per job ID, naming its task: the index that a
// handle (a job ID) is resolved through once squeue has forgotten the job.
func (p *Provider) jobsDir() string { return filepath.Join(p.workDir, ".jobs") }

// Start submits t with sbatch. The handle's ID is the Slurm job ID.
//
// A task ID is submitted once: if this provider has a directory for it,
// or squeue shows a job of that name, Start fails with ErrTaskExists
// (wrapped with ErrInvalidTask) and submits nothing; a job found only in
// squeue gets its record, so Poll of the task ID finds it.
func (p *Provider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	if err := validate(t); err != nil {
		return providers.Handle{}, fmt.Errorf("slurm: start %s: %w", t.ID, err)
	}
	acct, err := p.account(t.User)
	if err != nil {
		return providers.Handle{}, fmt.Errorf("slurm: start %s: %w", t.ID, err)
	}
	dir := p.taskDir(t.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return providers.Handle{}, fmt.Errorf("slurm: start %s: %w: %w (%s exists)", t.ID, providers.ErrInvalidTask, providers.ErrTaskExists, dir)
		}
		return providers.Handle{}, fmt.Errorf("slurm: start %s: %w", t.ID, err)
	}
	h, err := p.submit(ctx, t, dir, acct)
	if err != nil && !errors.Is(err, providers.ErrTaskExists) {
		os.RemoveAll(dir) // nothing was submitted: the ID may be retried
	}
	if err != nil {
		return providers.Handle{}, fmt.Errorf("slurm: start %s: %w", t.ID, err)
	}
	p.log.Debug("submitted", "task", t.ID, "slurm_job", h.ID)
	return h, nil
}

func (p *Provider) submit(ctx context.Context, t providers.Task, dir string, acct account) (providers.Handle, error) {
	rec := record{Provider: p.name, TaskID: t.ID, Labels: t.Labels, Note: t.Note}
	// A job of this name submitted before (by an adapter that lost its
	// directory, or crashed before writing it): that run is the task's.
	// Such an adapter came before this provider, so a squeue since it was
	// made shows the job; one at most a poll interval old (the one Polls
	// share) serves every start of that interval, not one squeue per
	// start. (Within this provider, the task directory made above already
	// keeps a task ID to one submission.)
	notBefore := time.Now().Add(-p.interval)
	if notBefore.Before(p.born) {
		notBefore = p.born
	}
	snap, err := p.jobs(ctx, notBefore)
	if err != nil {
		return providers.Handle{}, err
	}
	if j, ok := snap.byName[p.prefix+t.ID]; ok && p.ours(j) {
		rec.JobID, rec.SubmittedAt = j.ID, j.Submitted
		if err := p.writeRecord(dir, rec); err != nil {
			return providers.Handle{}, err
		}
		return providers.Handle{}, fmt.Errorf("%w: %w (Slurm job %s)", providers.ErrInvalidTask, providers.ErrTaskExists, j.ID)
	}

	work := t.Dir
	if work == "" {
		work = filepath.Join(dir, dirWork)
		if err := os.Mkdir(work, 0o700); err != nil {
			return providers.Handle{}, err
		}
	}
	payload := filepath.Join(dir, filePayload)
	if err := os.WriteFile(payload, t.Payload, 0o600); err != nil {
		return providers.Handle{}, err
	}
	if acct.chown {
		// The job's user writes its output here and reads its payload.
		for _, f := range []string{dir, payload, filepath.Join(dir, dirWork)} {
			if err := os.Chown(f, acct.uid, acct.gid); err != nil && !(f != dir && f != payload && errors.Is(err, fs.ErrNotExist)) {
				return providers.Handle{}, err
			}
		}
	}
	env := maps.Clone(p.env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, t.Env)
	env[providers.PayloadEnv] = payload
	cm, err := json.Marshal(comment{Provider: p.name, Task: t.ID, Labels: t.Labels})
	if err != nil {
		return providers.Handle{}, err
	}
	sub := Submission{
		Name: p.prefix + t.ID, Comment: string(cm), Partition: p.partition,
		Script: script(t.ID, t.Argv, env), Dir: work,
		Stdout: filepath.Join(dir, fileStdout), Stderr: filepath.Join(dir, fileStderr),
		TimeLimit: t.Timeout, NodeList: t.Placement.Node, Gres: gresOf(t.Placement), User: acct.sbatchUID,
	}
	if c := t.Resources.CPUCores; c > 0 {
		sub.CPUs = int(math.Ceil(c))
	}
	if m := t.Resources.MemoryBytes; m > 0 {
		sub.MemoryMiB = (m + 1<<20 - 1) >> 20
	}
	rec.SubmittedAt = time.Now()
	id, err := p.tr.Submit(ctx, sub)
	if err != nil {
		return providers.Handle{}, err
	}
	rec.JobID = id
	if err := p.writeRecord(dir, rec); err != nil {
		// The job runs: say so, and leave it to be found by its name.
		return providers.Handle{}, fmt.Errorf("submitted as Slurm job %s, but its record failed: %w", id, err)
	}
	return providers.Handle{Provider: p.name, ID: id}, nil
}

// writeRecord writes the task's record and its job index entry.
func (p *Provider) writeRecord(dir string, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := providers.WriteFileAtomic(filepath.Join(dir, fileRecord), b); err != nil {
		return err
	}
	return providers.WriteFileAtomic(filepath.Join(p.jobsDir(), rec.JobID), []byte(rec.TaskID))
}

// ref is a handle resolved: the job and, when this provider holds a
// record of it, the task.
type ref struct {
	jobID  string // "" until found by name
	taskID string // "" when only squeue knows it
	rec    *record
}

// resolve reads what the provider holds of h. A handle's ID is a job ID
// (what Start returns) or a task ID (what a caller that got ErrTaskExists
// knows).
func (p *Provider) resolve(h providers.Handle) (ref, error) {
	if h.Provider != p.name {
		return ref{}, fmt.Errorf("%w: %s belongs to provider %q, not %q", providers.ErrUnknownHandle, h, h.Provider, p.name)
	}
	var r ref
	switch {
	case validJobID(h.ID):
		r.jobID = h.ID
		if b, err := os.ReadFile(filepath.Join(p.jobsDir(), h.ID)); err == nil && validID.Match(b) {
			r.taskID = string(b)
		}
	case validID.MatchString(h.ID):
		r.taskID = h.ID
	default:
		return ref{}, fmt.Errorf("%w: %s: malformed ID", providers.ErrUnknownHandle, h)
	}
	if r.taskID != "" {
		if rec, err := p.readRecord(r.taskID); err == nil && (r.jobID == "" || rec.JobID == r.jobID) {
			r.rec, r.jobID = rec, rec.JobID
		}
	}
	return r, nil
}

func (p *Provider) readRecord(taskID string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(p.taskDir(taskID), fileRecord))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Provider != p.name || rec.TaskID != taskID || !validJobID(rec.JobID) {
		return nil, fmt.Errorf("%s: record of another provider or task", taskID)
	}
	return &rec, nil
}

// ours reports whether j is a job this provider submitted: its name has
// the prefix and its comment names this provider.
func (p *Provider) ours(j Job) bool {
	if !strings.HasPrefix(j.Name, p.prefix) {
		return false
	}
	var c comment
	return json.Unmarshal([]byte(j.Comment), &c) == nil && c.Provider == p.name && p.prefix+c.Task == j.Name
}

// Poll reports the task's status from one squeue --json shared by every
// Poll within PollInterval. The first terminal status it sees is recorded
// in the task directory and reported from then on (terminal states never
// change, and outlive squeue's MinJobAge); a job squeue no longer lists
// without a recorded outcome is lost.
func (p *Provider) Poll(ctx context.Context, h providers.Handle) (providers.Status, error) {
	r, err := p.resolve(h)
	if err != nil {
		return providers.Status{}, fmt.Errorf("slurm: poll: %w", err)
	}
	st, _, err := p.poll(ctx, r, time.Now().Add(-p.interval))
	if err != nil {
		return providers.Status{}, fmt.Errorf("slurm: poll %s: %w", h.ID, err)
	}
	return st, nil
}

// poll reports r's status, and its job ID, from a snapshot taken at or
// after notBefore.
func (p *Provider) poll(ctx context.Context, r ref, notBefore time.Time) (providers.Status, string, error) {
	st, jobID, err := p.pollSnap(ctx, r, notBefore)
	if jobID == "" {
		jobID = r.jobID
	}
	return st, jobID, err
}

func (p *Provider) pollSnap(ctx context.Context, r ref, notBefore time.Time) (providers.Status, string, error) {
	if r.rec != nil {
		// Terminal states never change, even if Slurm requeues the job
		// later (an operator's scontrol requeue).
		if st, ok := p.outcome(p.taskDir(r.taskID)); ok {
			return st, "", nil
		}
	}
	snap, err := p.jobs(ctx, notBefore)
	if err != nil {
		return providers.Status{}, "", err
	}
	if r.rec != nil && snap.taken.Before(r.rec.SubmittedAt) {
		// Taken before the job was submitted: it cannot be there.
		if snap, err = p.jobs(ctx, r.rec.SubmittedAt); err != nil {
			return providers.Status{}, "", err
		}
	}
	j, found := snap.byID[r.jobID]
	if !found && r.jobID == "" {
		j, found = snap.byName[p.prefix+r.taskID]
	}
	switch {
	case found && !p.ours(j):
		return providers.Status{}, "", fmt.Errorf("%w: Slurm job %s is not this provider's", providers.ErrUnknownHandle, j.ID)
	case found:
		st := status(j)
		st.StdoutPath, st.StderrPath = j.Stdout, j.Stderr
		if r.rec != nil {
			dir := p.taskDir(r.taskID)
			st.StdoutPath, st.StderrPath = filepath.Join(dir, fileStdout), filepath.Join(dir, fileStderr)
			if st.State.Terminal() {
				p.keepOutcome(dir, st)
			}
		}
		return st, j.ID, nil
	case r.rec != nil:
		return providers.Status{State: providers.StateLost, Error: fmt.Sprintf(
			"Slurm no longer lists job %s (it ended over MinJobAge ago, or slurmctld lost it) and no outcome was seen", r.jobID)}, "", nil
	default:
		return providers.Status{}, "", fmt.Errorf("%w: no Slurm job and no record", providers.ErrUnknownHandle)
	}
}

// keepOutcome records a terminal status, so it outlives squeue's memory
// of the job (MinJobAge) and stays what Poll reports.
func (p *Provider) keepOutcome(dir string, st providers.Status) {
	path := filepath.Join(dir, fileOutcome)
	b, _ := json.Marshal(st)
	if err := providers.WriteFileAtomic(path, b); err != nil {
		p.log.Warn("record outcome", "dir", dir, "err", err)
	}
}

func (p *Provider) outcome(dir string) (providers.Status, bool) {
	b, err := os.ReadFile(filepath.Join(dir, fileOutcome))
	if err != nil {
		return providers.Status{}, false
	}
	var st providers.Status
	if json.Unmarshal(b, &st) != nil || !st.State.Terminal() {
		return providers.Status{}, false
	}
	return st, true
}

// snapshot is one squeue --json.
type snapshot struct {
	taken  time.Time // when the call began
	byID   map[string]Job
	byName map[string]Job // the newest job of each name
}

// jobs returns a snapshot taken at or after notBefore: the last one if it
// is that recent, else a new squeue call, which concurrent callers share.
func (p *Provider) jobs(ctx context.Context, notBefore time.Time) (*snapshot, error) {
	fresh := func() *snapshot {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.snap != nil && !p.snap.taken.Before(notBefore) {
			return p.snap
		}
		return nil
	}
	if s := fresh(); s != nil {
		return s, nil
	}
	select {
	case p.fetching <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.fetching }()
	if s := fresh(); s != nil { // fetched while this call waited
		return s, nil
	}
	taken := time.Now()
	list, err := p.tr.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	s := &snapshot{taken: taken, byID: make(map[string]Job, len(list)), byName: make(map[string]Job)}
	for _, j := range list {
		s.byID[j.ID] = j
		if old, ok := s.byName[j.Name]; !ok || j.Submitted.After(old.Submitted) {
			s.byName[j.Name] = j
		}
	}
	p.mu.Lock()
	if p.snap == nil || p.snap.taken.Before(taken) {
		p.snap = s
	}
	p.mu.Unlock()
	return s, nil
}

// Stop cancels the job (scancel) and waits, bounded by ctx, until squeue
// shows it ended. A finished or lost task is left as it is.
func (p *Provider) Stop(ctx context.Context, h providers.Handle) error {
	r, err := p.resolve(h)
	if err != nil {
		return fmt.Errorf("slurm: stop: %w", err)
	}
	st, jobID, err := p.poll(ctx, r, time.Now())
	if err != nil {
		return fmt.Errorf("slurm: stop %s: %w", h.ID, err)
	}
	if st.State.Terminal() {
		return nil
	}
	cerr := p.tr.Cancel(ctx, jobID)
	p.changed()
	for {
		st, _, err := p.poll(ctx, r, time.Now())
		switch {
		case err != nil:
			return fmt.Errorf("slurm: stop %s: %w", h.ID, err)
		case st.State.Terminal():
			return nil
		case cerr != nil:
			return fmt.Errorf("slurm: stop %s: %w", h.ID, cerr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurm: stop %s: job %s still %s: %w", h.ID, jobID, st.State, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// running resolves h and checks that its job has not ended, for the
// abilities (ErrNotRunning otherwise).
func (p *Provider) running(ctx context.Context, h providers.Handle) (string, providers.Status, error) {
	r, err := p.resolve(h)
	if err != nil {
		return "", providers.Status{}, err
	}
	st, jobID, err := p.poll(ctx, r, time.Now())
	if err != nil {
		return "", providers.Status{}, err
	}
	if st.State.Terminal() {
		return "", st, providers.ErrNotRunning
	}
	return jobID, st, nil
}

// changed drops the cached snapshot: the next Poll sees what an operation
// just did.
func (p *Provider) changed() {
	p.mu.Lock()
	p.snap = nil
	p.mu.Unlock()
}

// Tasks lists the tasks this provider holds records of (its WorkDir)
// that are running or ended at or after since, and the jobs squeue lists
// as this provider's that it holds no record of (started by an adapter
// with another WorkDir; their Note is empty), from one squeue call.
func (p *Provider) Tasks(ctx context.Context, since time.Time) ([]providers.TaskRecord, error) {
	ents, err := os.ReadDir(p.workDir)
	if err != nil {
		return nil, fmt.Errorf("slurm: tasks: %w", err)
	}
	snap, err := p.jobs(ctx, time.Now().Add(-p.interval))
	if err != nil {
		return nil, fmt.Errorf("slurm: tasks: %w", err)
	}
	var out []providers.TaskRecord
	seen := map[string]bool{}
	keep := func(tr providers.TaskRecord) {
		if tr.Status.State.Terminal() && tr.Status.FinishedAt.Before(since) {
			return
		}
		out = append(out, tr)
	}
	for _, e := range ents {
		if !e.IsDir() || !validID.MatchString(e.Name()) {
			continue
		}
		rec, err := p.readRecord(e.Name())
		if err != nil {
			continue // a start cut short, or not ours
		}
		seen[rec.JobID] = true
		st, _, err := p.poll(ctx, ref{jobID: rec.JobID, taskID: rec.TaskID, rec: rec}, snap.taken)
		if err != nil {
			return out, fmt.Errorf("slurm: tasks: %s: %w", rec.TaskID, err)
		}
		keep(providers.TaskRecord{Handle: providers.Handle{Provider: p.name, ID: rec.JobID}, Labels: rec.Labels, Note: rec.Note, Status: st})
	}
	for _, id := range slices.Sorted(maps.Keys(snap.byID)) {
		j := snap.byID[id]
		if seen[id] || !p.ours(j) {
			continue
		}
		var c comment
		_ = json.Unmarshal([]byte(j.Comment), &c)
		st := status(j)
		st.StdoutPath, st.StderrPath = j.Stdout, j.Stderr
		keep(providers.TaskRecord{Handle: providers.Handle{Provider: p.name, ID: id}, Labels: c.Labels, Status: st})
	}
	return out, nil
}

// Probe checks that the work directory takes a file and that Slurm
// answers (sinfo --json).
func (p *Provider) Probe(ctx context.Context) error {
	f, err := os.CreateTemp(p.workDir, ".probe-*")
	if err != nil {
		return fmt.Errorf("slurm: probe: %w", err)
	}
	f.Close()
	os.Remove(f.Name())
	if _, err := p.tr.Nodes(ctx); err != nil {
		return fmt.Errorf("slurm: probe: %w", err)
	}
	return nil
}

// validID keeps task IDs safe as a single path element and a job name.
var validID = providers.ValidTaskID

// validPath rejects what sbatch would expand in --output and --error
// (%j, %u, ...; a backslash turns expansion off).
func validPath(p string) bool { return !strings.ContainsAny(p, "%\\\n") }

func validate(t providers.Task) error {
	if err := t.Validate(); err != nil {
		return err
	}
	switch {
	case strings.ContainsAny(t.Dir, "\n\x00"):
		return fmt.Errorf("%w: dir %q is not an absolute path", providers.ErrInvalidTask, t.Dir)
	case t.Resources.CPUCores < 0 || t.Resources.MemoryBytes < 0:
		return fmt.Errorf("%w: negative resources", providers.ErrInvalidTask)
	case strings.ContainsAny(t.Placement.Node, ", \n\x00"):
		return fmt.Errorf("%w: node name %q", providers.ErrInvalidTask, t.Placement.Node)
	}
	if err := checkEnv(t.Env); err != nil {
		return fmt.Errorf("%w: env: %w", providers.ErrInvalidTask, err)
	}
	return nil
}

// checkEnv accepts the variables a shell can export.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if !envName.MatchString(k) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("bad variable %q (names are [A-Za-z_][A-Za-z0-9_]*, values have no NUL)", k)
		}
	}
	return nil
}

// account is who a task runs as.
type account struct {
	sbatchUID string // sbatch --uid; "" for the provider's own user
	chown     bool   // the task directory goes to uid, gid
	uid, gid  int
}

// account checks the task's user (or Config.User) as the local provider
// does: root only with AllowRoot; another user only when running as root.
func (p *Provider) account(name string) (account, error) {
	if name == "" {
		name = p.user
	}
	euid := os.Geteuid()
	if name == "" {
		if euid == 0 && !p.allowRoot {
			return account{}, fmt.Errorf("%w: tasks would run as root: name a user in Task.User or Config.User, or set Config.AllowRoot", providers.ErrInvalidTask)
		}
		return account{}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return account{}, fmt.Errorf("%w: user %q: %w", providers.ErrInvalidTask, name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	switch {
	case uid == 0 && !p.allowRoot:
		return account{}, fmt.Errorf("%w: user %q is root; set Config.AllowRoot to allow it", providers.ErrInvalidTask, name)
	case uid == euid:
		return account{}, nil
	case euid != 0:
		return account{}, fmt.Errorf("%w: cannot run as user %q: the provider runs as uid %d, not root", providers.ErrInvalidTask, name, euid)
	}
	return account{sbatchUID: u.Uid, chown: true, uid: uid, gid: gid}, nil
}
