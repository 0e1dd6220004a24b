package dispatch

// The scheduler's cost with a deep queue that cannot start (issue 10, item
// 4): CPU per idle step and heap per pending job.

import (
	"encoding/json"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// costRecords returns n queued job records as JSON, as the scheduler reads
// them from Redis: a command with arguments, environment, a payload, ten
// accounts and three modules, shapes of 1, 2 or 4 cores with estimates.
func costRecords(h *harness, n int, prefix string) [][]byte {
	out := make([][]byte, n)
	at := epochOf(h.clk.Now())
	for i := range n {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		acct := fmt.Sprintf("team-%d", i%10)
		cpu := float64(int(1) << (i % 3))
		j := jobs.Job{
			JobData: wire.JobData{JobID: id, RequestEntryID: "1700000000000-" + id, IdempotencyKey: "idem-" + id, Account: acct,
				Priority: i % 10, Status: wire.JobQueued, SubmittedAt: &at},
			Module: fmt.Sprintf("module-%d", i%3), AcceptedAt: at, UpdatedAt: at, Version: 1,
			Request: wire.Request{Version: 1, Name: "train shard " + id, Command: []string{"python", "-m", "trainer"},
				Arguments: []string{"--shard", id, "--epochs", "3"}, Environment: map[string]string{"RUN": id, "MODE": "batch"},
				Priority: i % 10, Account: acct, IdempotencyKey: "idem-" + id, EstimatedDuration: float64(600 * (1 + i%7)),
				Resources: wire.Resources{CPUCores: cpu, MemoryGB: cpu * 2},
				Payload:   json.RawMessage(fmt.Sprintf(`{"dataset":"s3://bucket/datasets/%s","lr":0.001,"batch":256}`, id))},
		}
		b, err := json.Marshal(j)
		if err != nil {
			h.t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func decodeRecord(tb testing.TB, b []byte) jobs.Job {
	var j jobs.Job
	if err := json.Unmarshal(b, &j); err != nil {
		tb.Fatal(err)
	}
	return j
}

// fullPool registers nodes of 8 cores and 32 GiB and runs one-core jobs
// (an hour's estimate) on them until they are full.
func (h *harness) fullPool(nodes int) {
	h.t.Helper()
	for i := range nodes {
		h.nodes.add(cpuNode(fmt.Sprintf("node-%03d", i), 8, 32768))
	}
	var ids []string
	for i := range nodes * 8 {
		j := h.newJob(fmt.Sprintf("run-%04d", i), 1, 1)
		j.Request.EstimatedDuration = 3600
		h.submit(j)
		ids = append(ids, j.JobID)
	}
	h.mustCycle()
	for _, id := range ids {
		h.agentStart(id)
	}
	h.mustCycle()
	for _, id := range ids {
		if p, _ := h.phase(id); p != PhaseRunning {
			h.t.Fatalf("job %s: phase %s, want running", id, p)
		}
	}
}

// deepQueue is a scheduler over a full pool of 10 nodes with n pending
// jobs that cannot start, their records in the store, and the heap bytes
// the scheduler holds per pending job (HeapAlloc after GC, before and
// after adding them and planning once).
func deepQueue(tb testing.TB, n int) (*harness, float64) {
	h := newHarness(tb, func(c *Config) {
		c.NodeRefresh = 0 // the default (1 s)
		c.MaxPending = n
	})
	h.fullPool(10)
	recs := costRecords(h, n, "job")
	for _, b := range recs {
		h.store.put(decodeRecord(tb, b)) // the store's own copy
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, b := range recs {
		h.s.addPending(h.ctx, decodeRecord(tb, b)) // the scheduler's copy, as read from Redis
	}
	// A full plan, as every FullReplan: the scheduler keeps its
	// explanations of every pending job (a partial plan explains its
	// heads only).
	h.clk.Advance(h.s.cfg.FullReplan)
	if _, err := h.s.schedule(h.ctx); err != nil {
		tb.Fatal(err)
	}
	if got := len(h.s.expl.held); got != n {
		tb.Fatalf("the plan explains %d jobs, want all %d (a full plan)", got, n)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(recs)
	if got := h.s.pendingCount(); got != n {
		tb.Fatalf("%d pending, want %d", got, n)
	}
	return h, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// TestPendingMemory: the scheduler holds at most 640 B per pending job
// after a full plan: its tracked job (the engine's view, compact), its
// map entry and the plan's explanation, compact. 525 B when written; the
// layout before jobCore and heldExpl took 796 B.
func TestPendingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 jobs")
	}
	_, per := deepQueue(t, 10000)
	t.Logf("heap per pending job: %.0f B", per)
	if per > 640 && !raceEnabled {
		t.Errorf("heap per pending job %.0f B, want ≤ 640", per)
	}
}

// TestFullPlanMemory: a full plan over 10,000 pending jobs allocates at
// most 900 B per job (766 B when written), all of it the plan's working
// set at its peak (the snapshot's jobs, the engine's per-job arrays, the
// explanations in their held form). It was 1,520 B when the engine's
// explanations and rejections were kept in the Plan beside the held form,
// each queue entry carried its best member's factors and request, and
// each job its own request and rejection: the adapter's resident set then
// rose past 2 KB per pending job during a full plan.
func TestFullPlanMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 jobs")
	}
	h, _ := deepQueue(t, 10000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.clk.Advance(h.s.cfg.FullReplan)
	if _, err := h.s.schedule(h.ctx); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := len(h.s.expl.held); got != 10000 {
		t.Fatalf("the plan explains %d jobs, want all 10000", got)
	}
	per := float64(after.TotalAlloc-before.TotalAlloc) / 10000
	t.Logf("allocated per pending job by one full plan: %.0f B", per)
	if per > 900 && !raceEnabled {
		t.Errorf("a full plan allocated %.0f B per pending job, want ≤ 900", per)
	}
}

// BenchmarkIdleCycle: 10,000 pending jobs that cannot start on a full
// pool, nothing else happening; one op is one step 200 ms (the default
// interval) after the last, so the periodic work (registry read every
// second, full re-plan, rescan, checkpoint) is spread over the ops as in
// production. %core is the process CPU time per op over 200 ms.
// Run with -benchtime 500x (100 s of scheduler time).
func BenchmarkIdleCycle(b *testing.B) {
	h, _ := deepQueue(b, 10000)
	// Publish every explanation once: the steady state, not the backlog.
	if err := h.s.publishExplanations(h.ctx, 1<<30, 0); err != nil {
		b.Fatal(err)
	}
	step := func() {
		h.clk.Advance(200 * time.Millisecond)
		rs, err := h.orders.Reports(h.ctx, h.s.lastReport, 4096, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.s.step(h.ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	for range 10 {
		step()
	}
	runtime.GC()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(100*float64(cpu)/float64(b.N)/float64(200*time.Millisecond), "%core")
	if h.s.pendingCount() != 10000 {
		b.Fatalf("pending %d", h.s.pendingCount())
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNewJobCycle: as BenchmarkIdleCycle, but every step brings one
// new job that cannot start either (a steady trickle of 5 jobs a second
// onto a full pool).
func BenchmarkNewJobCycle(b *testing.B) {
	h, _ := deepQueue(b, 10000)
	if err := h.s.publishExplanations(h.ctx, 1<<30, 0); err != nil {
		b.Fatal(err)
	}
	recs := costRecords(h, 20000, "new")
	next := 0
	step := func() {
		j := decodeRecord(b, recs[next%len(recs)])
		next++
		h.store.put(j)
		h.s.addPending(h.ctx, j)
		h.clk.Advance(200 * time.Millisecond)
		rs, err := h.orders.Reports(h.ctx, h.s.lastReport, 4096, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.s.step(h.ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
	for range 10 {
		step()
	}
	runtime.GC()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(100*float64(cpu)/float64(b.N)/float64(200*time.Millisecond), "%core")
}

// BenchmarkFullPlan: one full re-plan (every FullReplan) over 10,000
// pending jobs that cannot start on a full pool: the snapshot, the engine
// run and the explanations kept. Its allocations are the adapter's
// memory peak with a deep queue (the heap grows to twice its live size
// around them).
func BenchmarkFullPlan(b *testing.B) {
	h, _ := deepQueue(b, 10000)
	b.ReportAllocs()
	for b.Loop() {
		h.clk.Advance(h.s.cfg.FullReplan)
		if _, err := h.s.schedule(h.ctx); err != nil {
			b.Fatal(err)
		}
	}
	if got := len(h.s.expl.held); got != 10000 {
		b.Fatalf("the plan explains %d jobs, want all 10000", got)
	}
}
