package blackboard

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The benchmarks run against the package's redis-server (unix socket), so
// the baselines show what one plain command costs on the same server.
// Each reports ops/s.

func reportOps(b *testing.B, n int64) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "ops/s")
}

func benchEntry() *Entry {
	return mk("bench.topic", withData(`{"cpu":0.5,"memory":0.25}`), withTags("compute", "bench"), withTTL(60))
}

func BenchmarkPost(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		v := newEnv(b, Config{MaxEntries: -1})
		var n int64
		for b.Loop() {
			if _, err := v.s.Post(ctx, benchEntry()); err != nil {
				b.Fatal(err)
			}
			n++
		}
		reportOps(b, n)
	})
	b.Run("parallel", func(b *testing.B) {
		v := newEnv(b, Config{MaxEntries: -1})
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := v.s.Post(ctx, benchEntry()); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
		reportOps(b, n.Load())
	})
}

// BenchmarkQuery: a topic query with limit 50 over a board of 10k entries
// spread over 4 priorities and 10 subtopics of the queried topic.
func BenchmarkQuery(b *testing.B) {
	ctx := context.Background()
	v := newEnv(b, Config{MaxEntries: -1})
	const total, batch = 10000, 500
	for i := 0; i < total; i += batch {
		es := make([]*Entry, batch)
		for j := range es {
			k := i + j
			es[j] = mk(fmt.Sprintf("bench.q.%d", k%10), withPrio(Priority(k%4)), withTS(ts0+float64(k)),
				withData(`{"k":1}`), withTags("t"))
		}
		if _, err := v.s.PostMany(ctx, es); err != nil {
			b.Fatal(err)
		}
	}
	q := Query{Topics: []string{"bench.q"}, Limit: 50}
	got, err := v.s.Query(ctx, q)
	if err != nil || len(got) != 50 || got[0].Priority != Critical {
		b.Fatalf("Query = %d entries, %v", len(got), err)
	}
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.s.Query(ctx, q); err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	reportOps(b, n.Load())
}

func BenchmarkBaselineXADD(b *testing.B) {
	ctx := context.Background()
	v := newEnv(b, Config{})
	payload, _ := json.Marshal(map[string]any{"entry_id": NewID(), "topic": "bench.topic"})
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			err := v.rdb.XAdd(ctx, &redis.XAddArgs{Stream: v.k.Events(), MaxLen: 10000, Approx: true,
				Values: []any{"event_id", NewID(), "event_type", EventEntryAdded, "source", "blackboard",
					"timestamp", "1700000000", "payload", string(payload)}}).Err()
			if err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	reportOps(b, n.Load())
}

func BenchmarkBaselineHSET(b *testing.B) {
	ctx := context.Background()
	v := newEnv(b, Config{})
	h, err := benchEntry().EncodeHash()
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		mine := maps.Clone(h)
		for pb.Next() {
			mine["entry_id"] = NewID()
			if err := v.rdb.HSet(ctx, v.k.Entry(mine["entry_id"]), mine).Err(); err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	reportOps(b, n.Load())
}
