package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/luabatch"
	"github.com/computeboard/computeboard/providers"
)

// AgentGroup is the consumer group agents read their node streams with.
const AgentGroup = "agent"

// Message kinds on a node's assignment stream.
const (
	KindStart = "start" // run the job (Placement set)
	KindStop  = "stop"  // stop the job's task (Reason set)
	// KindEvict stops the job's task to make room for another (Reason,
	// Mode and, for checkpoint, Grace set): preemption. Unlike a stop it
	// says what the job becomes: cancelled (EvictCancel), or queued again
	// (EvictRequeue; EvictCheckpoint signals the task first and stops it
	// after Grace; EvictSuspend pauses it in place: it stays running, on
	// its node, until a KindResume order).
	KindEvict = "evict"
	// KindResume continues a job's task that an EvictSuspend order paused
	// (Reason set).
	KindResume = "resume"
)

// Eviction modes of a KindEvict order (engine.EvictionMode's values that
// the agent carries out).
const (
	EvictCancel     = "cancel"
	EvictRequeue    = "requeue"
	EvictCheckpoint = "checkpoint"
	EvictSuspend    = "suspend" // only on a node whose record says Suspend
)

// validEvictMode reports whether m is one of the eviction modes.
func validEvictMode(m string) bool {
	switch m {
	case EvictCancel, EvictRequeue, EvictCheckpoint, EvictSuspend:
		return true
	}
	return false
}

// Eviction is what a KindEvict order says besides its job.
type Eviction struct {
	Mode   string        // EvictCancel, EvictRequeue, EvictCheckpoint or EvictSuspend
	Reason string        // for humans: by which job, under which policy
	Grace  time.Duration // EvictCheckpoint: how long the task has after the signal
}

// Assignment is one placement the scheduler gives a node.
type Assignment struct {
	JobID     string
	Placement providers.Placement // Placement.Node is the node
}

// Message is one order an agent read from its node's stream.
type Message struct {
	ID        string // stream entry ID
	Node      string
	Kind      string
	JobID     string
	Placement providers.Placement // KindStart
	Reason    string              // KindStop, KindEvict, KindResume
	Mode      string              // KindEvict: EvictCancel, EvictRequeue, EvictCheckpoint or EvictSuspend
	Grace     time.Duration       // KindEvict with EvictCheckpoint
	Err       error               // a malformed message (acknowledge and drop it)
}

// Channel is the per-node assignment streams and the report stream of one
// board.
type Channel struct {
	rdb    redis.UniversalClient
	keys   blackboard.Keys
	maxLen int64
	round  int64  // the reconciliation round's timeout, ms
	fixed  string // a fixed run id, or "" (Registry.SetRound)
}

// NewChannel returns the channel of the board whose keys are k.
func NewChannel(rdb redis.UniversalClient, k blackboard.Keys) *Channel {
	return &Channel{rdb: rdb, keys: k, maxLen: 100_000, round: DefaultRoundTimeout.Milliseconds()}
}

// SetRound is Registry.SetRound for the assignments; call it before use.
func (c *Channel) SetRound(timeout time.Duration, fixedRun string) {
	if timeout > 0 {
		c.round = timeout.Milliseconds()
	}
	c.fixed = fixedRun
}

