package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// Store reads and writes the job records of one board. It is safe for
// concurrent use; Fenced returns views of it that share its config.
type Store struct {
	rdb   redis.UniversalClient
	board *blackboard.Store // job entries and events
	keys  blackboard.Keys
	cfg   Config
	log   *slog.Logger
	fence Fence    // the zero Fence: unfenced
	stats *counter // shared by every view
}

type counter struct{ cancelledAtStart atomic.Int64 }

// Fence is what a fenced writer's accepts and transitions carry: the key
// holding the current fencing epoch (blackboard.Keys.PoolEpoch(): it must
// be a key of the same board, so that scripts stay in one Cluster slot)
// and the epoch the writer was elected with. The zero Fence (Key "") means
// unfenced.
type Fence struct {
	Key   string
	Epoch int64
}

// New returns a Store for the board of store on rdb.
func New(rdb redis.UniversalClient, store *blackboard.Store, cfg Config) (*Store, error) {
	if rdb == nil || store == nil {
		return nil, errors.New("jobs: new: nil redis client or store")
	}
	cfg.fill()
	return &Store{rdb: rdb, board: store, keys: store.Keys(), cfg: cfg,
		log: cfg.Logger.With("component", "jobs"), stats: &counter{}}, nil
}

// Fenced returns a view of s whose accepts (Accept, AcceptBatch) and
// transitions (Transition, and the cancellation ConsumeAccepted may make)
// first check, in the same Lua step, that f.Key holds f.Epoch; when it
// holds anything else (or nothing) they change nothing and fail with
// ErrFenced. Reads, the job entries (a copy of the record), the duplicate
// listing and MarkCancelRequested (a flag any broker may set) are not
// fenced. A zero f returns an unfenced view.
func (s *Store) Fenced(f Fence) *Store {
	v := *s
	v.fence = f
	return &v
}

// Fence returns the fence of this view (zero: unfenced).
func (s *Store) Fence() Fence { return s.fence }

// fenceKeys returns the extra KEYS entry and the epoch argument of a
// fenced script call: none and "" for an unfenced view.
func (s *Store) fenceKeys() ([]string, string, error) {
	if s.fence.Key == "" {
		return nil, "", nil
	}
	if !strings.HasPrefix(s.fence.Key, s.keys.Prefix()+":") {
		return nil, "", fmt.Errorf("fence key %q is not a key of board %s", s.fence.Key, s.keys.Prefix())
	}
	return []string{s.fence.Key}, strconv.FormatInt(s.fence.Epoch, 10), nil
}

// fencedErr is ErrFenced for a script's reply holding the fence key's
// current value.
func (s *Store) fencedErr(cur any) error {
	c, _ := cur.(string)
	if c == "" {
		c = "none"
	}
	return fmt.Errorf("%w: epoch %d is not the current epoch (%s holds %s)", ErrFenced, s.fence.Epoch, s.fence.Key, c)
}

// Stats counts what this Store (and its views) did since New.
type Stats struct {
	// CancelledAtStart counts starts (queued → running) that found the
	// request withdrawn and cancelled the job instead (ErrWithdrawn).
	CancelledAtStart int64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{CancelledAtStart: s.stats.cancelledAtStart.Load()}
}

// Get reads one job record; ErrNotFound if there is none.
func (s *Store) Get(ctx context.Context, jobID string) (Job, error) {
	h, err := s.recordHash(ctx, jobID)
	if err != nil {
		return Job{}, fmt.Errorf("jobs: get %s: %w", jobID, err)
	}
	return jobFromHash(jobID, h)
}

// recordHash reads job id's record, the fields kept beside it included,
// in one round trip; an empty map when there is no record.
func (s *Store) recordHash(ctx context.Context, id string) (map[string]string, error) {
	var r recordCmds
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		r = s.readRecord(ctx, p, id)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return r.hash()
}

// recordCmds reads one job record: its HASH and the fields kept beside it
// (sideFields, when longer than Redis keeps in a listpack; a record written
// before keeps them in its HASH, and still reads so).
type recordCmds struct {
	h    *redis.MapStringStringCmd
	side []*redis.StringCmd
}

// readRecord queues the reads of job id's record on p.
func (s *Store) readRecord(ctx context.Context, p redis.Pipeliner, id string) recordCmds {
	r := recordCmds{h: p.HGetAll(ctx, s.keys.Job(id)), side: make([]*redis.StringCmd, len(sideFields))}
	for i, f := range sideFields {
		r.side[i] = p.Get(ctx, s.keys.JobField(id, f))
	}
	return r
}

