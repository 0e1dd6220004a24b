package broker

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
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// board is one test's namespace: a client, a store and a shared fake clock.
type board struct {
	rdb   redis.UniversalClient
	store *blackboard.Store
	keys  blackboard.Keys
	clk   *clock.Fake
}

func newBoard(t testing.TB) *board {
	t.Helper()
	rdb, ns := redistest.New(t)
	return boardOn(t, rdb, ns)
}

func boardOn(t testing.TB, rdb redis.UniversalClient, ns string) *board {
	t.Helper()
	clk := clock.NewFake(time.Now())
	s, err := blackboard.New(rdb, blackboard.Config{Namespace: ns, Clock: clk, MaxEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &board{rdb: rdb, store: s, keys: s.Keys(), clk: clk}
}

// broker returns a broker on the board with test-friendly defaults: no
// admission limits unless cfg sets them, the board's clock, logs to the test.
func (bd *board) broker(t testing.TB, cfg Config) *Broker {
	t.Helper()
	if cfg.Consumer == "" {
		cfg.Consumer = "b1"
	}
	if cfg.ModuleRate == 0 {
		cfg.ModuleRate = -1
	}
	if cfg.ModuleMaxWaiting == 0 {
		cfg.ModuleMaxWaiting = -1
	}
	if cfg.Clock == nil {
		cfg.Clock = bd.clk
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := New(bd.rdb, bd.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureGroups(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

const okData = `{"command":["echo","hi"]}`

// post posts a compute.request entry from module with data and returns its id.
func (bd *board) post(t testing.TB, module, data string, opts ...func(*blackboard.Entry)) string {
	t.Helper()
	e := blackboard.NewEntry(blackboard.RequestTopic, module, json.RawMessage(data))
	for _, o := range opts {
		o(e)
	}
	id, err := bd.store.Post(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func ttl(s float64) func(*blackboard.Entry) { return func(e *blackboard.Entry) { e.TTLSeconds = &s } }

// laneTotals returns the summed XLEN and pending count of all lanes: the
// legacy shared ones and every module's.
func (bd *board) laneTotals(t testing.TB) (length, pending int64) {
	t.Helper()
	ctx := context.Background()
	for _, key := range bd.laneKeys(t) {
		n, err := bd.rdb.XLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		length += n
		p, err := bd.rdb.XPending(ctx, key, blackboard.InboxGroup).Result()
		if err == nil {
			pending += p.Count
		}
	}
	return length, pending
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

func (bd *board) deadLetters(t testing.TB) []DeadLetter {
	t.Helper()
	b := &Broker{rdb: bd.rdb, keys: bd.keys}
	dls, err := b.Inspector().DLQList(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return dls
}

// feed runs feedStep (non-blocking) until it reads nothing.
func feed(t testing.TB, b *Broker) int {
	t.Helper()
	total := 0
	for {
		n, err := b.feedStep(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

// next calls Next with a short timeout.
func next(t testing.TB, b *Broker) *Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := b.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return d
}

func accept(t testing.TB, b *Broker, d *Delivery) (jobs.Job, bool) {
	t.Helper()
	j, created, err := b.Accept(context.Background(), d)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	return j, created
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

// age makes every intake message pending for consumer look idle for idle
// (XCLAIM to the same consumer with IDLE), as if that much time had passed
// without a refresh: tests of reclaiming need no sleeps.
func (bd *board) age(t testing.TB, consumer string, idle time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, key := range bd.laneKeys(t) {
		ps, err := bd.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: blackboard.InboxGroup,
			Start: "-", End: "+", Count: 1000, Consumer: consumer}).Result()
		if err != nil {
			continue // no group on this lane
		}
		for _, p := range ps {
			if err := bd.rdb.Do(ctx, "XCLAIM", key, blackboard.InboxGroup, consumer, 0, p.ID,
				"IDLE", idle.Milliseconds(), "JUSTID").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// laneKeys lists every intake lane of the board: the module lanes that
// exist and the ten legacy lanes.
func (bd *board) laneKeys(t testing.TB) []string {
	t.Helper()
	keys, err := bd.rdb.Keys(context.Background(), bd.keys.ModuleInboxes()+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for lane := range NumPriorities {
		keys = append(keys, bd.keys.Inbox(lane))
	}
	return keys
}
