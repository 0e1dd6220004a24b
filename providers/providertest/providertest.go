package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/google/go-cmp/cmp"
)

// Commands expresses the suite's test programs for one provider. Every
// argv must run on the provider's backend as given.
type Commands struct {
	// Print returns argv that writes s (exactly, no newline added) to
	// stdout and exits 0.
	Print func(s string) []string
	// Exit returns argv that exits with code.
	Exit func(code int) []string
	// Sleep is argv that runs for many minutes, until stopped, and ends on
	// SIGTERM.
	Sleep []string
	// PrintEnv returns argv that writes the value of environment variable
	// name to stdout.
	PrintEnv func(name string) []string
	// PrintPayload is argv that writes the contents of the file named by
	// $COMPUTEBOARD_PAYLOAD to stdout.
	PrintPayload []string
	// Env is added to every task the suite starts (a helper-process switch,
	// say).
	Env map[string]string
	// Tick is argv that writes the line "start" and then a line about
	// every 50ms, until stopped (the ability suites: suspend, requeue).
	Tick []string
	// TrapUSR1 is argv that writes "ready" once it handles SIGUSR1, and
	// on SIGUSR1 writes "usr1" and exits 0 (the signal suite).
	TrapUSR1 []string
	// ReadFile reads a Status.StdoutPath (default os.ReadFile).
	ReadFile func(path string) ([]byte, error)
	// NoOutput says the backend's test programs write no output the suite
	// can read (kwok, which plays the kubelet of fake Kubernetes nodes,
	// runs no containers): the suite then compares states and exit codes
	// only, and skips the cases whose only evidence is output (printing,
	// the environment, the payload). Print and PrintEnv may then return
	// any argv that exits 0, and PrintPayload may be any such argv.
	NoOutput bool
	// SlowTimeout says the backend enforces Task.Timeout only coarsely
	// (Slurm: whole minutes, checked every 30 s, so over a minute): the
	// Timeout case then skips under -short.
	SlowTimeout bool
}

// WaitLimit bounds every wait in the suite. It is generous on purpose: the
// suite checks what happens, never how fast.
const WaitLimit = 2 * time.Minute

// Run checks p against the providers.Provider contract. newProvider returns
// a fresh provider for each subtest and registers its own cleanup.
func Run(t *testing.T, newProvider func(t *testing.T) providers.Provider, cmds Commands) {
	t.Helper()
	if cmds.ReadFile == nil {
		cmds.ReadFile = os.ReadFile
	}
	s := suite{newProvider: newProvider, cmds: cmds}
	t.Run("RunToCompletion", s.runToCompletion)
	t.Run("StopMidRun", s.stopMidRun)
	t.Run("StopTwice", s.stopTwice)
	t.Run("StopFinished", s.stopFinished)
	t.Run("Timeout", s.timeout)
	t.Run("UnknownHandle", s.unknownHandle)
	t.Run("InvalidTask", s.invalidTask)
	t.Run("DuplicateID", s.duplicateID)
	t.Run("HandleRoundTrip", s.handleRoundTrip)
}

type suite struct {
	newProvider func(t *testing.T) providers.Provider
	cmds        Commands
}

// task returns a Task with a fresh ID and the suite's Env.
func (s suite) task(t *testing.T, argv []string) providers.Task {
	env := make(map[string]string, len(s.cmds.Env))
	for k, v := range s.cmds.Env {
		env[k] = v
	}
	return providers.Task{ID: TaskID(t), Argv: argv, Env: env}
}

// outcome is the part of a finished task's Status the suite compares.
type outcome struct {
	State    providers.State
	ExitCode *int
	TimedOut bool
	Stdout   string
}