// hash returns the record's fields, those kept beside it included; an
// empty map when there is no record.
func (r recordCmds) hash() (map[string]string, error) {
	h, err := r.h.Result()
	if err != nil {
		return nil, err
	}
	for i, c := range r.side {
		v, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, err
		case len(h) > 0:
			addSide(h, sideFields[i], v)
		}
	}
	return h, nil
}

// jobFromHash decodes the record HASH h of jobID, as Get returns it.
func jobFromHash(jobID string, h map[string]string) (Job, error) {
	if len(h) == 0 {
		return Job{}, fmt.Errorf("jobs: get %s: %w", jobID, ErrNotFound)
	}
	j, err := decodeRecord(h)
	if err != nil {
		return Job{}, fmt.Errorf("jobs: get %s: %w", jobID, err)
	}
	return j, nil
}

// Exists reports whether job jobID has a record.
func (s *Store) Exists(ctx context.Context, jobID string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Job(jobID)).Result()
	if err != nil {
		return false, fmt.Errorf("jobs: look up %s: %w", jobID, err)
	}
	return n > 0, nil
}

// ListActive returns every job not yet in a terminal status, oldest
// acceptance first: what an adapter reloads after a restart.
func (s *Store) ListActive(ctx context.Context) ([]Job, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.JobsActive(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("jobs: list active: %w", err)
	}
	return s.GetMany(ctx, ids)
}

// ActivePage returns the first limit active jobs (oldest acceptance
// first) with status st ("": any), and how many active jobs have it. It
// reads whole records only for the page: the others' status field at most
// (none without st), so a listing costs little however many jobs are
// active.
func (s *Store) ActivePage(ctx context.Context, st wire.JobStatus, limit int) ([]Job, int, error) {
	limit = max(limit, 0)
	if st == "" {
		n, err := s.rdb.ZCard(ctx, s.keys.JobsActive()).Result()
		if err != nil {
			return nil, 0, fmt.Errorf("jobs: active page: %w", err)
		}
		var ids []string
		if limit > 0 {
			if ids, err = s.rdb.ZRange(ctx, s.keys.JobsActive(), 0, int64(limit)-1).Result(); err != nil {
				return nil, 0, fmt.Errorf("jobs: active page: %w", err)
			}
		}
		js, err := s.GetMany(ctx, ids)
		return js, int(n), err
	}
	ids, err := s.rdb.ZRange(ctx, s.keys.JobsActive(), 0, -1).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("jobs: active page: %w", err)
	}
	sts := make([]*redis.StringCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			sts[i] = p.HGet(ctx, s.keys.Job(id), "status")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("jobs: active page: %w", err)
	}
	var page []string
	total := 0
	for i, c := range sts {
		if c.Val() != string(st) {
			continue
		}
		total++
		if len(page) < limit {
			page = append(page, ids[i])
		}
	}
	js, err := s.GetMany(ctx, page)
	return js, total, err
}

// State is what a periodic check of the active jobs against a
// scheduler's view needs of each record (ActiveStates).
type State struct {
	JobID        string
	Status       wire.JobStatus
	Node         string
	SuspendedAt  *float64 // while paused in place (Job.SuspendedAt)
	CheckpointAt float64  // the verified checkpoint's time (Job.Checkpoint.At); 0: none
}

// statePage is how many records ActiveStates reads per round trip.
const statePage = 1000

// ActiveStates returns the State of every job not yet in a terminal
// status, oldest acceptance first, reading four fields of each record, a
// page of records per round trip. A deep queue's periodic check read and
// decoded every whole record before (its request, explanation and all):
// 36 MB of garbage per pass over 10,000 pending jobs, and the adapter's
// memory swung with it.
func (s *Store) ActiveStates(ctx context.Context) ([]State, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.JobsActive(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("jobs: active states: %w", err)
	}
	out := make([]State, 0, len(ids))
	cmds := make([]*redis.SliceCmd, 0, min(len(ids), statePage))
	for page := range slices.Chunk(ids, statePage) {
		cmds = cmds[:0]
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range page {
				cmds = append(cmds, p.HMGet(ctx, s.keys.Job(id), "status", "node", "suspended_at", "checkpoint"))
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("jobs: active states: %w", err)
		}
		for i, c := range cmds {
			st, ok := decodeState(page[i], c.Val())
			if ok {
				out = append(out, st)
			}
		}
	}
	return out, nil
}