// Assign gives each job to its placement's node, in one pipeline of fenced
// steps; errs[i] is nil (assigned), ErrFenced, ErrNotQueued, ErrNoJob or
// ErrReconciling (nothing changed for that job), or a Redis error.
func (c *Channel) Assign(ctx context.Context, f Fence, as []Assignment) []error {
	errs := make([]error, len(as))
	if len(as) == 0 {
		return errs
	}
	calls := make([]luabatch.Call, len(as))
	for i, a := range as {
		b, err := json.Marshal(a.Placement)
		if err != nil {
			errs[i] = err
			continue
		}
		n := a.Placement.Node
		calls[i] = luabatch.Call{Keys: []string{f.Key, c.keys.Job(a.JobID), c.keys.NodeAssign(n), c.keys.NodeJobs(n),
			c.keys.PoolBoot(), c.keys.PoolBootPending(), c.keys.PoolNodes()},
			Args: []any{f.Epoch, n, a.JobID, b, c.maxLen, c.round, c.fixed}}
	}
	cmds := luabatch.Eval(ctx, c.rdb, scriptAssign, calls)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		res, err := cmd.Slice()
		if err != nil {
			errs[i] = fmt.Errorf("pool: assign %s: %w", as[i].JobID, err)
			continue
		}
		code, _ := res[0].(int64)
		detail, _ := res[1].(string)
		switch code {
		case 1:
		case 0:
			errs[i] = fmt.Errorf("pool: assign %s: %w (status %s)", as[i].JobID, ErrNotQueued, detail)
		case -1:
			errs[i] = fmt.Errorf("pool: assign %s: %w", as[i].JobID, ErrNoJob)
		case -3:
			errs[i] = fmt.Errorf("pool: assign %s: %w (Redis run %s)", as[i].JobID, ErrReconciling, detail)
		default:
			errs[i] = fmt.Errorf("pool: assign %s: %w (epoch %d, current %s)", as[i].JobID, ErrFenced, f.Epoch, detail)
		}
	}
	return errs
}

// Stop orders node's agent to stop the job's task (fenced).
func (c *Channel) Stop(ctx context.Context, f Fence, node, jobID, reason string) error {
	n, err := scriptOrder.Run(ctx, c.rdb, []string{f.Key, c.keys.NodeAssign(node)}, f.Epoch, KindStop, jobID, reason).Int()
	if err != nil {
		return fmt.Errorf("pool: stop %s on %s: %w", jobID, node, err)
	}
	if n != 1 {
		return fmt.Errorf("pool: stop %s on %s: %w", jobID, node, ErrFenced)
	}
	return nil
}

// Evict orders node's agent to stop the job's task to make room for
// another (fenced): the job then ends cancelled or goes back to the queue,
// as e.Mode says.
func (c *Channel) Evict(ctx context.Context, f Fence, node, jobID string, e Eviction) error {
	if !validEvictMode(e.Mode) {
		return fmt.Errorf("pool: evict %s on %s: unknown mode %q", jobID, node, e.Mode)
	}
	n, err := scriptOrder.Run(ctx, c.rdb, []string{f.Key, c.keys.NodeAssign(node)}, f.Epoch, KindEvict, jobID, e.Reason,
		"mode", e.Mode, "grace_ms", e.Grace.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("pool: evict %s on %s: %w", jobID, node, err)
	}
	if n != 1 {
		return fmt.Errorf("pool: evict %s on %s: %w", jobID, node, ErrFenced)
	}
	return nil
}

// Resume orders node's agent to continue the job's task, paused by an
// EvictSuspend eviction (fenced).
func (c *Channel) Resume(ctx context.Context, f Fence, node, jobID, reason string) error {
	n, err := scriptOrder.Run(ctx, c.rdb, []string{f.Key, c.keys.NodeAssign(node)}, f.Epoch, KindResume, jobID, reason).Int()
	if err != nil {
		return fmt.Errorf("pool: resume %s on %s: %w", jobID, node, err)
	}
	if n != 1 {
		return fmt.Errorf("pool: resume %s on %s: %w", jobID, node, ErrFenced)
	}
	return nil
}

// EnsureGroups creates the agent group on each node's stream (and the
// stream), reading from its start, so orders written before the agent
// first came up are read too.
func (c *Channel) EnsureGroups(ctx context.Context, nodes []string) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, n := range nodes {
			p.XGroupCreateMkStream(ctx, c.keys.NodeAssign(n), AgentGroup, "0")
		}
		return nil
	})
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("pool: create agent groups: %w", err)
	}
	return nil
}

