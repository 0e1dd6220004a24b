// Package agent is a pool node's agent: it registers its node(s) and renews
// their heartbeats, reads the scheduler's orders from each node's durable
// assignment stream, starts each assigned job through the node's provider
// (after the queued → running compare-and-set that also checks the record
// still names this node), stores the provider's handle on the job record,
// polls the running tasks and records every transition, and reports each
// one to the scheduler. After a restart it re-attaches to its running
// tasks, reads its unacknowledged orders again, and replaces a `lost`
// outcome the scheduler recorded while it was silent with the true one.
// An eviction order (preemption) stops a task and records the job
// cancelled (error code preempted) or back in the queue, as its mode says
// (checkpoint: SIGUSR1 first, the stop after the order's grace), or, in
// suspend mode, pauses it in place through the provider's
// providers.Suspender (the record stays running, with suspended_at) until
// a resume order (suspend.go).
//
// One agent serves one real node (the machine it runs on, local provider)
// or many virtual ones (the fake-node agent: providers/fake).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/ttlcache"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// Command is what a job runs, resolved on the node from the operator's
// templates or allowlist.
type Command struct {
	Argv    []string
	Image   string // the template's container image, for container backends
	Env     map[string]string
	User    string
	Timeout time.Duration // 0 = none
}

// Resolver turns a request into a command (the node's security boundary:
// it re-checks what the scheduler admitted, against this node's config).
type Resolver func(wire.Request) (Command, *wire.Error)

// JobStore is what the agent needs from the job records.
type JobStore interface {
	Get(ctx context.Context, jobID string) (jobs.Job, error)
	Transition(ctx context.Context, jobID string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, error)
	// Change is Transition with the job entry's mirror left to the
	// caller: a start is mirrored once its task started, an end once the
	// scheduler has its report.
	Change(ctx context.Context, jobID string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, jobs.Mirror, error)
	SetHandles(ctx context.Context, hs []jobs.HandleSet) []error
	// Accept recreates a record a Redis rollback lost (see reconcile.go)
	// from what the agent holds; Reaccept from the request's entry, for a
	// job the agent knows only from its provider's task records.
	Accept(ctx context.Context, spec jobs.AcceptSpec) (jobs.AcceptResult, error)
	Reaccept(ctx context.Context, entryID string) (jobs.AcceptResult, error)
}

// Node is one node this agent serves.
type Node struct {
	Record   pool.NodeRecord
	Provider providers.Provider
}

// Config configures an agent.
type Config struct {
	ID       string // consumer name on the node streams; stable across restarts (default: the first node's name)
	Nodes    []Node
	Resolve  Resolver
	Jobs     JobStore
	Channel  *pool.Channel
	Registry *pool.Registry
	Beat     time.Duration // heartbeat interval (default 2 s)
	// Poll is how often running tasks are polled (default 200 ms). A task
	// whose provider is a providers.Notifier is polled when the provider
	// says it ended, and on this tick only while it is being stopped (the
	// stop is retried until it ends).
	Poll time.Duration
	// SafetyPoll is how often every task of a Notifier provider is polled
	// anyway, for ends the provider did not notify (default 5 s).
	SafetyPoll time.Duration
	Workers    int // orders handled at once (default 32)
	// StartFailures is how many starts in a row a node's provider may fail
	// (for a reason of its own: a full or read-only disk, say) before the
	// node takes itself out of scheduling (default 3); ProbeEvery is how
	// often it then checks whether its provider works again (default 10 s;
	// a provider that is a providers.Prober is asked, any other is tried
	// again after that time).
	StartFailures int
	ProbeEvery    time.Duration
	// CheckpointDir turns on the job checkpoint protocol (checkpoint.go):
	// each job's checkpoints go to CheckpointDir/<job id>, named in its
	// task's environment, and are verified when its task ends and before
	// its next attempt starts. A job resumes on another node only when
	// every node sees the same directory (a shared file system). "" = off.
	CheckpointDir string
	// CheckpointInterval is how often a job is asked to checkpoint by
	// itself (COMPUTEBOARD_CHECKPOINT_INTERVAL; default 60 s).
	CheckpointInterval time.Duration
	// RunAs is the user a task runs as when its command names none (""
	// = the agent's own, or "nobody" as root): its checkpoint directory
	// is made that user's.
	RunAs string
	// Inventories, by provider name, are read again while the agent runs
	// (refresh.go): nodes added, changed, or out of scheduling as their
	// provider says. nil: the nodes stay as given.
	Inventories map[string]Inventory
	Clock       clock.Clock
	Logger      *slog.Logger
}

// Agent serves its nodes until its context ends.
type Agent struct {
	cfg   Config
	names []string
	nodes map[string]Node
	log   *slog.Logger

	owners ttlcache.Cache[string, owner] // the checkpoint directories' users (checkpointDir)

	mu      sync.Mutex
	tasks   map[string]*task  // by job ID; guarded by mu
	stats   Stats             // guarded by mu
	failing map[string]int    // guarded by mu: a node's starts failed in a row
	out     map[string]string // guarded by mu: nodes out of scheduling, and why
	// stopping holds the tasks stopTask was asked to stop, some of which
	// may have ended since; guarded by mu.
	stopping map[*task]bool
	// tracked gets a token each time launch tracks a task, for the poll
	// loop to look up at once the notices that came before their task was
	// tracked (a task that ends as it starts); capacity 1.
	tracked chan struct{}
	// ends are the jobs ended lately, by job ID (guarded by mu), and
	// holdStarts is set while a reconciliation round waits for this
	// agent's nodes: see reconcile.go.
	ends       map[string]ended
	endOrder   []string // ends' job IDs, oldest first (a job ended twice is listed twice)
	holdStarts atomic.Bool
	// endMu orders job ends with reconciliation: ends hold it shared,
	// reconcile exclusively, so an end is recorded either before the
	// round looks at its task or after the record was re-asserted.
	endMu sync.RWMutex
	// startMu orders starts with reconciliation: a start holds it shared
	// from its look at holdStarts until its task is tracked, and
	// reconcile, once holdStarts is set, waits to hold it exclusively, so
	// a start whose compare-and-set a rollback lost is re-asserted too.
	startMu sync.RWMutex
	// bornAt is when this agent was made: how far back reconcile looks
	// in its providers' task records (see evidenceSince).
	bornAt time.Time
}

