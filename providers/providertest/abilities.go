package providertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/google/go-cmp/cmp"
)

// Suites for the optional abilities (providers/abilities.go). A provider's
// tests call the ones it implements after Run, with the same Commands
// (Tick and TrapUSR1 filled in where a suite needs them). newProvider
// returns a provider that implements the ability; the suite fails if it
// does not.

// RunSuspender checks providers.Suspender: a suspended task makes no
// progress (its output stops growing) and is reported running with
// Suspended set; a resumed one goes on; an ended task is ErrNotRunning.
// Needs Commands.Tick.
func RunSuspender(t *testing.T, newProvider func(t *testing.T) providers.Provider, cmds Commands) {
	t.Helper()
	s := suite{newProvider: newProvider, cmds: withDefaults(cmds)}
	t.Run("SuspendResume", func(t *testing.T) {
		t.Parallel()
		p := s.newProvider(t)
		sp := ability[providers.Suspender](t, p)
		h := Start(t, p, s.task(t, s.cmds.Tick))
		st := WaitFor(t, p, h, "running with output", func(st providers.Status) bool {
			return st.State == providers.StateRunning && s.outputLen(st) > 0
		})
		if err := sp.Suspend(t.Context(), h); err != nil {
			t.Fatalf("Suspend: %v", err)
		}
		WaitFor(t, p, h, "suspended", func(st providers.Status) bool { return st.State == providers.StateRunning && st.Suspended })
		// Give the stop time to reach every process, then watch.
		time.Sleep(time.Second)
		before := s.outputLen(st)
		time.Sleep(1500 * time.Millisecond)
		if after := s.outputLen(st); after != before {
			t.Errorf("output grew from %d to %d bytes while suspended", before, after)
		}
		if err := sp.Resume(t.Context(), h); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		WaitFor(t, p, h, "resumed and writing again", func(st providers.Status) bool {
			return st.State == providers.StateRunning && !st.Suspended && s.outputLen(st) > before
		})
	})
	t.Run("Ended", func(t *testing.T) {
		t.Parallel()
		p := s.newProvider(t)
		sp := ability[providers.Suspender](t, p)
		h := Start(t, p, s.task(t, s.cmds.Exit(0)))
		WaitDone(t, p, h)
		if err := sp.Suspend(t.Context(), h); !errors.Is(err, providers.ErrNotRunning) {
			t.Errorf("Suspend of an ended task: %v, want ErrNotRunning", err)
		}
		if err := sp.Suspend(t.Context(), providers.Handle{Provider: h.Provider, ID: TaskID(t)}); !errors.Is(err, providers.ErrUnknownHandle) {
			t.Errorf("Suspend of an unknown handle: %v, want ErrUnknownHandle", err)
		}
	})
}

// RunSignaler checks providers.Signaler: the task gets the signal (and
// handles it as it likes); an ended task is ErrNotRunning. Needs
// Commands.TrapUSR1.
func RunSignaler(t *testing.T, newProvider func(t *testing.T) providers.Provider, cmds Commands) {
	t.Helper()
	s := suite{newProvider: newProvider, cmds: withDefaults(cmds)}
	t.Run("Signal", func(t *testing.T) {
		t.Parallel()
		p := s.newProvider(t)
		sg := ability[providers.Signaler](t, p)
		h := Start(t, p, s.task(t, s.cmds.TrapUSR1))
		WaitFor(t, p, h, "ready", func(st providers.Status) bool { return s.outputHas(st, "ready") })
		if err := sg.Signal(t.Context(), h, syscall.SIGUSR1); err != nil {
			t.Fatalf("Signal: %v", err)
		}
		st := WaitDone(t, p, h)
		if st.State != providers.StateSucceeded || !s.outputHas(st, "usr1") {
			t.Errorf("after SIGUSR1: state %s, stdout %q; want succeeded, usr1", st.State, s.stdout(t, st))
		}
		if err := sg.Signal(t.Context(), h, syscall.SIGUSR1); !errors.Is(err, providers.ErrNotRunning) {
			t.Errorf("Signal of an ended task: %v, want ErrNotRunning", err)
		}
	})
}

// RunRequeuer checks providers.Requeuer: a requeued task runs again from
// the start under the same handle (its output shows a second "start":
// output is appended to across runs), and can still be stopped; an ended
// task is ErrNotRunning. Needs Commands.Tick.
func RunRequeuer(t *testing.T, newProvider func(t *testing.T) providers.Provider, cmds Commands) {
	t.Helper()
	s := suite{newProvider: newProvider, cmds: withDefaults(cmds)}
	t.Run("Requeue", func(t *testing.T) {
		t.Parallel()
		p := s.newProvider(t)
		rq := ability[providers.Requeuer](t, p)
		h := Start(t, p, s.task(t, s.cmds.Tick))
		WaitFor(t, p, h, "started", func(st providers.Status) bool { return s.outputHas(st, "start") })
		if err := rq.Requeue(t.Context(), h); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		WaitFor(t, p, h, "running a second time", func(st providers.Status) bool {
			return st.State == providers.StateRunning && s.startCount(st) >= 2
		})
		if err := p.Stop(t.Context(), h); err != nil {
			t.Fatalf("Stop after requeue: %v", err)
		}
		if st := WaitDone(t, p, h); st.State != providers.StateCancelled {
			t.Errorf("state after Stop = %s, want cancelled", st.State)
		}
		if err := rq.Requeue(t.Context(), h); !errors.Is(err, providers.ErrNotRunning) {
			t.Errorf("Requeue of an ended task: %v, want ErrNotRunning", err)
		}
	})
}

