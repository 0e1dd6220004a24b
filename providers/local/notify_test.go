package local

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
)

// nextNotice waits for a notice on c, failing the test after
// providertest.WaitLimit.
func nextNotice(t *testing.T, c <-chan providers.Handle) providers.Handle {
	t.Helper()
	select {
	case h := <-c:
		return h
	case <-time.After(providertest.WaitLimit):
		t.Fatalf("no notice within %v", providertest.WaitLimit)
		return providers.Handle{}
	}
}

// TestEndedNotices: the provider says when a task it started ends, on its
// own (exit), stopped, or timed out, supervised or watched in-process; when
// the notice comes, Poll reports the end (the outcome is recorded). Nobody
// polls before: only the notice tells the test the task ended.
func TestEndedNotices(t *testing.T) {
	t.Parallel()
	for name, newP := range map[string]func(*testing.T, Config) *Provider{
		"supervised": newTestProvider, "in-process": newDirectProvider,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newP(t, Config{})
			c := p.Ended()
			if p.Ended() != c {
				t.Error("Ended returned another channel on its second call")
			}
			exits := providertest.Start(t, p, helperTask(t, "exit", "3"))
			stopped := providertest.Start(t, p, helperTask(t, "sleep"))
			slow := helperTask(t, "sleep")
			slow.Timeout = 300 * time.Millisecond
			timesOut := providertest.Start(t, p, slow)
			if err := p.Stop(t.Context(), stopped); err != nil {
				t.Fatal(err)
			}
			want := map[providers.Handle]func(providers.Status) bool{
				exits: func(st providers.Status) bool {
					return st.State == providers.StateFailed && st.ExitCode != nil && *st.ExitCode == 3
				},
				stopped:  func(st providers.Status) bool { return st.State == providers.StateCancelled },
				timesOut: func(st providers.Status) bool { return st.State == providers.StateFailed && st.TimedOut },
			}
			for len(want) > 0 {
				h := nextNotice(t, c)
				ok, known := want[h]
				if !known {
					t.Fatalf("notice for %v: not one of the tasks, or twice", h)
				}
				delete(want, h)
				if st := poll(t, p, h); !ok(st) {
					t.Errorf("%v when notified: %+v", h, st)
				}
				if !supervise.Exists(filepath.Join(p.taskDir(h.ID), supervise.FileExit)) {
					t.Errorf("%v notified before its exit record was published", h)
				}
			}
		})
	}
}

// TestEndedAdopted: a task an earlier adapter process started (it was
// SIGKILLed) is watched from the first Poll that finds it running: its
// end is notified when its supervisor exits, after recording it.
func TestEndedAdopted(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	release := filepath.Join(workDir(t), "release")
	h := startInDoomedAdapter(t, dir, 0, "exit-when", release, "3")
	p := newTestProvider(t, Config{WorkDir: dir})
	c := p.Ended()
	if st := poll(t, p, h); st.State != providers.StateRunning {
		t.Fatalf("before the task ends: %+v, want running", st)
	}
	poll(t, p, h) // a second Poll does not watch it twice
	select {
	case got := <-c:
		t.Fatalf("notice for %v while the task runs", got)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := nextNotice(t, c); got != h {
		t.Fatalf("notice for %v, want %v", got, h)
	}
	if st := poll(t, p, h); st.State != providers.StateFailed || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("when notified: %+v, want failed with exit code 3", st)
	}
	select {
	case got := <-c:
		t.Errorf("a second notice, for %v", got)
	case <-time.After(100 * time.Millisecond):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.adopted[h.ID]; ok {
		t.Errorf("the task's watch is still held (%v)", w)
	}
}

// TestEndedAdoptedStopped: stopping an adopted task notifies its end.
func TestEndedAdoptedStopped(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	h := startInDoomedAdapter(t, dir, 0, "sleep")
	p := newTestProvider(t, Config{WorkDir: dir})
	c := p.Ended()
	if err := p.Stop(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if got := nextNotice(t, c); got != h {
		t.Fatalf("notice for %v, want %v", got, h)
	}
	if st := poll(t, p, h); st.State != providers.StateCancelled {
		t.Errorf("when notified: %+v, want cancelled", st)
	}
}

// TestEndedAdoptedClose: Close ends the watches of adopted tasks.
func TestEndedAdoptedClose(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	h := startInDoomedAdapter(t, dir, 0, "sleep")
	p := newTestProvider(t, Config{WorkDir: dir})
	p.Ended()
	if st := poll(t, p, h); st.State != providers.StateRunning {
		t.Fatalf("%+v, want running", st)
	}
	p.mu.Lock()
	w := p.adopted[h.ID]
	p.mu.Unlock()
	if w == nil {
		t.Fatal("the adopted task is not watched")
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.f.Stat(); err == nil {
		t.Error("the watch's pidfd is still open after Close")
	}
	killTask(filepath.Join(dir, h.ID))
}
