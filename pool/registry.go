package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/inventory"
)

// NodeRecord is what an agent registers for one node.
type NodeRecord struct {
	inventory.Node
	Agent    string `json:"agent"`          // the agent process (its id) that serves the node
	Provider string `json:"provider"`       // the provider that runs its tasks ("local", "fake", …)
	Fake     bool   `json:"fake,omitempty"` // a virtual node (adapter serve --fake-nodes): nothing really runs
	// Confined lists the controls the node's provider enforces on each
	// task ("cpu", "memory", "cpuset", "kill"); absent ones are not claimed.
	Confined []string `json:"confined,omitempty"`
	// Suspend says the node's provider can pause a task in place and
	// resume it (providers.Suspender): the scheduler evicts in suspend
	// mode only there (elsewhere such a victim is requeued).
	Suspend bool `json:"suspend,omitempty"`
	// Unhealthy, when set, says why the node took itself out of
	// scheduling (its provider failed several starts in a row: a full or
	// read-only disk, say); the scheduler places nothing on it until its
	// agent clears it.
	Unhealthy string `json:"unhealthy,omitempty"`
}

// NodeState is a registered node and its last heartbeat.
type NodeState struct {
	NodeRecord
	LastBeat time.Time
}

// Registry is the pool's node inventory on the board.
type Registry struct {
	rdb   redis.UniversalClient
	nodes string
	beats string
	boot  string // the reconciliation round (lua/round.lua)
	bootP string // its pending nodes
	round int64  // its timeout, ms
	fixed string // a fixed run id, or "" to read the server's (SetRound)
}

// DefaultRoundTimeout is how long a reconciliation round waits for nodes
// that do not re-assert their jobs (down, or cut off) before assignments
// go on without them.
const DefaultRoundTimeout = 10 * time.Second

// NewRegistry returns the registry of the board whose keys are k.
// Heartbeats are stamped in Redis's time, never a local clock's.
func NewRegistry(rdb redis.UniversalClient, k blackboard.Keys) *Registry {
	return &Registry{rdb: rdb, nodes: k.PoolNodes(), beats: k.PoolBeats(),
		boot: k.PoolBoot(), bootP: k.PoolBootPending(), round: DefaultRoundTimeout.Milliseconds()}
}

// SetRound sets how long a reconciliation round waits for nodes that do
// not answer (give every member of a pool the same; the adapter uses
// pool.node_unhealthy, after which a silent node gets no new work anyway;
// 0 keeps DefaultRoundTimeout) and the fixed run id from ServerRun; call
// it before use.
func (r *Registry) SetRound(timeout time.Duration, fixedRun string) {
	if timeout > 0 {
		r.round = timeout.Milliseconds()
	}
	r.fixed = fixedRun
}

// Run ids for servers whose own cannot be read in a script (ServerRun).
const (
	// RunStatic: the server has no run id (the embedded blackboard, whose
	// board lives and dies with its adapter): one round, at the start.
	RunStatic = "static"
	// RunUnknown: this Redis user may not run INFO: restarts go unseen
	// and there is no reconciliation after a rollback.
	RunUnknown = "unknown"
)

// ServerRun says how reconciliation rounds learn the Redis server's run
// id: "" when INFO server names one (the rounds' Lua steps then read it
// themselves, atomically with what they decide), RunStatic for a server
// without one, RunUnknown (with the error) when INFO is refused.
func ServerRun(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	switch {
	case err != nil:
		return RunUnknown, fmt.Errorf("pool: INFO server: %w", err)
	case strings.Contains(info, "run_id:"):
		return "", nil
	}
	return RunStatic, nil
}

// Register writes the nodes' inventories and a first heartbeat for each.
func (r *Registry) Register(ctx context.Context, recs ...NodeRecord) error {
	if len(recs) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(recs))
	for _, rec := range recs {
		if rec.Name == "" {
			return fmt.Errorf("pool: register: a node without a name")
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("pool: register %s: %w", rec.Name, err)
		}
		fields = append(fields, rec.Name, b)
	}
	if err := r.rdb.HSet(ctx, r.nodes, fields...).Err(); err != nil {
		return fmt.Errorf("pool: register nodes: %w", err)
	}
	names := make([]string, len(recs))
	for i, rec := range recs {
		names[i] = rec.Name
	}
	return r.Beat(ctx, names...)
}

// Beat renews the nodes' heartbeats, stamped with Redis's own time (one
// script for all of them).
func (r *Registry) Beat(ctx context.Context, names ...string) error {
	_, err := r.BeatRound(ctx, names...)
	return err
}