// Stats counts what the agent did since it started.
type Stats struct {
	Started, Refused, Succeeded, Failed, Cancelled, Requeued, Corrected int
	Running                                                             int
	// Acknowledged counts the starts whose order was acknowledged (the
	// handle stored and the start reported before it).
	Acknowledged int
	// Reasserted counts the job records this agent made true again after
	// Redis lost acknowledged writes (reconcile.go).
	Reasserted int
}

// task is one job this agent started or re-attached.
type task struct {
	rec    jobs.Job
	node   string
	handle providers.Handle
	prov   providers.Provider
	lost   bool // the scheduler recorded the job failed: lost; its outcome corrects that
	// stop is the reason of a stop or eviction order; evict its mode
	// (pool.EvictCancel, …; "" for a plain stop), and stopAt when the stop
	// is due (after a checkpoint signal's grace; zero = now). Guarded by
	// Agent.mu.
	stop   string
	evict  string
	stopAt time.Time
	// ckSeq is the checkpoint last recorded on the job record while it
	// runs (checkpointLoop); guarded by Agent.mu.
	ckSeq int64
	// suspended: the task is paused in place (suspend.go); guarded by
	// Agent.mu.
	suspended bool
}

// New checks cfg and returns an agent.
func New(cfg Config) (*Agent, error) {
	if len(cfg.Nodes) == 0 {
		return nil, errors.New("agent: no nodes")
	}
	if cfg.Resolve == nil || cfg.Jobs == nil || cfg.Channel == nil || cfg.Registry == nil {
		return nil, errors.New("agent: Resolve, Jobs, Channel and Registry are required")
	}
	if cfg.ID == "" {
		cfg.ID = cfg.Nodes[0].Record.Name
	}
	if cfg.Beat <= 0 {
		cfg.Beat = 2 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.SafetyPoll <= 0 {
		cfg.SafetyPoll = 5 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.StartFailures <= 0 {
		cfg.StartFailures = 3
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = 60 * time.Second
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, nodes: map[string]Node{}, tasks: map[string]*task{}, log: cfg.Logger,
		failing: map[string]int{}, out: map[string]string{}, tracked: make(chan struct{}, 1),
		bornAt: cfg.Clock.Now(), owners: ttlcache.Cache[string, owner]{TTL: ownerTTL}}
	for _, n := range cfg.Nodes {
		if n.Record.Name == "" || n.Provider == nil {
			return nil, errors.New("agent: a node needs a name and a provider")
		}
		if _, dup := a.nodes[n.Record.Name]; dup {
			return nil, fmt.Errorf("agent: node %s listed twice", n.Record.Name)
		}
		_, n.Record.Suspend = n.Provider.(providers.Suspender) // the scheduler evicts in suspend mode only there
		a.nodes[n.Record.Name] = n
		a.names = append(a.names, n.Record.Name)
	}
	return a, nil
}

// Stats returns a copy of the counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Running = len(a.tasks)
	return s
}

// Nodes returns the names of the nodes this agent serves.
func (a *Agent) Nodes() []string { return slices.Clone(a.names) }

// Run registers the nodes, recovers, and serves until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	recs := make([]pool.NodeRecord, 0, len(a.names))
	for _, n := range a.names {
		recs = append(recs, a.nodes[n].Record)
	}
	if err := a.cfg.Registry.Register(ctx, recs...); err != nil {
		return err
	}
	if err := a.cfg.Channel.EnsureGroups(ctx, a.names); err != nil {
		return err
	}
	if err := a.Recover(ctx); err != nil {
		return fmt.Errorf("agent: recover: %w", err)
	}
	// A round opened by this (re)start of Redis, or of the board, waits
	// for these nodes: answer it before taking orders.
	if err := a.roundBeat(ctx); err != nil && ctx.Err() == nil {
		a.log.Warn("heartbeat", "err", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.beat(gctx) })
	g.Go(func() error { return a.orders(gctx) })
	g.Go(func() error { return a.pollLoop(gctx) })
	g.Go(func() error { return a.probeLoop(gctx) })
	if len(a.cfg.Inventories) > 0 {
		g.Go(func() error { return a.refreshLoop(gctx) })
	}
	if a.cfg.CheckpointDir != "" {
		g.Go(func() error { return a.checkpointLoop(gctx) })
	}
	return g.Wait()
}

func (a *Agent) beat(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Beat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := a.roundBeat(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("heartbeat", "err", err)
			}
		}
	}
}