func (s suite) runToCompletion(t *testing.T) {
	t.Parallel()
	const payload = `{"n": 7, "text": "payload ✓"}`
	tests := map[string]struct {
		argv    []string
		env     map[string]string
		payload []byte
		want    outcome
	}{
		"print": {
			argv: s.cmds.Print("hello, conformance"),
			want: outcome{State: providers.StateSucceeded, ExitCode: ptr(0), Stdout: "hello, conformance"},
		},
		"exit 0": {
			argv: s.cmds.Exit(0),
			want: outcome{State: providers.StateSucceeded, ExitCode: ptr(0)},
		},
		"exit 3": {
			argv: s.cmds.Exit(3),
			want: outcome{State: providers.StateFailed, ExitCode: ptr(3)},
		},
		"env passed through": {
			argv: s.cmds.PrintEnv("CB_CONFORMANCE_VAR"),
			env:  map[string]string{"CB_CONFORMANCE_VAR": "value with spaces = and equals"},
			want: outcome{State: providers.StateSucceeded, ExitCode: ptr(0), Stdout: "value with spaces = and equals"},
		},
		"payload passed through": {
			argv:    s.cmds.PrintPayload,
			payload: []byte(payload),
			want:    outcome{State: providers.StateSucceeded, ExitCode: ptr(0), Stdout: payload},
		},
		"empty payload": {
			argv: s.cmds.PrintPayload,
			want: outcome{State: providers.StateSucceeded, ExitCode: ptr(0)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if s.cmds.NoOutput && (tc.want.Stdout != "" || tc.env != nil || tc.payload != nil) {
				t.Skip("the backend's programs write no output the suite can read (Commands.NoOutput)")
			}
			t.Parallel()
			p := s.newProvider(t)
			task := s.task(t, tc.argv)
			for k, v := range tc.env {
				task.Env[k] = v
			}
			task.Payload = tc.payload
			h := Start(t, p, task)
			st := WaitDone(t, p, h)
			got := outcome{State: st.State, ExitCode: st.ExitCode, TimedOut: st.TimedOut}
			if !s.cmds.NoOutput {
				got.Stdout = s.stdout(t, st)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s\nstatus: %+v", diff, st)
			}
			if st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
				t.Errorf("StartedAt %v, FinishedAt %v: want both set, in order", st.StartedAt, st.FinishedAt)
			}
		})
	}
}

func (s suite) stopMidRun(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	h := Start(t, p, s.task(t, s.cmds.Sleep))
	WaitFor(t, p, h, "running", func(st providers.Status) bool { return st.State == providers.StateRunning })
	if err := p.Stop(t.Context(), h); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	st := WaitDone(t, p, h)
	if st.State != providers.StateCancelled {
		t.Errorf("state after Stop = %s, want %s (status %+v)", st.State, providers.StateCancelled, st)
	}
	if st.FinishedAt.IsZero() {
		t.Errorf("FinishedAt not set after Stop")
	}
}

func (s suite) stopTwice(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	h := Start(t, p, s.task(t, s.cmds.Sleep))
	for i := range 2 {
		if err := p.Stop(t.Context(), h); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if st := WaitDone(t, p, h); st.State != providers.StateCancelled {
		t.Errorf("state = %s, want %s", st.State, providers.StateCancelled)
	}
}

func (s suite) stopFinished(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	h := Start(t, p, s.task(t, s.cmds.Exit(0)))
	WaitDone(t, p, h)
	if err := p.Stop(t.Context(), h); err != nil {
		t.Fatalf("Stop of a finished task: %v", err)
	}
	if st := poll(t, p, h); st.State != providers.StateSucceeded {
		t.Errorf("state after Stop of a finished task = %s, want %s", st.State, providers.StateSucceeded)
	}
}

func (s suite) timeout(t *testing.T) {
	if s.cmds.SlowTimeout && testing.Short() {
		t.Skip("the backend takes over a minute to enforce a timeout (-short)")
	}
	t.Parallel()
	p := s.newProvider(t)
	task := s.task(t, s.cmds.Sleep)
	task.Timeout = 300 * time.Millisecond
	h := Start(t, p, task)
	st := WaitDone(t, p, h)
	if st.State != providers.StateFailed || !st.TimedOut || !strings.Contains(st.Error, "timeout") {
		t.Errorf("status = %+v, want failed, TimedOut, Error mentioning timeout", st)
	}
}

func (s suite) unknownHandle(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	known := Start(t, p, s.task(t, s.cmds.Exit(0)))
	WaitDone(t, p, known)
	tests := map[string]providers.Handle{
		"never started":  {Provider: known.Provider, ID: TaskID(t)},
		"other provider": {Provider: "not-" + known.Provider, ID: known.ID},
		"zero handle":    {},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := p.Poll(t.Context(), h); !errors.Is(err, providers.ErrUnknownHandle) {
				t.Errorf("Poll(%v) error = %v, want ErrUnknownHandle", h, err)
			}
			if err := p.Stop(t.Context(), h); !errors.Is(err, providers.ErrUnknownHandle) {
				t.Errorf("Stop(%v) error = %v, want ErrUnknownHandle", h, err)
			}
		})
	}
}

func (s suite) invalidTask(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	tests := map[string]func(*providers.Task){
		"empty argv":       func(tk *providers.Task) { tk.Argv = nil },
		"empty ID":         func(tk *providers.Task) { tk.ID = "" },
		"path in ID":       func(tk *providers.Task) { tk.ID = "../escape" },
		"negative timeout": func(tk *providers.Task) { tk.Timeout = -time.Second },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			task := s.task(t, s.cmds.Exit(0))
			mutate(&task)
			h, err := p.Start(t.Context(), task)
			if err == nil {
				stopLater(t, p, h)
			}
			if !errors.Is(err, providers.ErrInvalidTask) {
				t.Errorf("Start error = %v, want ErrInvalidTask", err)
			}
		})
	}
}