// decodeState reads the HMGET of ActiveStates; false for a record gone
// (removed by hand) or without a valid status.
func decodeState(id string, v []any) (State, bool) {
	str := func(i int) string {
		if i < len(v) {
			s, _ := v[i].(string)
			return s
		}
		return ""
	}
	st := State{JobID: id, Status: wire.JobStatus(str(0)), Node: str(1)}
	if !st.Status.Valid() {
		return State{}, false
	}
	if f, err := strconv.ParseFloat(str(2), 64); err == nil {
		st.SuspendedAt = &f
	}
	if c := str(3); c != "" && c != "null" {
		var cp Checkpoint
		if json.Unmarshal([]byte(c), &cp) == nil {
			st.CheckpointAt = cp.At
		}
	}
	return st, true
}

// GetMany reads the records of ids in one round trip, in order, leaving
// out those gone.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]Job, error) {
	cmds := make([]recordCmds, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = s.readRecord(ctx, p, id)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobs: list active: %w", err)
	}
	out := make([]Job, 0, len(ids))
	for i, c := range cmds {
		h, err := c.hash()
		if err != nil {
			return nil, fmt.Errorf("jobs: list active: %s: %w", ids[i], err)
		}
		if len(h) == 0 {
			continue // removed by hand
		}
		j, err := decodeRecord(h)
		if err != nil {
			return nil, fmt.Errorf("jobs: list active: %s: %w", ids[i], err)
		}
		out = append(out, j)
	}
	return out, nil
}

// withdrawnPage is how many active jobs one call of withdrawn.lua reads:
// about a millisecond of Redis's time.
const withdrawnPage = 500

// WithdrawnRequests returns the request entry ids of the jobs not yet in
// a terminal status whose request entries were retracted or superseded,
// and how many active jobs it looked at: what the broker's periodic
// cancel check needs. It reads inside Redis, a page of jobs per script
// call (withdrawn.lua), so a pass over 10,000 active jobs is 20 calls,
// not 20,000 commands and their replies. Pages go by position in
// P:jobs:active, so a job accepted or ended meanwhile may shift one past
// this pass; the check runs again.
func (s *Store) WithdrawnRequests(ctx context.Context) (ids []string, scanned int, err error) {
	keys := []string{s.keys.JobsActive()}
	for first := 0; ; first += withdrawnPage {
		res, err := scriptWithdrawn.Run(ctx, s.rdb, keys, first, withdrawnPage, s.keys.Job(""), s.keys.Entry("")).Slice()
		if err != nil {
			return ids, scanned, fmt.Errorf("jobs: withdrawn requests: %w", err)
		}
		n, _ := res[0].(int64)
		scanned += int(n)
		for _, v := range res[1:] {
			if id, ok := v.(string); ok {
				ids = append(ids, id)
			}
		}
		if n < withdrawnPage {
			return ids, scanned, nil
		}
	}
}

