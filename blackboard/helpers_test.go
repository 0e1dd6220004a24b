package blackboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// t0 is the fake clock's start: epoch 1_700_000_000.
var t0 = time.Unix(1_700_000_000, 0)

const ts0 = 1_700_000_000.0

// env is one test's board.
type env struct {
	s   *Store
	rdb redis.UniversalClient
	clk *clock.Fake
	k   Keys
}

func newEnv(t testing.TB, cfg Config) env {
	t.Helper()
	rdb, ns := redistest.New(t)
	clk := clock.NewFake(t0)
	cfg.Namespace, cfg.Clock = ns, clk
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env{s: s, rdb: rdb, clk: clk, k: s.Keys()}
}

// ev is an event as tests compare it.
type ev struct {
	Type, Source, Payload string
}

// events returns the types, sources and payloads of the events matching
// pattern, oldest first.
func (v env) events(t testing.TB, pattern string) []ev {
	t.Helper()
	evs, _, err := v.s.Events(context.Background(), "0", pattern, 100000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := []ev{}
	for _, e := range evs {
		out = append(out, ev{e.Type, e.Source, string(e.Payload)})
	}
	return out
}

// post posts e and fails the test on error.
func (v env) post(t testing.TB, e *Entry) string {
	t.Helper()
	id, err := v.s.Post(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (v env) hash(t testing.TB, id string) map[string]string {
	t.Helper()
	h, err := v.rdb.HGetAll(context.Background(), v.k.Entry(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (v env) zmembers(t testing.TB, key string) []string {
	t.Helper()
	m, err := v.rdb.ZRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mk builds an entry with defaults a test can override.
func mk(topic string, opts ...func(*Entry)) *Entry {
	e := NewEntry(topic, "m", json.RawMessage(`{}`))
	for _, o := range opts {
		o(e)
	}
	return e
}

func withID(id string) func(*Entry)          { return func(e *Entry) { e.ID = id } }
func withPrio(p Priority) func(*Entry)       { return func(e *Entry) { e.Priority = p } }
func withTS(ts float64) func(*Entry)         { return func(e *Entry) { e.Timestamp = ts } }
func withTTL(ttl float64) func(*Entry)       { return func(e *Entry) { e.TTLSeconds = &ttl } }
func withSource(m string) func(*Entry)       { return func(e *Entry) { e.SourceModule = m } }
func withConf(c float64) func(*Entry)        { return func(e *Entry) { e.Confidence = c } }
func withTags(tags ...string) func(*Entry)   { return func(e *Entry) { e.Tags = tags } }
func withStatus(s Status) func(*Entry)       { return func(e *Entry) { e.Status = s } }
func withData(d string) func(*Entry)         { return func(e *Entry) { e.Data = json.RawMessage(d) } }
func withMeta(m map[string]any) func(*Entry) { return func(e *Entry) { e.Metadata = m } }

// hexID returns a fixed valid id ending in n.
func hexID(n int) string {
	const digits = "0123456789abcdef"
	b := []byte("00000000000000000000000000000000")
	for i := 31; n > 0 && i >= 0; i-- {
		b[i] = digits[n%16]
		n /= 16
	}
	return string(b)
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

// ids returns the ids of entries, in order.
func ids(es []Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

var (
	sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })
	sortEvs     = cmpopts.SortSlices(func(a, b ev) bool { return a.Type+a.Payload < b.Type+b.Payload })
)