// Round is what a heartbeat learns of the reconciliation round (see
// lua/round.lua): the Redis server's run id, and which of the beating
// nodes must re-assert their jobs before anything new is assigned.
type Round struct {
	Run       string
	Reconcile []string
	// Unregistered are the beating nodes the registry does not hold:
	// their registration was lost with Redis's data; register them again.
	Unregistered []string
}

// BeatRound is Beat, and says which of the nodes must reconcile: after a
// restart of the Redis server (a new run id), every registered node
// re-asserts the jobs it runs (the records may have rolled back) and then
// calls Reconciled.
func (r *Registry) BeatRound(ctx context.Context, names ...string) (Round, error) {
	if len(names) == 0 {
		return Round{}, nil
	}
	args := make([]any, 0, len(names)+2)
	args = append(args, r.round, r.fixed)
	for _, n := range names {
		args = append(args, n)
	}
	res, err := scriptBeat.Run(ctx, r.rdb, []string{r.beats, r.boot, r.bootP, r.nodes}, args...).Slice()
	if err != nil {
		return Round{}, fmt.Errorf("pool: heartbeat: %w", err)
	}
	var rd Round
	if len(res) == 4 {
		rd.Run, _ = res[1].(string)
		rd.Reconcile = strs(res[2])
		rd.Unregistered = strs(res[3])
	}
	return rd, nil
}

// Reconciled says that the nodes have re-asserted their jobs for the
// round of Redis run id run. It returns ErrReconciling when that round is
// no longer the current one (Redis restarted again: reconcile again).
func (r *Registry) Reconciled(ctx context.Context, run string, names ...string) error {
	args := make([]any, 0, len(names)+3)
	args = append(args, run, r.round, r.fixed)
	for _, n := range names {
		args = append(args, n)
	}
	n, err := scriptReconciled.Run(ctx, r.rdb, []string{r.boot, r.bootP, r.nodes}, args...).Int()
	if err != nil {
		return fmt.Errorf("pool: reconciled: %w", err)
	}
	if n < 0 {
		return fmt.Errorf("pool: reconciled for run %s: %w (Redis restarted again)", run, ErrReconciling)
	}
	return nil
}

// RoundOpen reports whether a reconciliation round is open now (nothing
// new is assigned), opening one if the Redis server restarted since the
// last; for tests and /api/v1/pool.
func (r *Registry) RoundOpen(ctx context.Context) (bool, error) {
	n, err := scriptRoundOpen.Run(ctx, r.rdb, []string{r.boot, r.bootP, r.nodes}, r.round, r.fixed).Int()
	if err != nil {
		return false, fmt.Errorf("pool: round: %w", err)
	}
	return n == 1, nil
}

// Deregister removes nodes (a clean stop of their agent): they get no new
// work, and the scheduler settles their jobs as it would a silent node's.
func (r *Registry) Deregister(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, r.nodes, names...)
		m := make([]any, len(names))
		for i, n := range names {
			m[i] = n
		}
		p.ZRem(ctx, r.beats, m...)
		return nil
	})
	return err
}

// Nodes returns every registered node with its last heartbeat, by name,
// and Redis's time when it read them (heartbeats are in that time). A node
// with an unreadable record is skipped and named in the error (the others
// are still returned).
func (r *Registry) Nodes(ctx context.Context) ([]NodeState, time.Time, error) {
	var hc *redis.MapStringStringCmd
	var zc *redis.ZSliceCmd
	var tc *redis.TimeCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		tc = p.Time(ctx)
		hc = p.HGetAll(ctx, r.nodes)
		zc = p.ZRangeWithScores(ctx, r.beats, 0, -1)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("pool: read nodes: %w", err)
	}
	now := tc.Val()
	beats := make(map[string]time.Time, len(zc.Val()))
	for _, z := range zc.Val() {
		if s, ok := z.Member.(string); ok {
			beats[s] = time.UnixMilli(int64(z.Score))
		}
	}
	out := make([]NodeState, 0, len(hc.Val()))
	var bad []string
	for name, raw := range hc.Val() {
		var rec NodeRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Name != name {
			bad = append(bad, name)
			continue
		}
		out = append(out, NodeState{NodeRecord: rec, LastBeat: beats[name]})
	}
	slices.SortFunc(out, func(a, b NodeState) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(bad) > 0 {
		slices.Sort(bad)
		return out, now, fmt.Errorf("pool: unreadable node records: %v", bad)
	}
	return out, now, nil
}

// strs is the strings of a Lua array reply.
func strs(v any) []string {
	xs, _ := v.([]any)
	var out []string
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
