package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/wire"
)

// Spec is what the scheduler needs to know of a request's command.
type Spec struct {
	Timeout     time.Duration // the run-time limit (backfill plans the job's end there)
	RequeueLost bool          // run the job again when its node is lost (at least once)
	// NonPreemptible: the job is never evicted; PreemptMode: how it is
	// evicted ("" = Config.Preemption.DefaultMode). From its template.
	NonPreemptible bool
	PreemptMode    engine.EvictionMode
}

// Resolver checks a request against the operator's templates or
// allowlist, as the scheduler sees them.
type Resolver func(wire.Request) (Spec, *wire.Error)

// Config configures the scheduler.
type Config struct {
	Policy   engine.Policy
	Accounts []engine.Account
	Resolve  Resolver
	// StorageTier is the tier of storage requests that name none.
	StorageTier string
	// MaxPending bounds the jobs waiting in the engine, shared by the
	// accounts' shares (default 10000).
	MaxPending int
	// Interval is the longest time between cycles (default 200 ms); a cycle
	// also runs on every new job and every report.
	Interval time.Duration
	// FullReplan is the longest time between two engine runs (default
	// 10 s). The engine runs only when its input changed (a new job, an
	// end, a cancel, a node change; see Scheduler.schedule), and at least
	// this often for what time alone changes: ageing, deadline urgency and
	// verdicts, reservations, backfill windows, estimated starts, gang
	// timeouts. Those move over minutes to hours (ageing: half a level an
	// hour), so 10 s late is nothing to them, and a full plan of 10,000
	// pending jobs (25–80 ms) every 10 s is under 1% of a core.
	FullReplan time.Duration
	// GangTimeout ends a gang still missing members this long after its
	// first was accepted (default 5 min).
	GangTimeout time.Duration
	// NodeUnhealthy: a node silent this long gets no new work, and its
	// assigned but unstarted jobs are placed again (default 3 × 2 s beats).
	NodeUnhealthy time.Duration
	// NodeTimeout: a node silent this long has its running jobs ended
	// `lost` (or requeued, see Spec.RequeueLost) (default 5 min).
	NodeTimeout time.Duration
	// AssignTimeout: an assigned job its healthy node has not started
	// after this long is placed again (default 60 s).
	AssignTimeout time.Duration
	// Rescan is how often the active job records are re-read to catch
	// what reports missed (default 30 s).
	Rescan time.Duration
	// NodeRefresh is how often the registry is re-read (default 1 s).
	NodeRefresh time.Duration
	// NodeClasses are the shapes of nodes the pool may have: a request
	// that fits none of them nor any registered node is rejected
	// impossible_request; one that fits a class but no registered node
	// waits. Empty: the registered nodes only.
	NodeClasses []engine.Node
	// Seed seeds each cycle (xor the cycle number).
	Seed uint64
	// CheckpointName is where the engine state is saved (default "scheduler").
	CheckpointName string
	// CheckpointEvery is the engine checkpoint interval (default 10 s).
	CheckpointEvery time.Duration
	// Preemption configures evictions (engine.PreemptionConfig; the zero
	// value is off): the engine may plan to stop running jobs so that a
	// more urgent one fits, and the scheduler carries the evictions out
	// (preempt.go; suspend: suspend.go, only on nodes whose provider can
	// suspend, else requeue).
	Preemption engine.PreemptionConfig
	// PreemptGrace is how long a victim evicted in checkpoint mode has
	// between SIGUSR1 and its stop (default 30 s).
	PreemptGrace time.Duration
	// PreemptWait is how long a preemptor keeps the room its victims free
	// while they stop; past it, it waits in the queue again (default
	// AssignTimeout + PreemptGrace).
	PreemptWait time.Duration
	// OnEviction is called for each eviction ordered (telemetry); it must
	// not block. Nil: nothing.
	OnEviction func(Eviction)
	// RequestStatus reads the statuses of request entries (retractions
	// missed while no scheduler ran); nil skips the check.
	RequestStatus func(ctx context.Context, entryIDs []string) ([]string, error)
	Clock         clock.Clock
	Logger        *slog.Logger
	// Notify is called (never blocking) when the figures changed.
	Notify func()
	// AfterFullPlan, if set, is called on the Run goroutine after each
	// full plan (every FullReplan, and whenever a partial plan cannot
	// serve) with the number of pending jobs it planned, once the plan's
	// working data is garbage: the adapter returns that memory to the OS
	// after a deep queue's plan (see internal/adapter). It must not block
	// for long: the next cycle waits for it.
	AfterFullPlan func(pending int)
}

func (c *Config) fill() error {
	if c.Resolve == nil {
		return errors.New("dispatch: Config.Resolve is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 10000
	}
	def(&c.Interval, 200*time.Millisecond)
	def(&c.FullReplan, 10*time.Second)
	def(&c.GangTimeout, 5*time.Minute)
	def(&c.NodeUnhealthy, 6*time.Second)
	def(&c.NodeTimeout, 5*time.Minute)
	def(&c.AssignTimeout, time.Minute)
	def(&c.Rescan, 30*time.Second)
	def(&c.NodeRefresh, time.Second)
	def(&c.CheckpointEvery, 10*time.Second)
	def(&c.PreemptGrace, 30*time.Second)
	def(&c.PreemptWait, c.AssignTimeout+c.PreemptGrace)
	if !engine.ValidPreemptPolicy(c.Preemption.Policy) {
		return fmt.Errorf("dispatch: unknown preemption policy %q", c.Preemption.Policy)
	}
	for pool, p := range c.Preemption.PoolPolicy {
		if !engine.ValidPreemptPolicy(p) {
			return fmt.Errorf("dispatch: pool %s: unknown preemption policy %q", pool, p)
		}
	}
	if c.NodeTimeout < c.NodeUnhealthy {
		c.NodeTimeout = c.NodeUnhealthy
	}
	if c.CheckpointName == "" {
		c.CheckpointName = "scheduler"
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Notify == nil {
		c.Notify = func() {}
	}
	if c.OnEviction == nil {
		c.OnEviction = func(Eviction) {}
	}
	return nil
}