// Read returns up to count orders for the nodes, waiting up to block for
// one (0: don't wait). With pending set it re-reads the orders delivered to
// consumer earlier and never acknowledged (after an agent restart) instead
// of new ones.
func (c *Channel) Read(ctx context.Context, consumer string, nodes []string, count int64, block time.Duration, pending bool) ([]Message, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	streams := make([]string, 0, 2*len(nodes))
	byKey := make(map[string]string, len(nodes))
	for _, n := range nodes {
		k := c.keys.NodeAssign(n)
		streams = append(streams, k)
		byKey[k] = n
	}
	id := ">"
	if pending {
		id = "0"
	}
	for range nodes {
		streams = append(streams, id)
	}
	a := &redis.XReadGroupArgs{Group: AgentGroup, Consumer: consumer, Streams: streams, Count: count, Block: block}
	if block <= 0 {
		a.Block = -1
	}
	res, err := c.rdb.XReadGroup(ctx, a).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pool: read orders: %w", err)
	}
	var out []Message
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, decodeMessage(byKey[s.Stream], m))
		}
	}
	return out, nil
}

func decodeMessage(node string, m redis.XMessage) Message {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	msg := Message{ID: m.ID, Node: node, Kind: str("kind"), JobID: str("job"), Reason: str("reason")}
	switch {
	case msg.JobID == "":
		msg.Err = fmt.Errorf("order %s on node %s names no job", m.ID, node)
	case msg.Kind == KindStart:
		if err := json.Unmarshal([]byte(str("placement")), &msg.Placement); err != nil {
			msg.Err = fmt.Errorf("order %s on node %s: placement: %w", m.ID, node, err)
		}
	case msg.Kind == KindStop, msg.Kind == KindResume:
	case msg.Kind == KindEvict:
		msg.Mode = str("mode")
		ms, _ := strconv.ParseInt(str("grace_ms"), 10, 64)
		msg.Grace = time.Duration(ms) * time.Millisecond
		if !validEvictMode(msg.Mode) {
			msg.Err = fmt.Errorf("order %s on node %s: unknown eviction mode %q", m.ID, node, msg.Mode)
		}
	default:
		msg.Err = fmt.Errorf("order %s on node %s: unknown kind %q", m.ID, node, msg.Kind)
	}
	return msg
}

// ReportAck appends the reports rs (as Report does) and acknowledges and
// deletes the handled orders msgs, in one round trip, the reports first:
// an agent's batch of orders, with the starts it made.
func (c *Channel) ReportAck(ctx context.Context, rs []Report, msgs []Message) error {
	if len(rs) == 0 && len(msgs) == 0 {
		return nil
	}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range rs {
			p.XAdd(ctx, c.reportArgs(r))
		}
		for _, m := range msgs {
			k := c.keys.NodeAssign(m.Node)
			p.XAck(ctx, k, AgentGroup, m.ID)
			p.XDel(ctx, k, m.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pool: report and ack orders: %w", err)
	}
	return nil
}

// Settle removes jobs from node's job set: their outcome is recorded.
func (c *Channel) Settle(ctx context.Context, node string, jobIDs ...string) error {
	if len(jobIDs) == 0 {
		return nil
	}
	m := make([]any, len(jobIDs))
	for i, id := range jobIDs {
		m[i] = id
	}
	return c.rdb.SRem(ctx, c.keys.NodeJobs(node), m...).Err()
}

// ReportSettle is Report(r) and Settle(r.Node, r.JobID) in one round
// trip, the report first: an agent's end of a job.
func (c *Channel) ReportSettle(ctx context.Context, r Report) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, c.reportArgs(r))
		p.SRem(ctx, c.keys.NodeJobs(r.Node), r.JobID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("pool: report and settle %s: %w", r.JobID, err)
	}
	return nil
}

// Hold puts jobs back in node's job set (a job its agent re-asserted
// after Redis lost the assignment), so a restarted agent finds them.
func (c *Channel) Hold(ctx context.Context, node string, jobIDs ...string) error {
	if len(jobIDs) == 0 {
		return nil
	}
	m := make([]any, len(jobIDs))
	for i, id := range jobIDs {
		m[i] = id
	}
	return c.rdb.SAdd(ctx, c.keys.NodeJobs(node), m...).Err()
}

