package engine_test

import (
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

func TestDbgBig(t *testing.T) {
	snap := et.Generate(et.GenConfig{Seed: 1, Nodes: 10000, Pending: 100000, Running: 40000})
	t0 := time.Now()
	engine.Schedule(engine.State{}, snap)
	t.Log(time.Since(t0))
}