// orders reads and handles the nodes' orders: first those delivered before
// and never acknowledged (a restart), then new ones; after a failure it
// re-reads the unacknowledged ones.
func (a *Agent) orders(ctx context.Context) error {
	pending := true
	for ctx.Err() == nil {
		msgs, err := a.cfg.Channel.Read(ctx, a.cfg.ID, a.names, 512, time.Second, pending)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.log.Warn("read orders", "err", err)
			sleep(ctx, 200*time.Millisecond)
			pending = true
			continue
		}
		if pending && len(msgs) == 0 {
			pending = false
			continue
		}
		if !a.handle(ctx, msgs) {
			pending = true // some were left unacknowledged: read them again
			sleep(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

// handle runs the orders (Workers at a time) and acknowledges those that
// are done; false if some must be tried again.
func (a *Agent) handle(ctx context.Context, msgs []pool.Message) bool {
	done := make([]bool, len(msgs))
	started := make([]*task, len(msgs))
	var g errgroup.Group
	g.SetLimit(a.cfg.Workers)
	for i, m := range msgs {
		g.Go(func() error {
			done[i], started[i] = a.order(ctx, m)
			return nil
		})
	}
	_ = g.Wait()
	var ack []pool.Message
	for i, m := range msgs {
		if done[i] {
			ack = append(ack, m)
		}
	}
	// A start cut short by shutdown is finished (see start): the rest of
	// the batch's writes get a context of their own. The starts' reports
	// and the acknowledgements go in one round trip, after the handles.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rs := a.started(actx, started)
	if err := a.cfg.Channel.ReportAck(actx, rs, ack); err != nil {
		// A report lost only delays the scheduler (it rescans the
		// records); the orders are read again.
		a.log.Warn("report starts and acknowledge orders", "reports", len(rs), "err", err)
		return false
	}
	n := 0
	for _, t := range started {
		if t != nil {
			n++
		}
	}
	a.count(func(s *Stats) { s.Acknowledged += n })
	return len(ack) == len(msgs)
}

// started stores the handles of the tasks a batch of orders started (one
// pipeline) and returns the starts' reports. A handle not stored (a crash
// here) is rebuilt from the task ID at re-attach, which the local
// provider supports; the report is a hint (the scheduler rescans).
func (a *Agent) started(ctx context.Context, ts []*task) []pool.Report {
	var hs []jobs.HandleSet
	var rs []pool.Report
	for _, t := range ts {
		if t == nil {
			continue
		}
		hb, _ := json.Marshal(t.handle)
		hs = append(hs, jobs.HandleSet{JobID: t.rec.JobID, Node: t.node, Handle: string(hb)})
		rs = append(rs, pool.Report{JobID: t.rec.JobID, Node: t.node, Event: pool.EventStarted, Status: string(wire.JobRunning)})
	}
	if len(hs) == 0 {
		return nil
	}
	for i, err := range a.cfg.Jobs.SetHandles(ctx, hs) {
		if err != nil && !errors.Is(err, jobs.ErrConflict) {
			a.log.Warn("store handle", "job", hs[i].JobID, "err", err)
		}
	}
	return rs
}

// order handles one order; false: leave it unacknowledged, to try again.
// A start it made returns the task, for started.
func (a *Agent) order(ctx context.Context, m pool.Message) (bool, *task) {
	if m.Err != nil {
		a.log.Error("dropping malformed order", "err", m.Err)
		return true, nil
	}
	switch m.Kind {
	case pool.KindStop:
		a.mu.Lock()
		t := a.tasks[m.JobID]
		if t != nil {
			t.stop = m.Reason
		}
		a.mu.Unlock()
		if t != nil {
			a.stopTask(ctx, t)
		}
		return true, nil
	case pool.KindEvict:
		if m.Mode == pool.EvictSuspend {
			return a.suspendTask(ctx, m), nil
		}
		a.evictTask(ctx, m)
		return true, nil
	case pool.KindResume:
		return a.resumeTask(ctx, m), nil
	default:
		return a.start(ctx, m)
	}
}

// start runs one start order.
func (a *Agent) start(ctx context.Context, m pool.Message) (bool, *task) {
	a.startMu.RLock()
	defer a.startMu.RUnlock()
	if a.holdStarts.Load() {
		return false, nil // reconciling after a Redis restart: later
	}
	a.mu.Lock()
	_, known := a.tasks[m.JobID]
	e, endedHere := a.ends[m.JobID]
	a.mu.Unlock()
	if known {
		return true, nil // a repeated order
	}
	if endedHere && e.to == wire.JobQueued {
		// This node put the job back in the queue (a retry, an eviction):
		// an order for it now is its next attempt, not a replay.
		a.mu.Lock()
		if cur, ok := a.ends[m.JobID]; ok && cur.at.Equal(e.at) {
			delete(a.ends, m.JobID)
		}
		a.mu.Unlock()
		endedHere = false
	}
	if endedHere {
		// This node ran the job already: its order is back because Redis
		// lost what came after it (see reconcile.go). Record what happened
		// rather than run it a second time.
		a.endMu.RLock()
		_, err := a.reassertEnd(ctx, e)
		a.endMu.RUnlock()
		if err != nil {
			a.log.Warn("re-assert the end of a job ordered again", "job", m.JobID, "err", err)
			return false, nil
		}
		return true, nil
	}
	node, ok := a.nodes[m.Node]
	if !ok {
		return true, nil
	}
	// Once the compare-and-set is made the start is finished, even if the
	// agent is stopping: cut short, the record would say running with no task.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// The checkpoint to resume from is verified again before the start
	// (on this node, which may not be the one that verified it).
	up, restore := a.checkpointUpdate(m.JobID, jobs.Update{Node: m.Node, ExpectNode: m.Node})
	rec, mirror, err := a.cfg.Jobs.Change(sctx, m.JobID, wire.JobQueued, wire.JobRunning, up)
	if a.cfg.CheckpointDir != "" {
		rec.Checkpoint = restore // the record's may not be readable here
	}
	switch {
	case errors.Is(err, jobs.ErrWithdrawn):
		a.report(sctx, m.Node, m.JobID, pool.EventEnded, wire.JobCancelled)
		_ = a.cfg.Channel.Settle(sctx, m.Node, m.JobID)
		a.count(func(s *Stats) { s.Cancelled++ })
		return true, nil
	case errors.Is(err, jobs.ErrConflict) || errors.Is(err, jobs.ErrNotFound):
		// Not queued on this node any more: cancelled, moved elsewhere by
		// the scheduler, or already started by this node before a restart
		// (Recover re-attached it).
		a.refused(sctx, m)
		return true, nil
	case err != nil:
		a.log.Warn("start: transition", "job", m.JobID, "err", err)
		return false, nil
	}
	// The compare-and-set is made: the job is ours to start, whatever
	// becomes of its mirror (not starting it would leave it running with
	// no task). The job entry says running once the task has started
	// (launch), a round trip sooner for the task.
	return true, a.launch(sctx, node, rec, m.Placement, func() {
		if err := mirror(sctx); err != nil {
			a.log.Warn("start: job entry not updated", "job", m.JobID, "err", err)
		}
	})
}

// refused settles an order the job record refused.
func (a *Agent) refused(ctx context.Context, m pool.Message) {
	rec, err := a.cfg.Jobs.Get(ctx, m.JobID)
	if err == nil && rec.Node == m.Node && rec.Status == wire.JobRunning {
		a.mu.Lock()
		_, tracked := a.tasks[m.JobID]
		a.mu.Unlock()
		if !tracked {
			// Recorded running here but not tracked (a start cut short):
			// track it as Recover would; if its task never started, the
			// poll puts the job back in the queue.
			if rerr := a.recoverJob(ctx, a.nodes[m.Node], m.JobID); rerr != nil {
				a.log.Warn("take over a job recorded running here", "job", m.JobID, "err", rerr)
			}
		}
		return
	}
	if err == nil && rec.Node == m.Node && rec.Status == wire.JobQueued {
		return // assigned here again by a newer order
	}
	_ = a.cfg.Channel.Settle(ctx, m.Node, m.JobID)
	a.report(ctx, m.Node, m.JobID, pool.EventRefused, "")
	a.count(func(s *Stats) { s.Refused++ })
}

// launch starts the task of a job now recorded running on node; the task,
// or nil when it could not start (the job is recorded failed then).
// mirror writes the start onto the job entry: it runs once, right after
// the provider's start (or before the job is ended without one), so
// always before anything ends the job and mirrors that.
func (a *Agent) launch(ctx context.Context, node Node, rec jobs.Job, pl providers.Placement, mirror func()) *task {
	name := node.Record.Name
	cmd, werr := a.cfg.Resolve(rec.Request)
	if werr != nil {
		mirror()
		a.end(ctx, &task{rec: rec, node: name}, wire.JobFailed, jobs.Update{
			Error: &wire.JobError{Code: string(werr.Code), Message: "this node refuses the request: " + werr.Message}})
		return nil
	}
	env := jobEnv(cmd.Env, rec, name)
	if providers.SharesFiles(node.Provider) {
		env = a.checkpointEnv(env, rec, firstNonEmpty(cmd.User, a.cfg.RunAs))
	}
	t := providers.Task{
		ID:       TaskID(rec.JobID, rec.Attempt),
		Argv:     cmd.Argv,
		Template: rec.Request.Template, // Resolve takes the template when one is named
		Image:    cmd.Image,
		Priority: rec.Request.Priority,
		Env:      env,
		User:     cmd.User,
		Timeout:  cmd.Timeout,
		Payload:  rec.Request.Payload,
		Resources: providers.Resources{
			CPUCores:    rec.Request.Resources.CPUCores,
			MemoryBytes: int64(rec.Request.Resources.MemoryGB * (1 << 30)),
		},
		Placement: pl,
		Labels: map[string]string{"job": rec.JobID, "request": rec.RequestEntryID, "account": rec.Account,
			"attempt": strconv.Itoa(rec.Attempt), "node": name},
	}
	if d := rec.Request.EstimatedDuration; d > 0 {
		t.Labels["duration_s"] = strconv.FormatFloat(d, 'f', -1, 64)
	}
	t.Note = startNote(rec)
	h, err := node.Provider.Start(ctx, t)
	mirror()
	if errors.Is(err, providers.ErrTaskExists) {
		// This node started this attempt before: Redis lost the record
		// of that start (a rollback) and the order came back. That run
		// is the attempt's run: watch it, never start a second.
		h = providers.Handle{Provider: node.Record.Provider, ID: t.ID}
		st, perr := node.Provider.Poll(ctx, h)
		if perr == nil {
			a.log.Warn("this node ran this attempt already (its task record is there): recording that run, not starting another",
				"job", rec.JobID, "attempt", rec.Attempt, "state", st.State)
			return a.track(&task{rec: rec, node: name, handle: h, prov: node.Provider})
		}
		if errors.Is(perr, providers.ErrUnknownHandle) {
			// The attempt's task ID is taken, but nothing ran under it:
			// an adapter died between making the task's directory and
			// starting it, and Redis lost what followed. The ID cannot be
			// started again, so the job goes back to the queue, to run as
			// its next attempt (it failed start_failed here before).
			a.log.Warn("this attempt's task ID is taken on this node but never ran: the job goes back to the queue",
				"job", rec.JobID, "attempt", rec.Attempt)
			a.neverStarted(ctx, &task{rec: rec, node: name, handle: h, prov: node.Provider})
			return nil
		}
	}
	if err != nil {
		a.startFailed(ctx, node, rec, err)
		return nil
	}
	a.startWorked(ctx, node)
	a.count(func(s *Stats) { s.Started++ })
	return a.track(&task{rec: rec, node: name, handle: h, prov: node.Provider})
}

// track hands a started task to the poll loop.
func (a *Agent) track(tk *task) *task {
	a.mu.Lock()
	if tk.rec.Checkpoint != nil {
		tk.ckSeq = tk.rec.Checkpoint.Seq // restored from; recorded already
	}
	a.tasks[tk.rec.JobID] = tk
	a.mu.Unlock()
	select {
	case a.tracked <- struct{}{}: // its end may have been notified already
	default: // one is pending: the poll loop looks at every notice unmatched
	}
	return tk
}

// startFailed handles a start the provider refused. A task it cannot run
// as given (providers.ErrInvalidTask: no such user, say) fails the job:
// it would fail anywhere. Anything else is the node's trouble (a full or
// read-only disk): nothing started, so the job goes back to the queue to
// run elsewhere, and after StartFailures such failures in a row the node
// takes itself out of scheduling until a probe succeeds. A job that keeps
// failing to start on nodes that otherwise work fails after MaxRetries+3
// attempts; a failure blamed on the node (it is out, or this failure
// takes it out) never fails the job: orders already on their way to a
// node that just went out would otherwise burn its attempts there.
func (a *Agent) startFailed(ctx context.Context, node Node, rec jobs.Job, err error) {
	name := node.Record.Name
	t := &task{rec: rec, node: name}
	a.mu.Lock()
	_, nodeOut := a.out[name]
	nodeBlamed := nodeOut || a.failing[name]+1 >= a.cfg.StartFailures
	a.mu.Unlock()
	if errors.Is(err, providers.ErrInvalidTask) || (rec.Attempt > rec.Request.MaxRetries+3 && !nodeBlamed) {
		a.end(ctx, t, wire.JobFailed, jobs.Update{Error: &wire.JobError{Code: "start_failed", Message: err.Error()}})
		return
	}
	a.log.Warn("start failed on this node; the job goes back to the queue", "job", rec.JobID, "node", name, "err", err)
	if _, terr := a.cfg.Jobs.Transition(ctx, rec.JobID, wire.JobRunning, wire.JobQueued, jobs.Update{ExpectNode: name}); terr != nil &&
		!errors.Is(terr, jobs.ErrConflict) && !errors.Is(terr, jobs.ErrNotFound) {
		a.log.Warn("requeue after a failed start", "job", rec.JobID, "err", terr)
	}
	a.count(func(s *Stats) { s.Requeued++ })
	a.report(ctx, name, rec.JobID, pool.EventEnded, wire.JobQueued)
	_ = a.cfg.Channel.Settle(ctx, name, rec.JobID)
	a.mu.Lock()
	a.failing[name]++
	n := a.failing[name]
	_, already := a.out[name]
	if n >= a.cfg.StartFailures && !already {
		a.out[name] = fmt.Sprintf("%d starts failed in a row; the last: %v", n, err)
	}
	why, takeOut := a.out[name], n >= a.cfg.StartFailures && !already
	a.mu.Unlock()
	if takeOut {
		a.log.Error("node out of scheduling: its provider keeps failing starts", "node", name, "why", why)
		a.setOut(ctx, node, why)
	}
}

// startWorked resets a node's count of failed starts.
func (a *Agent) startWorked(ctx context.Context, node Node) {
	a.mu.Lock()
	a.failing[node.Record.Name] = 0
	a.mu.Unlock()
}

// register registers the named nodes again (their registration was lost
// with Redis's data), each with why it is out of scheduling, if it is.
func (a *Agent) register(ctx context.Context, names []string) {
	recs := make([]pool.NodeRecord, 0, len(names))
	a.mu.Lock()
	for _, n := range names {
		node, ok := a.nodes[n]
		if !ok {
			continue
		}
		rec := node.Record
		rec.Unhealthy = a.out[n]
		recs = append(recs, rec)
	}
	a.mu.Unlock()
	if err := a.cfg.Registry.Register(ctx, recs...); err != nil {
		a.log.Warn("register nodes again", "nodes", names, "err", err)
		return
	}
	a.log.Warn("this agent's nodes were not registered (lost with Redis's data): registered again", "nodes", names)
}

// setOut registers the node with why it is out of scheduling ("": back in).
func (a *Agent) setOut(ctx context.Context, node Node, why string) {
	rec := node.Record
	rec.Unhealthy = why
	if err := a.cfg.Registry.Register(ctx, rec); err != nil {
		a.log.Warn("register node health", "node", rec.Name, "err", err)
	}
}

// Health reports whether every node of this agent takes work, and if not,
// why (for /readyz).
func (a *Agent) Health() (ok bool, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, name := range a.names {
		if w, out := a.out[name]; out {
			return false, name + ": " + w
		}
	}
	return true, ""
}

// probeLoop brings nodes that took themselves out back once their
// provider works again.
func (a *Agent) probeLoop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		a.mu.Lock()
		var out []string
		for name := range a.out {
			out = append(out, name)
		}
		a.mu.Unlock()
		slices.Sort(out)
		for _, name := range out {
			node := a.nodes[name]
			if p, ok := node.Provider.(providers.Prober); ok {
				if err := p.Probe(ctx); err != nil {
					a.log.Warn("node still out of scheduling: probe failed", "node", name, "err", err)
					continue
				}
			}
			a.mu.Lock()
			delete(a.out, name)
			a.failing[name] = 0
			a.mu.Unlock()
			a.setOut(ctx, node, "")
			a.log.Info("node back in scheduling", "node", name)
		}
	}
}

// pollLoop polls the running tasks: every Poll, or, for the tasks of a
// providers.Notifier, when it says they ended, every Poll while they are
// being stopped, and every SafetyPoll in any case.
func (a *Agent) pollLoop(ctx context.Context) error {
	ended, wait := a.notices(ctx)
	defer wait()
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	if ended == nil { // no Notifier: every task on every tick
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				a.pollOnce(ctx)
			}
		}
	}
	allNotify := true // no task needs the tick but those being stopped
	for _, n := range a.nodes {
		if _, ok := n.Provider.(providers.Notifier); !ok {
			allNotify = false
		}
	}
	safety := time.NewTicker(a.cfg.SafetyPoll)
	defer safety.Stop()
	// Notices of tasks not tracked: one that ended before launch tracked
	// it, or one already recorded. Looked up again as soon as launch
	// tracks a task, and on the next few ticks.
	unmatched := map[providers.Handle]int{}
	// The first tick polls every task, as without a Notifier: those
	// Recover re-attached, whatever they did meanwhile.
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case h := <-ended:
			hs := []providers.Handle{h}
		drain: // take what else has come, to poll it in one go
			for len(hs) < 1024 {
				select {
				case h := <-ended:
					hs = append(hs, h)
				default:
					break drain
				}
			}
			a.pollTasks(ctx, a.notified(hs, unmatched))
		case <-a.tracked:
			// The end of a task that ends as it starts is notified before
			// launch tracks it: it is recorded now, not on the next tick.
			if len(unmatched) == 0 {
				continue
			}
			ts := a.notified(slices.Collect(maps.Keys(unmatched)), nil)
			for _, t := range ts {
				delete(unmatched, t.handle)
			}
			a.pollTasks(ctx, ts)
		case <-t.C:
			if first {
				first = false
				a.pollOnce(ctx)
				continue
			}
			var retry []providers.Handle
			for h, n := range unmatched {
				if retry = append(retry, h); n <= 1 {
					delete(unmatched, h)
				} else {
					unmatched[h] = n - 1
				}
			}
			a.pollTasks(ctx, a.notified(retry, nil))
			a.pollTasks(ctx, a.ticked(allNotify)) // after: a task ended above is no longer tracked
		case <-safety.C:
			clear(unmatched)
			a.pollOnce(ctx)
		}
	}
}

// notices returns one channel carrying the notices of every Notifier among
// the nodes' providers (nil if there is none), and a function that waits
// for the goroutines it started, which end with ctx.
func (a *Agent) notices(ctx context.Context) (<-chan providers.Handle, func()) {
	var chans []<-chan providers.Handle
	for _, name := range a.names {
		if n, ok := a.nodes[name].Provider.(providers.Notifier); ok {
			if c := n.Ended(); !slices.Contains(chans, c) { // nodes may share a provider
				chans = append(chans, c)
			}
		}
	}
	switch len(chans) {
	case 0:
		return nil, func() {}
	case 1:
		return chans[0], func() {}
	}
	out := make(chan providers.Handle, providers.EndedBuffer)
	var wg sync.WaitGroup
	for _, c := range chans {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case h := <-c:
					select {
					case out <- h:
					case <-ctx.Done():
						return
					}
				}
			}
		})
	}
	return out, wg.Wait
}

// notified returns the tracked tasks of the handles hs, once each. With
// unmatched set, it notes there the handles it does not find, to be looked
// up again on the next ticks.
func (a *Agent) notified(hs []providers.Handle, unmatched map[providers.Handle]int) []*task {
	if len(hs) == 0 {
		return nil
	}
	var ts []*task
	seen := make(map[*task]bool, len(hs))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range hs {
		t := a.byHandle(h)
		switch {
		case t == nil && unmatched != nil:
			unmatched[h] = unmatchedTicks
		case t != nil && !seen[t]:
			seen[t] = true
			ts = append(ts, t)
		}
	}
	return ts
}