// NodeJobs returns the jobs assigned to node and not yet settled.
func (c *Channel) NodeJobs(ctx context.Context, node string) ([]string, error) {
	ids, err := c.rdb.SMembers(ctx, c.keys.NodeJobs(node)).Result()
	if err != nil {
		return nil, fmt.Errorf("pool: jobs of node %s: %w", node, err)
	}
	return ids, nil
}

// Placements reads the placements stored on job records by Assign (jobs
// never assigned are absent from the map).
func (c *Channel) Placements(ctx context.Context, jobIDs []string) (map[string]providers.Placement, error) {
	cmds := make([]*redis.StringCmd, len(jobIDs))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range jobIDs {
			cmds[i] = p.HGet(ctx, c.keys.Job(id), "placement")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("pool: read placements: %w", err)
	}
	out := make(map[string]providers.Placement, len(jobIDs))
	for i, cmd := range cmds {
		var pl providers.Placement
		if s := cmd.Val(); s != "" && json.Unmarshal([]byte(s), &pl) == nil {
			out[jobIDs[i]] = pl
		}
	}
	return out, nil
}

// Report events.
const (
	EventStarted  = "started"  // the job's task started (status running)
	EventEnded    = "ended"    // the job reached a terminal status, or went back to the queue
	EventRefused  = "refused"  // the agent did not start the job (not queued any more, or moved elsewhere)
	EventCorrects = "corrects" // a job ended lost got its true outcome
	// EventSuspended: the job's task is paused in place (an EvictSuspend
	// eviction; the record still running, with suspended_at);
	// EventResumed: it runs again (a KindResume order).
	EventSuspended = "suspended"
	EventResumed   = "resumed"
)

// Report is one agent → scheduler notice. The job record is the truth; a
// report only tells the scheduler to look.
type Report struct {
	ID     string // stream entry ID (on read)
	JobID  string
	Node   string
	Event  string
	Status string // the job's status as the agent recorded it
}

// Report appends reports to the report stream (one pipeline).
func (c *Channel) Report(ctx context.Context, rs ...Report) error {
	if len(rs) == 0 {
		return nil
	}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range rs {
			p.XAdd(ctx, c.reportArgs(r))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pool: report: %w", err)
	}
	return nil
}

// reportArgs is the XADD of report r.
func (c *Channel) reportArgs(r Report) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: c.keys.PoolReports(), MaxLen: c.maxLen, Approx: true,
		Values: []any{"job", r.JobID, "node", r.Node, "event", r.Event, "status", r.Status}}
}

// LastReport is the ID of the newest report ("0-0" when none): where a
// newly elected scheduler starts reading, after its own rescan.
func (c *Channel) LastReport(ctx context.Context) (string, error) {
	res, err := c.rdb.XRevRangeN(ctx, c.keys.PoolReports(), "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("pool: last report: %w", err)
	}
	if len(res) == 0 {
		return "0-0", nil
	}
	return res[0].ID, nil
}

// Reports returns up to count reports after the ID after, waiting up to
// block for one (0: don't wait).
func (c *Channel) Reports(ctx context.Context, after string, count int64, block time.Duration) ([]Report, error) {
	a := &redis.XReadArgs{Streams: []string{c.keys.PoolReports(), after}, Count: count, Block: block}
	if block <= 0 {
		a.Block = -1
	}
	res, err := c.rdb.XRead(ctx, a).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pool: read reports: %w", err)
	}
	var out []Report
	for _, s := range res {
		for _, m := range s.Messages {
			str := func(k string) string { s, _ := m.Values[k].(string); return s }
			out = append(out, Report{ID: m.ID, JobID: str("job"), Node: str("node"), Event: str("event"), Status: str("status")})
		}
	}
	return out, nil
}
