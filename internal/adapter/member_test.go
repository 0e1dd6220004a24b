package adapter

import (
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
)

// TestPlanMemory: a full plan's memory goes back to the OS after plans
// over a deep queue only, and at most once every full_replan, however
// often full plans come (a queue with deadlines makes every cycle one).
func TestPlanMemory(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	freed := 0
	m := &planMemory{clk: clk, every: 10 * time.Second, free: func() { freed++ }}
	steps := []struct {
		advance time.Duration
		pending int
		want    int
	}{
		{0, releaseAfterPending - 1, 0}, // a shallow queue: nothing to give back
		{0, releaseAfterPending, 1},
		{time.Second, 5000, 1}, // full plans every cycle: not a collection each
		{8 * time.Second, 5000, 1},
		{time.Second, 5000, 2}, // full_replan after the last release
		{time.Minute, 10, 2},
		{0, 10000, 3},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		m.release(s.pending)
		if freed != s.want {
			t.Fatalf("step %d (+%s, %d pending): %d releases, want %d", i, s.advance, s.pending, freed, s.want)
		}
	}
}