// unmatchedTicks is how many Poll ticks a notice of an untracked task is
// kept for.
const unmatchedTicks = 3

// byHandle finds the tracked task of h. Handles whose ID is the task ID
// (the local and fake providers': TaskID(job, attempt)) are found by job;
// others by a scan. The caller holds mu.
func (a *Agent) byHandle(h providers.Handle) *task {
	if i := strings.LastIndexByte(h.ID, '-'); i > 0 {
		if t := a.tasks[h.ID[:i]]; t != nil && t.handle == h {
			return t
		}
	}
	for _, t := range a.tasks {
		if t.handle == h {
			return t
		}
	}
	return nil
}

// ticked returns the tasks polled on every Poll tick: those being stopped,
// and those of a provider that does not notify (none if allNotify).
func (a *Agent) ticked(allNotify bool) []*task {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ts []*task
	for t := range a.stopping {
		if a.tasks[t.rec.JobID] != t {
			delete(a.stopping, t) // ended
			continue
		}
		ts = append(ts, t)
	}
	if allNotify {
		return ts
	}
	for _, t := range a.tasks {
		if _, ok := t.prov.(providers.Notifier); !ok && !a.stopping[t] {
			ts = append(ts, t)
		}
	}
	return ts
}

// pollOnce polls every task.
func (a *Agent) pollOnce(ctx context.Context) {
	a.mu.Lock()
	ts := slices.Collect(maps.Values(a.tasks))
	a.mu.Unlock()
	a.pollTasks(ctx, ts)
}