func (s suite) duplicateID(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	task := s.task(t, s.cmds.Exit(0))
	h := Start(t, p, task)
	WaitDone(t, p, h)
	h2, err := p.Start(t.Context(), task)
	if err == nil {
		stopLater(t, p, h2)
	}
	if !errors.Is(err, providers.ErrInvalidTask) {
		t.Errorf("second Start with ID %s: error = %v, want ErrInvalidTask", task.ID, err)
	}
	if st := poll(t, p, h); st.State != providers.StateSucceeded {
		t.Errorf("first task's state after a duplicate Start = %s, want %s", st.State, providers.StateSucceeded)
	}
}

func (s suite) handleRoundTrip(t *testing.T) {
	t.Parallel()
	p := s.newProvider(t)
	h := Start(t, p, s.task(t, s.cmds.Print("round trip")))
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back providers.Handle
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(h, back); diff != "" {
		t.Fatalf("handle after JSON round trip (-want +got):\n%s", diff)
	}
	st := WaitDone(t, p, back)
	if s.cmds.NoOutput {
		if st.State != providers.StateSucceeded {
			t.Errorf("via decoded handle: state %s; want succeeded", st.State)
		}
		return
	}
	if got := s.stdout(t, st); st.State != providers.StateSucceeded || got != "round trip" {
		t.Errorf("via decoded handle: state %s, stdout %q; want succeeded, %q", st.State, got, "round trip")
	}
}

func (s suite) stdout(t *testing.T, st providers.Status) string {
	t.Helper()
	if st.StdoutPath == "" {
		t.Fatalf("StdoutPath empty in %+v", st)
	}
	b, err := s.cmds.ReadFile(st.StdoutPath)
	if err != nil {
		t.Fatalf("read stdout: %v", err)
	}
	return string(b)
}

// Start starts task on p, failing the test on error, and stops the task
// when the test ends (after the test's own cleanups registered later).
func Start(t testing.TB, p providers.Provider, task providers.Task) providers.Handle {
	t.Helper()
	h, err := p.Start(t.Context(), task)
	if err != nil {
		t.Fatalf("Start(%s): %v", task.ID, err)
	}
	stopLater(t, p, h)
	return h
}

func stopLater(t testing.TB, p providers.Provider, h providers.Handle) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), WaitLimit)
		defer cancel()
		if err := p.Stop(ctx, h); err != nil {
			t.Errorf("cleanup: Stop(%v): %v", h, err)
		}
	})
}

// WaitDone polls until the task reaches a terminal state and returns that
// Status. It fails the test after WaitLimit.
func WaitDone(t testing.TB, p providers.Provider, h providers.Handle) providers.Status {
	t.Helper()
	return WaitFor(t, p, h, "a terminal state", func(st providers.Status) bool { return st.State.Terminal() })
}

// WaitFor polls until ok(status) holds, failing the test after WaitLimit or
// on a Poll error. what describes the condition in the failure message.
func WaitFor(t testing.TB, p providers.Provider, h providers.Handle, what string, ok func(providers.Status) bool) providers.Status {
	t.Helper()
	var last providers.Status
	err := Eventually(t.Context(), func() (bool, error) {
		st, err := p.Poll(t.Context(), h)
		last = st
		return err == nil && ok(st), err
	})
	if err != nil {
		t.Fatalf("waiting for %v to reach %s: %v (last status %+v)", h, what, err, last)
	}
	return last
}

// Eventually calls cond every 10ms until it returns true or an error, ctx
// ends, or WaitLimit passes.
func Eventually(ctx context.Context, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeoutCause(ctx, WaitLimit, errors.New("gave up after providertest.WaitLimit"))
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := cond()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

func poll(t testing.TB, p providers.Provider, h providers.Handle) providers.Status {
	t.Helper()
	st, err := p.Poll(t.Context(), h)
	if err != nil {
		t.Fatalf("Poll(%v): %v", h, err)
	}
	return st
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// TaskID returns a task ID unique to this call, readable in listings
// (lowercase, so it also suits Kubernetes names): "ct-<test name>-<random>".
func TaskID(t testing.TB) string {
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(name) > 32 {
		name = strings.TrimRight(name[:32], "-")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "ct-" + name + "-" + hex.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }
