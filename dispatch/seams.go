package dispatch

import (
	"context"
	"time"

	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// The scheduler's seams, owned here (the consumer). Production passes the
// broker, a fenced *jobs.Store, *pool.Registry and *pool.Channel; the unit
// tests pass fakes.

// Intake is the broker's side: requests handed out and made durable jobs.
type Intake interface {
	NextBatchAdmitted(ctx context.Context, n int, admit func(account string) bool) ([]*broker.Delivery, error)
	AcceptBatch(ctx context.Context, ds []*broker.Delivery) []broker.AcceptResult
}

// JobStore is the job records, through the scheduler's fenced view.
type JobStore interface {
	Get(ctx context.Context, jobID string) (jobs.Job, error)
	Transition(ctx context.Context, jobID string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, error)
	ActiveStates(ctx context.Context) ([]jobs.State, error)
	GetMany(ctx context.Context, ids []string) ([]jobs.Job, error)
	SaveEngineState(ctx context.Context, name string, b []byte) error
	LoadEngineState(ctx context.Context, name string) ([]byte, error)
	// RepairMirrors mirrors the job changes older than grace whose writer
	// died before it mirrored them onto their job entries.
	RepairMirrors(ctx context.Context, grace time.Duration) (int, error)
}

// Nodes is the registry: the nodes, and Redis's time when they were read
// (the time their heartbeats are stamped in).
type Nodes interface {
	Nodes(ctx context.Context) ([]pool.NodeState, time.Time, error)
}

// Orders is the assignment channel and the report stream.
type Orders interface {
	Assign(ctx context.Context, f pool.Fence, as []pool.Assignment) []error
	Stop(ctx context.Context, f pool.Fence, node, jobID, reason string) error
	Evict(ctx context.Context, f pool.Fence, node, jobID string, e pool.Eviction) error
	Resume(ctx context.Context, f pool.Fence, node, jobID, reason string) error
	NodeJobs(ctx context.Context, node string) ([]string, error)
	Placements(ctx context.Context, jobIDs []string) (map[string]providers.Placement, error)
	LastReport(ctx context.Context) (string, error)
	Reports(ctx context.Context, after string, count int64, block time.Duration) ([]pool.Report, error)
}