// pollTasks polls ts, retries the stops of those being stopped, and
// records the ends.
func (a *Agent) pollTasks(ctx context.Context, ts []*task) {
	for _, t := range ts {
		if ctx.Err() != nil {
			return
		}
		st, err := t.prov.Poll(ctx, t.handle)
		if errors.Is(err, providers.ErrUnknownHandle) {
			a.neverStarted(ctx, t)
			continue
		}
		if err != nil {
			a.log.Warn("poll", "job", t.rec.JobID, "err", err)
			continue
		}
		a.mu.Lock()
		stopping := t.stop
		due := !a.cfg.Clock.Now().Before(t.stopAt)
		a.mu.Unlock()
		if stopping != "" && due && !st.State.Terminal() {
			a.stopTask(ctx, t)
		}
		if st.State.Terminal() {
			a.finish(ctx, t, st)
		}
	}
}

// stopTask asks the provider to stop t, without waiting long: the poll
// loop records the outcome, and retries the stop while the task runs.
func (a *Agent) stopTask(ctx context.Context, t *task) {
	a.continueTask(ctx, t) // a paused task must run to take its stop signal
	a.mu.Lock()
	if a.stopping == nil {
		a.stopping = map[*task]bool{}
	}
	a.stopping[t] = true // for the poll loop's tick (see ticked)
	a.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := t.prov.Stop(sctx, t.handle); err != nil && sctx.Err() == nil {
		a.log.Warn("stop", "job", t.rec.JobID, "err", err)
	}
}

// evictTask carries out an eviction order (preemption; see
// pool.KindEvict): the task is stopped, now or, in checkpoint mode, after
// SIGUSR1 and the order's grace (the job's checkpoint protocol: on
// SIGUSR1, save progress; a provider that cannot signal gets the stop at
// once), and finish records the job cancelled (preempted) or queued again
// as the mode says. A task not tracked here (ended meanwhile) is left
// alone: the scheduler's preemptor stops waiting for it after its wait.
func (a *Agent) evictTask(ctx context.Context, m pool.Message) {
	a.mu.Lock()
	t := a.tasks[m.JobID]
	if t != nil && t.stop == "" {
		t.stop, t.evict = firstNonEmpty(m.Reason, "preempted"), m.Mode
	}
	a.mu.Unlock()
	if t == nil {
		a.log.Info("eviction of a job this agent does not run", "job", m.JobID)
		return
	}
	if m.Mode == pool.EvictCheckpoint && m.Grace > 0 {
		if sg, ok := t.prov.(providers.Signaler); ok {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := sg.Signal(sctx, t.handle, syscall.SIGUSR1)
			cancel()
			if err == nil {
				a.mu.Lock()
				t.stopAt = a.cfg.Clock.Now().Add(m.Grace)
				if a.stopping == nil {
					a.stopping = map[*task]bool{}
				}
				a.stopping[t] = true // polled on each tick; stopped once due
				a.mu.Unlock()
				a.log.Info("eviction: signalled the job to checkpoint", "job", m.JobID, "grace", m.Grace)
				return
			}
			a.log.Warn("eviction: checkpoint signal failed; stopping now", "job", m.JobID, "err", err)
		}
	}
	a.stopTask(ctx, t)
}

// neverStarted handles a job recorded running here whose task the
// provider never started (the agent died between the compare-and-set and
// the start): nothing ran, so it goes back to the queue.
func (a *Agent) neverStarted(ctx context.Context, t *task) {
	if t.lost {
		a.untrack(ctx, t)
		return
	}
	_, err := a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, wire.JobQueued, jobs.Update{ExpectNode: t.node})
	if err != nil && !errors.Is(err, jobs.ErrConflict) {
		a.log.Warn("requeue unstarted job", "job", t.rec.JobID, "err", err)
		return
	}
	a.log.Info("requeued a job whose task never started", "job", t.rec.JobID)
	a.count(func(s *Stats) { s.Requeued++ })
	if err == nil {
		a.untrackReported(ctx, t, &pool.Report{JobID: t.rec.JobID, Node: t.node, Event: pool.EventEnded, Status: string(wire.JobQueued)})
		return
	}
	a.untrack(ctx, t)
}

// finish records the outcome of an ended task.
func (a *Agent) finish(ctx context.Context, t *task, st providers.Status) {
	u := jobs.Update{ExitCode: st.ExitCode, StdoutPath: st.StdoutPath, StderrPath: st.StderrPath}
	a.mu.Lock()
	evict, why := t.evict, t.stop
	a.mu.Unlock()
	if evict != "" && st.State != providers.StateSucceeded && !t.lost {
		// Evicted (a task that finished meanwhile keeps its success): the
		// eviction's mode says what the job becomes.
		if evict == pool.EvictCancel {
			u.Error = &wire.JobError{Code: "preempted", Message: why}
			a.end(ctx, t, wire.JobCancelled, u)
			return
		}
		a.end(ctx, t, wire.JobQueued, jobs.Update{StdoutPath: st.StdoutPath, StderrPath: st.StderrPath})
		return
	}
	to := wire.JobSucceeded
	switch st.State {
	case providers.StateFailed:
		to = wire.JobFailed
		code := "exit_status"
		switch {
		case st.OOMKilled:
			code = "oom"
		case st.TimedOut:
			code = "timeout"
		case st.ExitCode == nil:
			code = "killed"
		}
		u.Error = &wire.JobError{Code: code, Message: firstNonEmpty(st.Error, exitMessage(st.ExitCode))}
	case providers.StateCancelled:
		to = wire.JobCancelled
		a.mu.Lock()
		why := t.stop
		a.mu.Unlock()
		// The stop order's reason says why (a retracted request, say).
		u.Error = &wire.JobError{Code: "cancelled", Message: firstNonEmpty(why, firstNonEmpty(st.Error, "stopped on request"))}
	case providers.StateLost:
		to = wire.JobFailed
		u.Error = &wire.JobError{Code: "lost", Message: firstNonEmpty(st.Error, "the process could no longer be observed")}
	}
	a.end(ctx, t, to, u)
}

// end records t's outcome (or its retry), reports it and forgets t. A job
// the scheduler ended lost while this agent still ran it (an adapter
// stalled past the node timeout, then resumed) gets its true outcome, as
// after a restart (Recover): a correction.
func (a *Agent) end(ctx context.Context, t *task, to wire.JobStatus, u jobs.Update) {
	if a.endOnce(ctx, t, to, u) {
		a.log.Info("job recorded lost while this node still ran it; correcting it", "job", t.rec.JobID)
		// A copy: reconciliation reads t.lost, unlocked, on its own
		// goroutine; the copy is the task ended now, as the lost one.
		a.mu.Lock()
		c := *t
		a.mu.Unlock()
		c.lost = true
		a.endOnce(ctx, &c, to, u)
	}
}

// endOnce is end's one try; it reports lost, and does nothing else, when
// the record was ended lost meanwhile on this node, for this attempt.
func (a *Agent) endOnce(ctx context.Context, t *task, to wire.JobStatus, u jobs.Update) (lost bool) {
	from := wire.JobRunning
	if t.lost {
		// The scheduler ended it lost while this node was silent: the true
		// outcome replaces that.
		from = wire.JobFailed
	} else if to == wire.JobFailed && t.rec.Attempt > 0 && t.rec.Attempt <= t.rec.Request.MaxRetries {
		to = wire.JobQueued
	}
	// Only while the record still names this node: a job the scheduler
	// ended lost and ran again elsewhere (requeue_lost) is not this
	// task's to end.
	u.ExpectNode = t.node
	if !t.lost && to != wire.JobSucceeded {
		u, _ = a.checkpointUpdate(t.rec.JobID, u)
	}
	a.endMu.RLock()
	defer a.endMu.RUnlock()
	_, mirror, err := a.cfg.Jobs.Change(ctx, t.rec.JobID, from, to, u)
	// A job that ended for good is reported before its entry says so, so
	// that the scheduler frees its slot a round trip sooner; one going
	// back to the queue is mirrored first, as its next start (here, after
	// the report) is mirrored after it and must not be overwritten by it.
	// A correction (t.lost) keeps the old order too.
	mirrored := false
	if err == nil && (!to.Terminal() || t.lost) {
		mirrored = true
		if merr := mirror(ctx); merr != nil {
			a.log.Warn("record job end: job entry not updated", "job", t.rec.JobID, "err", merr)
		}
	}
	if err != nil && !errors.Is(err, jobs.ErrConflict) && !errors.Is(err, jobs.ErrNotFound) {
		a.log.Warn("record job end", "job", t.rec.JobID, "err", err)
		return false // try again on the next poll
	}
	if errors.Is(err, jobs.ErrConflict) && !t.lost {
		if cur, gerr := a.cfg.Jobs.Get(ctx, t.rec.JobID); gerr == nil && cur.Status == wire.JobFailed &&
			cur.Error != nil && cur.Error.Code == wire.JobErrorLost && cur.Node == t.node && cur.Attempt == t.rec.Attempt {
			return true
		}
	}
	if err != nil {
		a.log.Info("job record moved on; outcome not recorded", "job", t.rec.JobID, "outcome", to, "err", err)
	}
	if err == nil && to == wire.JobSucceeded && a.cfg.CheckpointDir != "" {
		// Done: its checkpoints will never be restored.
		if rerr := os.RemoveAll(filepath.Join(a.cfg.CheckpointDir, t.rec.JobID)); rerr != nil {
			a.log.Warn("remove the checkpoints of a finished job", "job", t.rec.JobID, "err", rerr)
		}
	}
	if !t.lost && (err == nil || errors.Is(err, jobs.ErrNotFound)) {
		// Kept a while: if Redis rolled back (the record gone now, or
		// losing this end later), reconciliation records it again.
		a.rememberEnd(t, to, u)
	}
	ev := pool.EventEnded
	if t.lost {
		ev = pool.EventCorrects
	}
	a.count(func(s *Stats) {
		switch {
		case t.lost:
			s.Corrected++
		case to == wire.JobSucceeded:
			s.Succeeded++
		case to == wire.JobQueued:
			s.Requeued++
		case to == wire.JobCancelled:
			s.Cancelled++
		default:
			s.Failed++
		}
	})
	a.untrackReported(ctx, t, &pool.Report{JobID: t.rec.JobID, Node: t.node, Event: ev, Status: string(to)})
	if err == nil && !mirrored {
		if merr := mirror(ctx); merr != nil {
			a.log.Warn("record job end: job entry not updated", "job", t.rec.JobID, "err", merr)
		}
	}
	a.log.Debug("job ended", "job", t.rec.JobID, "node", t.node, "status", to)
	return false
}

