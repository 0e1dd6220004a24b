package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// board is one test's namespace: a client, a blackboard store, a job store
// and a shared fake clock.
type board struct {
	rdb   redis.UniversalClient
	store *blackboard.Store
	keys  blackboard.Keys
	clk   *clock.Fake
	jobs  *Store
}

func newBoard(t testing.TB) *board { return newBoardWith(t, Config{}) }

// newBoardWith is newBoard with a job store of cfg (the board's clock and
// a logger to the test unless cfg sets them).
func newBoardWith(t testing.TB, cfg Config) *board {
	t.Helper()
	rdb, ns := redistest.New(t)
	clk := clock.NewFake(time.Now())
	s, err := blackboard.New(rdb, blackboard.Config{Namespace: ns, Clock: clk, MaxEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	js, err := New(rdb, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &board{rdb: rdb, store: s, keys: s.Keys(), clk: clk, jobs: js}
}

const okData = `{"command":["echo","hi"]}`

// post posts a compute.request entry from module with data and returns
// the spec a broker would accept it with.
func (bd *board) post(t testing.TB, module, data string) AcceptSpec {
	t.Helper()
	e := blackboard.NewEntry(blackboard.RequestTopic, module, json.RawMessage(data))
	id, err := bd.store.Post(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	req, werr := wire.DecodeRequest(e.Data, wire.EntryInfo{ID: id, SourceModule: module, Priority: int(e.Priority),
		Timestamp: e.Timestamp, TTLSeconds: e.TTLSeconds})
	if werr != nil {
		t.Fatalf("decode %s: %v", data, werr)
	}
	return AcceptSpec{JobID: wire.JobID(id), EntryID: id, Module: module, Request: req, Submitted: e.Timestamp}
}

// accept runs the job store's three acceptance steps for spec, as the
// broker's Accept does (less the intake message's ack).
func (bd *board) accept(t testing.TB, s *Store, spec AcceptSpec) (Job, bool) {
	t.Helper()
	ctx := context.Background()
	r, err := s.Accept(ctx, spec)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if r.Withdrawn != "" || r.WrongType != "" {
		t.Fatalf("Accept: withdrawn %q, wrong type %q", r.Withdrawn, r.WrongType)
	}
	if err := s.PublishAccepted(ctx, spec, r.Job); err != nil {
		t.Fatalf("PublishAccepted: %v", err)
	}
	j, err := s.ConsumeAccepted(ctx, spec, r.Job)
	if err != nil {
		t.Fatalf("ConsumeAccepted: %v", err)
	}
	return j, r.Created
}

// record is acceptance's first step alone (Accept), which must create the
// job's record.
func (bd *board) record(t testing.TB, spec AcceptSpec) AcceptResult {
	t.Helper()
	r, err := bd.jobs.Accept(context.Background(), spec)
	if err != nil || !r.Created {
		t.Fatalf("Accept: %+v, %v; want a new record", r, err)
	}
	return r
}

// acceptMany posts n requests of planner with data and accepts each, a
// millisecond of the board's clock apart (a distinct acceptance each).
func (bd *board) acceptMany(tb testing.TB, n int, data string) []AcceptSpec {
	tb.Helper()
	specs := make([]AcceptSpec, n)
	for i := range specs {
		bd.clk.Advance(time.Millisecond)
		specs[i] = bd.post(tb, "planner", data)
		bd.accept(tb, bd.jobs, specs[i])
	}
	return specs
}

// jobEntry reads the compute.job entry of request id.
func (bd *board) jobEntry(t testing.TB, requestID string) (wire.JobData, bool) {
	t.Helper()
	e, err := bd.store.Get(context.Background(), wire.JobID(requestID))
	if errors.Is(err, blackboard.ErrNotFound) {
		return wire.JobData{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var jd wire.JobData
	if err := json.Unmarshal(e.Data, &jd); err != nil {
		t.Fatal(err)
	}
	if e.ParentID != requestID || e.Topic != wire.TopicJob {
		t.Fatalf("job entry parent %q topic %q", e.ParentID, e.Topic)
	}
	return jd, true
}

func (bd *board) entryStatus(t testing.TB, id string) blackboard.Status {
	t.Helper()
	s, err := bd.rdb.HGet(context.Background(), bd.keys.Entry(id), "status").Result()
	if err != nil {
		t.Fatal(err)
	}
	return blackboard.Status(s)
}

// idemKeys counts the board's per-module idempotency keys (P:jobs:idem:*).
func (bd *board) idemKeys(t testing.TB) int64 {
	t.Helper()
	keys, err := bd.rdb.Keys(context.Background(), bd.keys.JobsIdem()+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(keys))
}

// finishedEvents reads every compute.job.finished payload on the board.
func (bd *board) finishedEvents(t testing.TB) map[string]map[string]any {
	t.Helper()
	evs, _, err := bd.store.Events(t.Context(), "0", EventJobFinished, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, ev := range evs {
		var p map[string]any
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if ev.Source != wire.SourceModule {
			t.Errorf("source %q", ev.Source)
		}
		id, _ := p["job_id"].(string)
		out[id] = p
	}
	return out
}
