package engine_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// TestCheapestIsCheapest: on clusters of up to 1020 randomly priced,
// sized and loaded nodes, a cheapest job lands on a fitting node whose
// hourly cost for its request is the lowest of all fitting nodes (checked
// by brute force), within cheapestBudget search steps.
func TestCheapestIsCheapest(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cost := func(n *engine.Node, j *engine.Job) float64 {
		return float64(j.Request[engine.DimCPU])/1000*n.Price.CoreHour + float64(j.Request[engine.DimMemory])/1024*n.Price.GiBHour
	}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var nodes []engine.Node
		for i := range 20 + rng.IntN(1000) {
			n := et.Node(fmt.Sprintf("n%04d", i)).CPU(int64(4 + rng.IntN(60))).Mem(int64(8 + rng.IntN(250))).Obj()
			n.Allocated[engine.DimCPU] = rng.Int64N(n.Capacity[engine.DimCPU])
			n.Price = engine.Price{CoreHour: float64(rng.IntN(10)) / 100, GiBHour: float64(rng.IntN(10)) / 1000}
			nodes = append(nodes, n)
		}
		j := et.Job("j").CPU(float64(1 + rng.IntN(16))).Mem(float64(1 + rng.IntN(64))).Strategy(engine.Cheapest).Submitted(now).Obj()
		plan, _ := engine.Schedule(engine.State{}, engine.Snapshot{Now: now, Nodes: nodes, Pending: []engine.Job{j}})
		best := -1.0
		for i := range nodes {
			if j.Request.Fits(nodes[i].Free()) && (best < 0 || cost(&nodes[i], &j) < best) {
				best = cost(&nodes[i], &j)
			}
		}
		if best < 0 {
			if len(plan.Placements) != 0 {
				t.Errorf("seed %d: placed %+v where nothing fits", seed, plan.Placements)
			}
			continue
		}
		if len(plan.Placements) != 1 {
			t.Fatalf("seed %d: not placed (%+v); a node fits at %v/h", seed, plan.Rejected, best)
		}
		for i := range nodes {
			if nodes[i].Name == plan.Placements[0].Node {
				if got := cost(&nodes[i], &j); got != best {
					t.Errorf("seed %d: placed on %s at %v/h; the cheapest fitting node costs %v/h", seed, nodes[i].Name, got, best)
				}
			}
		}
	}
}