// RunLister checks providers.Lister: a started task is listed with its
// handle, labels and note, running or ended since the cutoff, and not
// when it ended before it.
func RunLister(t *testing.T, newProvider func(t *testing.T) providers.Provider, cmds Commands) {
	t.Helper()
	s := suite{newProvider: newProvider, cmds: withDefaults(cmds)}
	t.Run("Tasks", func(t *testing.T) {
		t.Parallel()
		p := s.newProvider(t)
		ls := ability[providers.Lister](t, p)
		since := time.Now().Add(-time.Minute)
		done := s.task(t, s.cmds.Exit(0))
		done.Labels = map[string]string{"job": "j-done", "attempt": "1"}
		done.Note = json.RawMessage(`{"request":"r-done"}`)
		hDone := Start(t, p, done)
		run := s.task(t, s.cmds.Sleep)
		run.Labels = map[string]string{"job": "j-run"}
		hRun := Start(t, p, run)
		WaitDone(t, p, hDone)
		got, err := ls.Tasks(t.Context(), since)
		if err != nil {
			t.Fatalf("Tasks: %v", err)
		}
		byHandle := map[providers.Handle]providers.TaskRecord{}
		for _, tr := range got {
			byHandle[tr.Handle] = tr
		}
		for h, want := range map[providers.Handle]providers.Task{hDone: done, hRun: run} {
			tr, ok := byHandle[h]
			if !ok {
				t.Errorf("Tasks(%v) lacks %v; got %d records", since, h, len(got))
				continue
			}
			if diff := cmp.Diff(want.Labels, tr.Labels); diff != "" {
				t.Errorf("%v labels (-want +got):\n%s", h, diff)
			}
			if len(want.Note) > 0 && !bytes.Equal(compact(t, want.Note), compact(t, tr.Note)) {
				t.Errorf("%v note = %s, want %s", h, tr.Note, want.Note)
			}
		}
		if st := byHandle[hDone].Status.State; st != providers.StateSucceeded {
			t.Errorf("ended task listed as %s, want succeeded", st)
		}
		if st := byHandle[hRun].Status.State; st.Terminal() {
			t.Errorf("running task listed as %s", st)
		}
		later, err := ls.Tasks(t.Context(), time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("Tasks: %v", err)
		}
		for _, tr := range later {
			if tr.Handle == hDone {
				t.Errorf("a task that ended before the cutoff is listed: %+v", tr)
			}
		}
	})
}

// RunBatchPoll checks that polling many tasks at once costs the backend
// at most one call per round (a provider that reads all its tasks in one
// request, shared by the Polls that come within its poll interval, which
// must be longer than a round: about a second does). calls returns how
// many backend calls the provider has made so far.
func RunBatchPoll(t *testing.T, newProvider func(t *testing.T) providers.Provider, cmds Commands, calls func(p providers.Provider) int) {
	t.Helper()
	s := suite{newProvider: newProvider, cmds: withDefaults(cmds)}
	t.Run("BatchPoll", func(t *testing.T) {
		t.Parallel()
		const n = 8
		p := s.newProvider(t)
		var hs []providers.Handle
		for range n {
			hs = append(hs, Start(t, p, s.task(t, s.cmds.Sleep)))
		}
		for _, h := range hs {
			WaitFor(t, p, h, "running", func(st providers.Status) bool { return st.State == providers.StateRunning })
		}
		for round := range 3 {
			before := calls(p)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for _, h := range hs {
				wg.Go(func() {
					if _, err := p.Poll(t.Context(), h); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Poll: %v", err)
			}
			if got := calls(p) - before; got > 1 {
				t.Errorf("round %d: %d polls made %d backend calls, want at most 1", round, n, got)
			}
		}
	})
}

// ability returns p as A, failing the test when it is not one.
func ability[A any](t *testing.T, p providers.Provider) A {
	t.Helper()
	a, ok := p.(A)
	if !ok {
		var zero A
		t.Fatalf("%T does not implement %T", p, &zero)
	}
	return a
}

func withDefaults(cmds Commands) Commands {
	if cmds.ReadFile == nil {
		cmds.ReadFile = os.ReadFile
	}
	return cmds
}

// outputLen is the size of the task's stdout so far (0 when unreadable).
func (s suite) outputLen(st providers.Status) int {
	b, _ := s.cmds.ReadFile(st.StdoutPath)
	return len(b)
}

func (s suite) outputHas(st providers.Status, word string) bool {
	b, _ := s.cmds.ReadFile(st.StdoutPath)
	return bytes.Contains(b, []byte(word))
}

func (s suite) startCount(st providers.Status) int {
	b, _ := s.cmds.ReadFile(st.StdoutPath)
	return bytes.Count(b, []byte("start"))
}

func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("note %s: %v", raw, err)
	}
	return b.Bytes()
}
