package broker

import (
	"fmt"
	"runtime"
	"testing"
)

// intakeAllocsPerRequest bounds the Go side of intake: the heap
// allocations per request of reading the lanes into the inbox (decoding
// and checking each request) and accepting them as durable jobs
// (NextBatch, AcceptBatch: the one-step script's KEYS and ARGV, the
// record, the job entry, the reply), in batches of 64 as the scheduler's
// intake takes them. 134 when this was written (140 under -race), the same
// for a backlog of 640 and of 6,400; go-redis boxes each of a script's
// KEYS and ARGV into an interface, about 80 of them per request.
const intakeAllocsPerRequest = 170

// TestIntakeAllocations: the intake allocates a bounded number of times
// per request, however many requests it takes (a backlog of 640, with
// requests long enough that their records keep them beside the HASH).
func TestIntakeAllocations(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	data := `{"command":["echo","hi"],"resource_requirements":{"cpu_cores":1,"memory":0.0625}}`
	take := func(n int) int {
		t.Helper()
		feed(t, b)
		got := 0
		for got < n {
			ds, err := b.NextBatch(ctx, 64)
			if err != nil || len(ds) == 0 {
				t.Fatalf("NextBatch after %d of %d: %d, %v", got, n, len(ds), err)
			}
			for i, r := range b.AcceptBatch(ctx, ds) {
				if r.Err != nil || !r.Created {
					t.Fatalf("%s: %+v", ds[i].EntryID, r)
				}
			}
			got += len(ds)
		}
		return got
	}
	post := func(n int) {
		t.Helper()
		for i := range n {
			bd.post(t, fmt.Sprint("m", i%4), data)
		}
	}
	// Warm: the scripts loaded, the connections made.
	post(64)
	take(64)

	const n = 640
	post(n)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	take(n)
	runtime.ReadMemStats(&m1)
	per := float64(m1.Mallocs-m0.Mallocs) / n
	t.Logf("intake: %.1f allocations, %.0f B per request", per, float64(m1.TotalAlloc-m0.TotalAlloc)/n)
	if per > intakeAllocsPerRequest {
		t.Errorf("intake allocates %.1f times per request, want at most %d", per, intakeAllocsPerRequest)
	}
}
