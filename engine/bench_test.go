package engine_test

import (
	"fmt"
	"runtime"
	"testing"

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
