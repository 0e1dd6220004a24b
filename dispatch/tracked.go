package dispatch

import (
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/providers"
)

// tracked is one job the scheduler knows about. Owned by the Run
// goroutine; readers get copies through methods that take s.mu.
//
// It keeps only what scheduling needs, not the job record: the engine's
// view of the request (jobCore; its timeout is the spec's), and nothing
// else of the command, arguments, environment or payload (the agent reads
// those from the record). A deep queue is mostly tracked jobs, so the
// layout is compact: what varies per job inline, what a template or a
// request's placement wishes repeat shared (jobShape), times as Unix
// nanoseconds, flags together. A pending job costs about 400 B (this
// struct's 288, its ID, its map entries) plus its 128 B explanation from
// the last full plan: 525 B in TestPendingMemory.
type tracked struct {
	jobCore
	accepted  float64 // the record's accepted_at (gang timeout)
	phase     Phase
	placement *providers.Placement // assigned or running: where; nil while pending
	started   time.Time            // running: when it started; assigned: when assigned
	explained explainKey           // the explanation last published
	explAt    int64                // when (Unix ns; 0 never)
	// evicting: an eviction of this running job was ordered (it is no
	// candidate again); hold: this pending job waits for its victims to
	// end (see preempt.go).
	evicting *Eviction
	hold     *preemptHold
	pos      int32 // its position in the last full plan's order (partial.go)
	// suspended: a running job its agent paused in place (an eviction in
	// suspend mode); the ledger holds only its pin (suspend.go).
	// resuming: a resume order was sent; the record still says suspended
	// until the agent has resumed it.
	suspended   bool
	resuming    bool
	dropped     bool // forgotten (dropLocked): no longer in jobs_
	inOrder     bool // in the last full plan's queues (partial.go)
	requeueLost bool // Spec.RequeueLost
}

// jobCore is an engine.Job kept small: job() rebuilds the engine's value.
// Submitted and Deadline are Unix nanoseconds (the record's epoch floats
// through epochTime: time.Unix of the same instant gives back an equal
// time.Time); shape holds the rarely varying rest, shared between jobs
// that ask alike (nil when all of it is zero).
type jobCore struct {
	jid         string
	acct        string
	request     engine.Resources
	submitted   int64
	deadline    int64 // 0: none
	estDuration time.Duration
	timeLimit   time.Duration
	gangID      string
	gangSize    int32
	priority    int32
	shape       *jobShape
}

// jobShape is the part of an engine.Job that templates and placement
// wishes repeat across many jobs (internTable.shape). Shared and never
// modified.
type jobShape struct {
	shapeFields
	nodeSelector map[string]string
}

type shapeFields struct {
	gpuModel, migProfile, storageTier string
	strategy                          engine.Strategy
	preemptMode                       engine.EvictionMode
	numaLocal, nonPreemptible         bool
}

// compactJob is j as a jobCore, its account and shape shared through it.
// j.PreemptModes is not kept: a pending job never has them (the dispatcher
// sets them on running copies, runningLocked).
func (it *internTable) compactJob(j engine.Job) jobCore {
	c := jobCore{
		jid: j.ID, acct: it.str(j.Account), request: j.Request,
		submitted: j.Submitted.UnixNano(), estDuration: j.EstDuration, timeLimit: j.TimeLimit,
		gangID: j.GangID, gangSize: int32(j.GangSize), priority: int32(j.Priority), shape: it.shape(&j),
	}
	if !j.Deadline.IsZero() {
		c.deadline = j.Deadline.UnixNano()
	}
	return c
}

// job is the engine's view of the job: what compactJob was given, less
// PreemptModes.
func (c *jobCore) job() engine.Job {
	j := engine.Job{
		ID: c.jid, Account: c.acct, Priority: int(c.priority), Submitted: time.Unix(0, c.submitted),
		EstDuration: c.estDuration, TimeLimit: c.timeLimit, Request: c.request,
		GangID: c.gangID, GangSize: int(c.gangSize),
	}
	if c.deadline != 0 {
		j.Deadline = time.Unix(0, c.deadline)
	}
	if sh := c.shape; sh != nil {
		j.GPUModel, j.MIGProfile, j.StorageTier = sh.gpuModel, sh.migProfile, sh.storageTier
		j.NodeSelector, j.Strategy, j.PreemptMode = sh.nodeSelector, sh.strategy, sh.preemptMode
		j.NUMALocal, j.NonPreemptible = sh.numaLocal, sh.nonPreemptible
	}
	return j
}

// id is the job's ID.
func (c *jobCore) id() string { return c.jid }

// migProfile is the job's MIG profile ("" whole GPUs).
func (c *jobCore) migProfile() string {
	if c.shape == nil {
		return ""
	}
	return c.shape.migProfile
}

// storageTier is the job's storage tier ("" as its request says).
func (c *jobCore) storageTier() string {
	if c.shape == nil {
		return ""
	}
	return c.shape.storageTier
}

// preemptMode is how the job wants to be evicted ("" the default).
func (c *jobCore) preemptMode() engine.EvictionMode {
	if c.shape == nil {
		return ""
	}
	return c.shape.preemptMode
}

// submittedAt is when the job started waiting.
func (c *jobCore) submittedAt() time.Time { return time.Unix(0, c.submitted) }

// node is where an assigned or running job is ("" while pending).
func (t *tracked) node() string {
	if t.placement == nil {
		return ""
	}
	return t.placement.Node
}

type explainKey struct {
	reason engine.Code
	pos    int32
	placed bool
}