// JobForKey returns the id of the job that idempotency key key of source
// module maps to (on a board from before per-module keys, the key may be
// in the old board-wide HASH), or ErrNotFound when none does.
func (s *Store) JobForKey(ctx context.Context, module, key string) (string, error) {
	id, err := s.rdb.Get(ctx, s.keys.JobIdem(module, key)).Result()
	if errors.Is(err, redis.Nil) {
		id, err = s.rdb.HGet(ctx, s.keys.JobsIdem(), key).Result()
	}
	switch {
	case errors.Is(err, redis.Nil):
		return "", fmt.Errorf("jobs: key %q of %s: %w", key, module, ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("jobs: key %q of %s: %w", key, module, err)
	}
	return id, nil
}

// EntryInfo is what wire.DecodeRequest needs of a request's entry.
func EntryInfo(e blackboard.Entry) wire.EntryInfo {
	return wire.EntryInfo{ID: e.ID, SourceModule: e.SourceModule, Priority: int(e.Priority),
		Timestamp: e.Timestamp, TTLSeconds: e.TTLSeconds}
}

// Reaccept recreates the record of request entryID from its entry on the
// board, as the broker's Accept made it (the same job id, queued): what an
// agent that holds evidence of a job's run (its task directory) uses when
// Redis lost the record. The entry must still be there and still decode;
// AcceptResult says, as for Accept, if it was withdrawn meanwhile or if its
// idempotency key names another job.
func (s *Store) Reaccept(ctx context.Context, entryID string) (AcceptResult, error) {
	e, err := s.board.Get(ctx, entryID)
	if err != nil {
		return AcceptResult{}, fmt.Errorf("jobs: re-accept %s: %w", entryID, err)
	}
	if e.Topic != blackboard.RequestTopic {
		return AcceptResult{}, fmt.Errorf("jobs: re-accept %s: entry topic %q is not %s", entryID, e.Topic, blackboard.RequestTopic)
	}
	r, werr := wire.DecodeRequest(e.Data, EntryInfo(e))
	if werr != nil {
		return AcceptResult{}, fmt.Errorf("jobs: re-accept %s: %s: %s", entryID, werr.Code, werr.Message)
	}
	return s.Accept(ctx, AcceptSpec{JobID: wire.JobID(entryID), EntryID: entryID, Module: e.SourceModule, Request: r,
		Submitted: e.Timestamp, RequestData: e.Data})
}

// KeyRef names one idempotency key of one source module.
type KeyRef struct{ Module, Key string }

// Lookup is what ResolveKeys found for one KeyRef: Err is ErrNotFound when
// no job holds the key; otherwise JobID names the job and Job (or JobErr,
// ErrNotFound when the record is gone) is its record.
type Lookup struct {
	JobID  string
	Job    Job
	Err    error
	JobErr error
}

// ResolveKeys is JobForKey then Get for many keys at once, in two round
// trips whatever their number: what a broker taking over thousands of
// redelivered requests needs (one lookup each, one by one, made a takeover
// run at the speed of a round trip).
func (s *Store) ResolveKeys(ctx context.Context, refs []KeyRef) ([]Lookup, error) {
	out := make([]Lookup, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	own := make([]*redis.StringCmd, len(refs))
	old := make([]*redis.StringCmd, len(refs))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range refs {
			own[i] = p.Get(ctx, s.keys.JobIdem(r.Module, r.Key))
			old[i] = p.HGet(ctx, s.keys.JobsIdem(), r.Key)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobs: resolve keys: %w", err)
	}
	recs := make([]*recordCmds, len(refs))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range refs {
			id, err := own[i].Result()
			if errors.Is(err, redis.Nil) {
				id, err = old[i].Result()
			}
			switch {
			case errors.Is(err, redis.Nil):
				out[i].Err = fmt.Errorf("jobs: key %q of %s: %w", r.Key, r.Module, ErrNotFound)
			case err != nil:
				out[i].Err = fmt.Errorf("jobs: key %q of %s: %w", r.Key, r.Module, err)
			default:
				out[i].JobID = id
				r := s.readRecord(ctx, p, id)
				recs[i] = &r
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobs: resolve keys: %w", err)
	}
	for i, c := range recs {
		if c == nil {
			continue
		}
		h, err := c.hash()
		if err != nil {
			out[i].JobErr = fmt.Errorf("jobs: get %s: %w", out[i].JobID, err)
			continue
		}
		out[i].Job, out[i].JobErr = jobFromHash(out[i].JobID, h)
	}
	return out, nil
}

// MarkCancelRequested flags an accepted, unfinished job whose request was
// retracted (a later start cancels it instead: see Transition); false if
// there is no such job.
func (s *Store) MarkCancelRequested(ctx context.Context, jobID string) (bool, error) {
	j, err := s.Get(ctx, jobID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if j.Status.Terminal() {
		return false, nil
	}
	if err := s.rdb.HSet(ctx, s.keys.Job(jobID), "cancel_requested", "1").Err(); err != nil {
		return false, fmt.Errorf("jobs: mark cancel %s: %w", jobID, err)
	}
	return true, nil
}

// SaveEngineState stores the scheduling engine's checkpoint b (engine.State
// as JSON) under name (the adapter's node), replacing the last one.
func (s *Store) SaveEngineState(ctx context.Context, name string, b []byte) error {
	if err := s.rdb.HSet(ctx, s.keys.EngineState(), name, b).Err(); err != nil {
		return fmt.Errorf("jobs: save engine state %s: %w", name, err)
	}
	return nil
}

// LoadEngineState returns the engine checkpoint saved under name, or nil
// (and no error) when there is none.
func (s *Store) LoadEngineState(ctx context.Context, name string) ([]byte, error) {
	b, err := s.rdb.HGet(ctx, s.keys.EngineState(), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: load engine state %s: %w", name, err)
	}
	return b, nil
}

// now is the Clock's time in epoch seconds.
func (s *Store) now() float64 { return epoch(s.cfg.Clock.Now()) }

func epoch(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
