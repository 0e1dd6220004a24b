package engine_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// BenchmarkSchedule runs one cycle over generated clusters. Metrics:
// decisions/s (pending jobs placed or rejected per second), placements/s,
// ns/decision, and B/pending (bytes allocated per pending job per cycle).
//
//	go test ./engine -run '^$' -bench Schedule -benchtime 3x
func BenchmarkSchedule(b *testing.B) {
	for _, pending := range []int{1_000, 10_000, 100_000} {
		for _, nodes := range []int{100, 1_000, 10_000} {
			b.Run(fmt.Sprintf("pending=%d/nodes=%d", pending, nodes), func(b *testing.B) {
				snap := et.Generate(et.GenConfig{Seed: 1, Nodes: nodes, Pending: pending, Running: nodes * 4})
				benchSchedule(b, snap)
			})
		}
	}
}

// BenchmarkScheduleSelection compares the account-selection algorithms at
// 10,000 pending jobs on 1,000 nodes.
func BenchmarkScheduleSelection(b *testing.B) {
	for _, sel := range []engine.Selection{engine.SelectPriority, engine.SelectProportional, engine.SelectLottery, engine.SelectWFQ, engine.SelectDRR, engine.SelectDRF} {
		b.Run(string(sel), func(b *testing.B) {
			snap := et.Generate(et.GenConfig{Seed: 1, Nodes: 1_000, Pending: 10_000, Running: 4_000})
			snap.Policy.Selection = sel
			benchSchedule(b, snap)
		})
	}
}

func benchSchedule(b *testing.B, snap engine.Snapshot) {
	var plan engine.Plan
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	n := 0
	for b.Loop() {
		plan, _ = engine.Schedule(engine.State{}, snap)
		n++
	}
	runtime.ReadMemStats(&ms1)
	sec := b.Elapsed().Seconds() / float64(n)
	b.ReportMetric(float64(len(snap.Pending))/sec, "decisions/s")
	b.ReportMetric(float64(len(plan.Placements))/sec, "placements/s")
	b.ReportMetric(float64(len(plan.Placements)), "placed")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n)/float64(len(snap.Pending)), "B/pending")
	b.ReportMetric(sec*1e9/float64(len(snap.Pending)), "ns/decision")
}

// BenchmarkScheduleOneSlotFree is the regime of a busy node draining a
// deep queue (the e2e benchmark's): one node running 7 jobs of a quarter
// core out of 2 cores, one slot just freed, and -pending identical jobs
// waiting. Each end runs the engine once; its cost is per pending job.
//
//	go test ./engine -run '^$' -bench OneSlotFree
func BenchmarkScheduleOneSlotFree(b *testing.B) {
	for _, pending := range []int{100, 2_000, 10_000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			now := time.Unix(1_700_000_000, 0)
			snap := engine.Snapshot{Now: now, Nodes: []engine.Node{{Name: "n1",
				Capacity:  engine.Resources{engine.DimCPU: 2000, engine.DimMemory: 4096},
				Allocated: engine.Resources{engine.DimCPU: 1750, engine.DimMemory: 7 * 64}}}}
			for i := range 7 {
				snap.Running = append(snap.Running, engine.Running{Node: "n1", Started: now.Add(-time.Second), Job: engine.Job{
					ID: fmt.Sprintf("r%d", i), Account: "a", Submitted: now.Add(-2 * time.Second),
					Request: engine.Resources{engine.DimCPU: 250, engine.DimMemory: 64}}})
			}
			for i := range pending {
				snap.Pending = append(snap.Pending, engine.Job{ID: fmt.Sprintf("p%06d", i), Account: fmt.Sprint("poster", i%4),
					Priority: 4, Submitted: now.Add(-time.Duration(pending-i) * time.Millisecond),
					Request: engine.Resources{engine.DimCPU: 250, engine.DimMemory: 64}})
			}
			benchSchedule(b, snap)
		})
	}
}
