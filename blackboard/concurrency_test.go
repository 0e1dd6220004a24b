package blackboard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentPostUpdate: many goroutines post, update and retract at
// once; counters, events and indexes must all agree afterwards.
func TestConcurrentPostUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const workers, each = 8, 25
	v := newEnv(t, Config{MaxEntries: -1})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id, err := v.s.Post(ctx, mk("load.t", withPrio(Priority(i%4)), withSource("w"), withTTL(1000)))
				if err == nil {
					err = v.s.Update(ctx, id, Update{Confidence: new(0.5), Tags: &[]string{"x"}})
				}
				if err == nil && (w+i)%2 == 0 {
					err = v.s.Retract(ctx, id)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := workers * each
	checkConsistent(t, v, n)
	stats, err := v.s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.TotalPosted != int64(n) || stats.StatusDistribution[StatusRetracted] != int64(n/2) ||
		stats.StatusDistribution[StatusActive] != int64(n/2) {
		t.Errorf("stats = %+v", stats)
	}
	if got := len(v.events(t, EventEntryAdded)); got != n {
		t.Errorf("%d added events, want %d", got, n)
	}
	// Two changed fields per entry, plus a status change for half of them.
	if got := len(v.events(t, EventEntryUpdated)); got != 2*n+n/2 {
		t.Errorf("%d updated events, want %d", got, 2*n+n/2)
	}
}

// TestConcurrentUpdateIf: racing compare-and-set claims on one entry let
// exactly one win.
func TestConcurrentUpdateIf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t"))
	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			err := v.s.UpdateIf(ctx, id, StatusActive, Update{Status: new(StatusConsumed)})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, ErrConflict):
				conflicts.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 15 {
		t.Errorf("wins %d conflicts %d, want 1 and 15", wins.Load(), conflicts.Load())
	}
	if got := len(v.events(t, EventEntryUpdated)); got != 1 {
		t.Errorf("%d updated events, want 1", got)
	}
}