// untrack forgets t and settles it: its node's job set no longer lists it.
func (a *Agent) untrack(ctx context.Context, t *task) { a.untrackReported(ctx, t, nil) }

// untrackReported is untrack, and with r reports r in the same round
// trip as the settle (Channel.ReportSettle).
func (a *Agent) untrackReported(ctx context.Context, t *task, r *pool.Report) {
	a.mu.Lock()
	delete(a.tasks, t.rec.JobID)
	a.mu.Unlock()
	if f, ok := t.prov.(interface{ Forget(providers.Handle) }); ok && t.handle.ID != "" {
		f.Forget(t.handle)
	}
	if r != nil {
		if err := a.cfg.Channel.ReportSettle(ctx, *r); err != nil {
			// As for report: the scheduler also rescans the records.
			a.log.Warn("report and settle job", "job", t.rec.JobID, "event", r.Event, "err", err)
		}
		return
	}
	if err := a.cfg.Channel.Settle(ctx, t.node, t.rec.JobID); err != nil {
		a.log.Warn("settle job", "job", t.rec.JobID, "err", err)
	}
}

func (a *Agent) report(ctx context.Context, node, jobID, ev string, st wire.JobStatus) {
	if err := a.cfg.Channel.Report(ctx, pool.Report{JobID: jobID, Node: node, Event: ev, Status: string(st)}); err != nil {
		// The scheduler also rescans the job records: a lost report
		// delays, it does not lose.
		a.log.Warn("report", "job", jobID, "event", ev, "err", err)
	}
}

func (a *Agent) count(f func(*Stats)) {
	a.mu.Lock()
	f(&a.stats)
	a.mu.Unlock()
}

// Recover settles the jobs assigned to this agent's nodes before it went
// away: a job recorded running here is re-attached through its stored
// handle (or put back in the queue if its task never started); a job the
// scheduler ended lost meanwhile is watched, and its true outcome replaces
// `lost` as soon as it is known; anything else is settled.
func (a *Agent) Recover(ctx context.Context) error {
	for _, name := range a.names {
		ids, err := a.cfg.Channel.NodeJobs(ctx, name)
		if err != nil {
			return err
		}
		slices.Sort(ids)
		for _, id := range ids {
			if err := a.recoverJob(ctx, a.nodes[name], id); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *Agent) recoverJob(ctx context.Context, node Node, id string) error {
	name := node.Record.Name
	rec, err := a.cfg.Jobs.Get(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return a.cfg.Channel.Settle(ctx, name, id)
	}
	if err != nil {
		return err
	}
	lost := rec.Status == wire.JobFailed && rec.Error != nil && rec.Error.Code == "lost"
	switch {
	case rec.Node != name:
		return a.cfg.Channel.Settle(ctx, name, id)
	case rec.Status == wire.JobQueued:
		return nil // assigned, not started: its order is still in the stream
	case rec.Status == wire.JobRunning || lost:
	default:
		return a.cfg.Channel.Settle(ctx, name, id)
	}
	h := providers.Handle{Provider: "", ID: TaskID(rec.JobID, rec.Attempt)}
	if rec.Handle != "" {
		if err := json.Unmarshal([]byte(rec.Handle), &h); err != nil {
			a.log.Warn("unreadable handle; using the task id", "job", id, "err", err)
		}
	}
	if h.Provider == "" {
		h.Provider = node.Record.Provider
	}
	t := &task{rec: rec, node: name, handle: h, prov: node.Provider, lost: lost, suspended: rec.SuspendedAt != nil && !lost}
	a.mu.Lock()
	a.tasks[id] = t
	a.mu.Unlock()
	if lost {
		a.log.Info("watching a job recorded lost while this node was silent", "job", id)
	} else {
		a.log.Info("re-attached running job", "job", id, "handle", h.String())
	}
	return nil
}

// TaskID names attempt n of a job on a provider.
func TaskID(jobID string, attempt int) string { return fmt.Sprintf("%s-%d", jobID, attempt) }

func jobEnv(env map[string]string, rec jobs.Job, node string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	out["COMPUTEBOARD_JOB_ID"] = rec.JobID
	out["COMPUTEBOARD_REQUEST_ID"] = rec.RequestEntryID
	out["COMPUTEBOARD_ATTEMPT"] = strconv.Itoa(rec.Attempt)
	out["COMPUTEBOARD_ACCOUNT"] = rec.Account
	out["COMPUTEBOARD_NODE"] = node
	return out
}

// checkpointUpdate adds to u what job id's checkpoint directory holds:
// the newest checkpoint that verifies (also returned: nil when none) and
// the latest refused one. With the protocol off, u is returned as is.
func (a *Agent) checkpointUpdate(id string, u jobs.Update) (jobs.Update, *jobs.Checkpoint) {
	if a.cfg.CheckpointDir == "" {
		return u, nil
	}
	good, refused := LatestCheckpoint(filepath.Join(a.cfg.CheckpointDir, id), a.cfg.Clock.Now())
	u.Checkpoint = good
	if len(refused) > 0 {
		u.CheckpointRefused = &refused[0]
		u.NoCheckpoint = good == nil
		for _, r := range refused {
			a.log.Warn("checkpoint refused", "job", id, "seq", r.Seq, "path", r.Path, "reason", r.Reason)
		}
	}
	return u, good
}

// checkpointEnv adds the checkpoint protocol's variables to env: the
// job's directory (made now, for user runAs), the interval, and the
// checkpoint to restore (rec.Checkpoint, verified at the start), if any.
func (a *Agent) checkpointEnv(env map[string]string, rec jobs.Job, runAs string) map[string]string {
	if a.cfg.CheckpointDir == "" {
		return env
	}
	dir, err := a.checkpointDir(rec.JobID, runAs)
	if err != nil {
		a.log.Warn("checkpoint directory; the job runs without one", "job", rec.JobID, "err", err)
		return env
	}
	env[EnvCheckpointDir] = dir
	env[EnvCheckpointInterval] = strconv.FormatFloat(a.cfg.CheckpointInterval.Seconds(), 'f', -1, 64)
	if rec.Checkpoint != nil {
		env[EnvCheckpointRestore] = rec.Checkpoint.Path
	}
	return env
}

func exitMessage(code *int) string {
	if code == nil {
		return "killed by a signal"
	}
	return fmt.Sprintf("exited with status %d", *code)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
