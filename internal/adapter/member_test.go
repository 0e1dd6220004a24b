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

// TestPlanGCPercent: the collector keeps less headroom while the queue is
// deep and gets its old target back once it is shallow, setting it only
// when the depth crosses the threshold; an operator's GOGC is left alone.
func TestPlanGCPercent(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	target := 80 // the process's target before: not necessarily 100
	var sets []int
	m := newPlanMemory(clk, 10*time.Second, "")
	m.free = func() {}
	m.gcPercent = func(p int) int {
		old := target
		target = p
		sets = append(sets, p)
		return old
	}
	for i, s := range []struct {
		pending int
		want    int
		sets    int
	}{
		{10, 80, 0},
		{releaseAfterPending, deepGCPercent, 1},
		{20000, deepGCPercent, 1}, // still deep: not set again
		{releaseAfterPending - 1, 80, 2},
		{5, 80, 2},
		{releaseAfterPending, deepGCPercent, 3},
	} {
		m.release(s.pending)
		if target != s.want || len(sets) != s.sets {
			t.Fatalf("step %d (%d pending): target %d after %d sets %v, want %d after %d", i, s.pending, target, len(sets), sets, s.want, s.sets)
		}
	}
	if op := newPlanMemory(clk, 10*time.Second, "200"); op.gcPercent != nil {
		t.Error("with GOGC set by the operator, the collector's target is still changed")
	}
	op := newPlanMemory(clk, 10*time.Second, "off")
	op.free = func() {}
	op.release(20000) // a nil gcPercent is not called
}
