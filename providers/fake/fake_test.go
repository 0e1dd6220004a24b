package fake

import (
	"context"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/providers"
)

func start(t *testing.T, p *Provider, id string, dur string, timeout time.Duration) providers.Handle {
	t.Helper()
	h, err := p.Start(context.Background(), providers.Task{ID: id, Labels: map[string]string{DurationLabel: dur}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func poll(t *testing.T, p *Provider, h providers.Handle) providers.Status {
	t.Helper()
	st, err := p.Poll(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// next waits up to 5 s for a notice.
func next(t *testing.T, c <-chan providers.Handle) providers.Handle {
	t.Helper()
	select {
	case h := <-c:
		return h
	case <-time.After(5 * time.Second):
		t.Fatal("no notice within 5 s")
		return providers.Handle{}
	}
}

// quiet checks that no notice comes for a while (several watcher checks).
func quiet(t *testing.T, c <-chan providers.Handle) {
	t.Helper()
	select {
	case h := <-c:
		t.Fatalf("notice for %v before its task ended", h)
	case <-time.After(10 * CheckEvery):
	}
}

// TestEndedNotices: a task's end is notified once the (fake) clock passes
// it, whether it succeeds or times out, and at once when it is stopped;
// Poll reports the end when the notice comes. Tasks started before Ended
// was first called are notified too.
func TestEndedNotices(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1000, 0))
	p := New("fake", clk, time.Hour)
	early := start(t, p, "early", "10", 0) // before Ended: still watched
	c := p.Ended()
	if p.Ended() != c {
		t.Error("Ended returned another channel on its second call")
	}
	done := start(t, p, "done", "10", 0)
	slow := start(t, p, "slow", "30", 5*time.Second) // times out at 5 s
	stopped := start(t, p, "stopped", "20", 0)
	quiet(t, c)

	if err := p.Stop(context.Background(), stopped); err != nil {
		t.Fatal(err)
	}
	if h := next(t, c); h != stopped {
		t.Fatalf("notice for %v, want %v (stopped)", h, stopped)
	}
	if st := poll(t, p, stopped); st.State != providers.StateCancelled {
		t.Errorf("stopped task: %+v", st)
	}
	quiet(t, c)

	clk.Advance(5 * time.Second)
	if h := next(t, c); h != slow {
		t.Fatalf("notice for %v, want %v (timed out)", h, slow)
	}
	if st := poll(t, p, slow); st.State != providers.StateFailed || !st.TimedOut {
		t.Errorf("timed-out task: %+v", st)
	}
	quiet(t, c)

	clk.Advance(5 * time.Second)
	got := map[providers.Handle]bool{next(t, c): true, next(t, c): true}
	if !got[done] || !got[early] {
		t.Fatalf("notices %v, want %v and %v", got, done, early)
	}
	for _, h := range []providers.Handle{done, early} {
		if st := poll(t, p, h); st.State != providers.StateSucceeded {
			t.Errorf("%v: %+v", h, st)
		}
	}
	quiet(t, c) // each end once; the stopped task's planned end passes unnoticed
	clk.Advance(time.Hour)
	quiet(t, c)
}

// TestEndedZeroDuration: a task with nothing to run is notified at once.
func TestEndedZeroDuration(t *testing.T) {
	t.Parallel()
	p := New("fake", clock.NewFake(time.Unix(1000, 0)), time.Hour)
	c := p.Ended()
	h := start(t, p, "now", "0", 0)
	if got := next(t, c); got != h {
		t.Fatalf("notice for %v, want %v", got, h)
	}
}

// TestStopAfterTimeout: a task that timed out stays failed: a later Stop
// does not turn it cancelled, nor send a notice.
func TestStopAfterTimeout(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1000, 0))
	p := New("fake", clk, time.Hour)
	c := p.Ended()
	h := start(t, p, "slow", "30", 5*time.Second)
	clk.Advance(6 * time.Second)
	next(t, c)
	if err := p.Stop(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if st := poll(t, p, h); st.State != providers.StateFailed || !st.TimedOut {
		t.Errorf("after Stop: %+v, want failed, timed out", st)
	}
	quiet(t, c)
}

// TestForgetUnwatches: a forgotten task is no longer notified, and the
// watcher goes once nothing is left to end.
func TestForgetUnwatches(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1000, 0))
	p := New("fake", clk, time.Hour)
	c := p.Ended()
	h := start(t, p, "gone", "10", 0)
	p.Forget(h)
	clk.Advance(time.Minute)
	quiet(t, c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watching || len(p.ends) != 0 {
		t.Errorf("watching %v with %d ends", p.watching, len(p.ends))
	}
}
