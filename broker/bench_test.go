package broker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
)

// Benchmarks of intake on the package's redis-server. Read them in pairs:
// BenchmarkIntake/clients=N against BenchmarkBaselinePipelinedXADD/clients=N
// of the same run. The baseline is Redis's ceiling for getting the same
// messages into a stream; Intake adds what the broker costs on top, from a
// poster's XADD to the adapter's Next (one XADD per request, as a module
// posts, not pipelined).
//
//	go test ./broker -run '^$' -bench 'Intake|Baseline' -benchtime 20000x

var benchClients = []int{1, 10, 1000}

// benchMessages builds n intake messages whose entry ids encode their index.
func benchMessages(n int) [][]any {
	msgs := make([][]any, n)
	for i := range msgs {
		e := blackboard.NewEntry(blackboard.RequestTopic, fmt.Sprint("module", i%29), []byte(okData))
		e.ID, e.Timestamp = fmt.Sprintf("%032x", i), 1.7e9
		b, _ := e.MarshalJSON()
		msgs[i] = []any{"v", "1", "entry_id", e.ID, "topic", e.Topic, "priority", "1",
			"timestamp", "1700000000", "entry", string(b)}
	}
	return msgs
}

// postAll has clients goroutines XADD their share of msgs to lane 4,
// calling before(i) just before message i is sent. With batch > 1 each
// client pipelines batch messages per round trip.
func postAll(ctx context.Context, tb testing.TB, rdb redis.UniversalClient, lane string, msgs [][]any, clients, batch int, before func(int)) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			var idx []int
			for i := c; i < len(msgs); i += clients {
				idx = append(idx, i)
			}
			for chunk := range slices.Chunk(idx, batch) {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, i := range chunk {
						if before != nil {
							before(i)
						}
						p.XAdd(ctx, &redis.XAddArgs{Stream: lane, Values: msgs[i]})
					}
					return nil
				})
				if err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkIntake(b *testing.B) {
	for _, clients := range benchClients {
		b.Run(fmt.Sprint("clients=", clients), func(b *testing.B) {
			rdb, ns := redistest.New(b)
			bd := boardOn(b, rdb, ns)
			br, err := New(rdb, bd.store, Config{Consumer: "bench", ModuleRate: -1, ModuleMaxWaiting: -1,
				ReadBlock: 100 * time.Millisecond, Clock: clock.Real{}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(b.Context())
			if err := br.EnsureGroups(ctx); err != nil {
				b.Fatal(err)
			}
			msgs := benchMessages(b.N)
			sent := make([]atomic.Int64, b.N)
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			wg.Go(func() { _ = br.Run(ctx) })
			var got atomic.Int64
			done := make(chan struct{})
			for range 16 { // adapters
				wg.Go(func() {
					for {
						d, err := br.Next(ctx)
						if err != nil {
							return
						}
						var i int
						fmt.Sscanf(d.EntryID, "%x", &i)
						lat[i] = time.Duration(time.Now().UnixNano() - sent[i].Load())
						_ = br.inbox.Ack(d.lease)
						if got.Add(1) == int64(b.N) {
							close(done)
						}
					}
				})
			}
			b.ResetTimer()
			start := time.Now()
			postAll(ctx, b, rdb, bd.keys.Inbox(4), msgs, clients, 1, func(i int) { sent[i].Store(time.Now().UnixNano()) })
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			wg.Wait()
			reportLatency(b, elapsed, lat)
			cleanupLanes(b, rdb, bd.keys)
		})
	}
}

func BenchmarkBaselinePipelinedXADD(b *testing.B) {
	for _, clients := range benchClients {
		b.Run(fmt.Sprint("clients=", clients), func(b *testing.B) {
			rdb, ns := redistest.New(b)
			keys := blackboard.NewKeys(ns)
			msgs := benchMessages(b.N)
			b.ResetTimer()
			start := time.Now()
			postAll(b.Context(), b, rdb, keys.Inbox(4), msgs, clients, 64, nil)
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			cleanupLanes(b, rdb, keys)
		})
	}
}

func reportLatency(b *testing.B, elapsed time.Duration, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

func cleanupLanes(tb testing.TB, rdb redis.UniversalClient, k blackboard.Keys) {
	for lane := range NumPriorities {
		rdb.Del(context.Background(), k.Inbox(lane))
	}
}
