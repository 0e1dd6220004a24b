package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
	"github.com/google/go-cmp/cmp"
)

// TestAdapterCrash is the product guarantee: a task started by an adapter
// that is then SIGKILLed keeps running under its supervisor, and a new
// provider instance on the same WorkDir, given the old handle, reports the
// task's real outcome once it ends, or re-attaches while it runs. The
// adapter is a child process of the test (helper "adapter"); nothing of it
// survives but the task directory and the supervisor it started.
func TestAdapterCrash(t *testing.T) {
	t.Parallel()
	for _, served := range []bool{false, true} {
		name := "per-task supervisor"
		if served {
			name = "supervisor server"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			adapterCrash(t, served)
		})
	}
}

func adapterCrash(t *testing.T, served bool) {

	for name, tc := range map[string]struct {
		code      int
		wantState providers.State
	}{
		"succeeded": {code: 0, wantState: providers.StateSucceeded},
		"failed":    {code: 3, wantState: providers.StateFailed},
	} {
		t.Run("ends while down/"+name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			release := filepath.Join(workDir(t), "release")
			h := startDoomed(t, dir, served, 0, "exit-when", release, fmt.Sprint(tc.code))
			// The adapter is dead; only now may the task end.
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			// Let it end before any adapter is back: the outcome must be on
			// disk, not observed by the new instance.
			waitExitRecord(t, filepath.Join(dir, h.ID))

			p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
			st := providertest.WaitDone(t, p, h)
			got := providers.Status{State: st.State, ExitCode: st.ExitCode, Error: st.Error}
			want := providers.Status{State: tc.wantState, ExitCode: &tc.code}
			if tc.code != 0 {
				want.Error = "exit status " + fmt.Sprint(tc.code)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("outcome seen by the new instance (-want +got):\n%s", diff)
			}
			if st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
				t.Errorf("StartedAt %v, FinishedAt %v: want both set, in order", st.StartedAt, st.FinishedAt)
			}
			if out := readFile(t, st.StdoutPath); out != "ran\n" {
				t.Errorf("stdout %q, want %q: the task ran once, and only once", out, "ran\n")
			}
		})
	}

	t.Run("ends after restart", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		release := filepath.Join(workDir(t), "release")
		h := startDoomed(t, dir, served, 0, "exit-when", release, "3")
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
		if st := poll(t, p, h); st.State != providers.StateRunning {
			t.Fatalf("before the task ends: %+v, want running", st)
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		st := providertest.WaitDone(t, p, h)
		if st.State != providers.StateFailed || st.ExitCode == nil || *st.ExitCode != 3 {
			t.Errorf("status %+v, want failed with exit code 3", st)
		}
	})

	t.Run("running: re-attached and stopped", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		h := startDoomed(t, dir, served, 0, "family", "stay")
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
		grandchild := readPID(t, p, h)
		rec := mustReadState(t, filepath.Join(dir, h.ID))
		if rec.SupervisorPID == 0 {
			t.Fatalf("state record %+v names no supervisor", rec)
		}

		if st := poll(t, p, h); st.State != providers.StateRunning || st.Suspended {
			t.Errorf("state %s, suspended %v; want running, false", st.State, st.Suspended)
		}
		if err := p.Suspend(t.Context(), h); err != nil {
			t.Fatalf("Suspend: %v", err)
		}
		providertest.WaitFor(t, p, h, "suspended", func(st providers.Status) bool { return st.Suspended })
		if err := p.Resume(t.Context(), h); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		providertest.WaitFor(t, p, h, "resumed", func(st providers.Status) bool { return !st.Suspended })

		for i := range 2 {
			if err := p.Stop(t.Context(), h); err != nil {
				t.Fatalf("Stop #%d: %v", i+1, err)
			}
		}
		// Stop returned, so the outcome is recorded and the group is empty.
		st := poll(t, p, h)
		want := providers.Status{State: providers.StateCancelled, Error: "stopped"}
		if diff := cmp.Diff(want, providers.Status{State: st.State, ExitCode: st.ExitCode, Error: st.Error}); diff != "" {
			t.Errorf("after Stop (-want +got):\n%s", diff)
		}
		for _, pid := range []int{rec.PID, grandchild} {
			if alive(pid) {
				t.Errorf("task process %d alive after Stop", pid)
			}
		}
		if !served { // a server lives on for other tasks
			waitGone(t, rec.SupervisorPID)
		} else if !rec.SupervisorServer {
			t.Errorf("state record %+v does not say its supervisor is the server", rec)
		}
		if err := p.Signal(t.Context(), h, syscall.SIGUSR1); !errors.Is(err, providers.ErrNotRunning) {
			t.Errorf("Signal after Stop: %v, want ErrNotRunning", err)
		}
	})

	t.Run("supervisor killed while down", func(t *testing.T) {
		// Without its supervisor the task can still be re-attached to and
		// stopped, but its exit status is gone (and so is any output it
		// writes after: the supervisor was the reader of its pipes).
		t.Parallel()
		dir := workDir(t)
		h := startDoomed(t, dir, served, 0, "family", "stay")
		rec := mustReadState(t, filepath.Join(dir, h.ID))
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
		grandchild := readPID(t, p, h)
		if err := syscall.Kill(rec.SupervisorPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitGone(t, rec.SupervisorPID)
		if st := poll(t, p, h); st.State != providers.StateRunning {
			t.Errorf("state %s, want running", st.State)
		}
		if err := p.Stop(t.Context(), h); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		st := poll(t, p, h)
		if st.State != providers.StateCancelled || st.ExitCode != nil || !strings.Contains(st.Error, "exit status unknown") {
			t.Errorf("after Stop: %+v, want cancelled, exit status unknown", st)
		}
		for _, pid := range []int{rec.PID, grandchild} {
			if alive(pid) {
				t.Errorf("task process %d alive after Stop", pid)
			}
		}
	})

	t.Run("output capped while down", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		release := filepath.Join(workDir(t), "release")
		h := startDoomed(t, dir, served, 0, "spew-when", release, "5000", "10")
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitExitRecord(t, filepath.Join(dir, h.ID))
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
		st := poll(t, p, h)
		if st.State != providers.StateSucceeded || st.StdoutDropped != 5000-doomedAdapterMaxOutput || st.StderrDropped != 0 {
			t.Errorf("status %+v, want succeeded, %d bytes of stdout dropped", st, 5000-doomedAdapterMaxOutput)
		}
		if n := len(readFile(t, st.StdoutPath)); n != doomedAdapterMaxOutput {
			t.Errorf("stdout holds %d bytes, want the cap, %d", n, doomedAdapterMaxOutput)
		}
	})

	t.Run("timeout enforced while down", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		h := startDoomed(t, dir, served, time.Second, "sleep")
		waitExitRecord(t, filepath.Join(dir, h.ID))
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
		st := poll(t, p, h)
		if st.State != providers.StateFailed || !st.TimedOut || !strings.Contains(st.Error, "timeout") {
			t.Errorf("status %+v, want failed, timed out", st)
		}
	})
}

// startInDoomedAdapter starts helper program args as a task, with timeout,
// from a supervised provider in a child process on work dir dir, SIGKILLs
// that process once Start has returned there, and returns the handle.
func startInDoomedAdapter(t *testing.T, dir string, timeout time.Duration, args ...string) providers.Handle {
	t.Helper()
	return startInDoomedAdapterWith(t, dir, "", timeout, args...)
}

// startInDoomedAdapterWith is startInDoomedAdapter with supervisor binary
// sup ("": the test binary).
func startInDoomedAdapterWith(t *testing.T, dir, sup string, timeout time.Duration, args ...string) providers.Handle {
	t.Helper()
	return startDoomedWith(t, dir, sup, false, timeout, args...)
}

// startDoomed is startInDoomedAdapter, under the work directory's
// supervisor server if served.
func startDoomed(t *testing.T, dir string, served bool, timeout time.Duration, args ...string) providers.Handle {
	t.Helper()
	return startDoomedWith(t, dir, "", served, timeout, args...)
}

func startDoomedWith(t *testing.T, dir, sup string, served bool, timeout time.Duration, args ...string) providers.Handle {
	t.Helper()
	id := providertest.TaskID(t)
	h := providers.Handle{Provider: "local", ID: id}
	cmdArgs := append([]string{"adapter", dir, id, timeout.String()}, helper(t, args...)...)
	cmd := exec.Command(testBinary(t), cmdArgs...)
	cmd.Env = []string{helperEnv + "=1"}
	if sup != "" {
		cmd.Env = append(cmd.Env, supervisorEnv+"="+sup)
	}
	if served {
		cmd.Env = append(cmd.Env, serverModeEnv+"=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killTask(filepath.Join(dir, id)) }) // in case the test fails first

	line := make(chan string, 1)
	go func() { // ends at the first line or when the adapter exits
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != id {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("adapter said %q, want the task ID; stderr: %s", s, stderr.String())
		}
	case <-time.After(providertest.WaitLimit):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("adapter did not start the task; stderr: %s", stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup of any kind
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("adapter: %v, want killed by SIGKILL; stderr: %s", err, stderr.String())
	}
	return h
}

// killTask SIGKILLs whatever is left of the task in taskDir (its process
// group and its supervisor), after checking they are still those processes.
func killTask(taskDir string) {
	rec, err := supervise.ReadState(taskDir)
	if err != nil {
		return
	}
	if identify(rec).leader != 0 {
		_ = syscall.Kill(-rec.PGID, syscall.SIGKILL)
	}
	if supervisorAlive(rec) {
		_ = syscall.Kill(rec.SupervisorPID, syscall.SIGKILL)
	}
	// The supervisor, killed too, leaves the task's cgroup behind (a
	// restarted provider's Prune would remove it; the test has none).
	_ = clearCgroup(taskDir)
}

func waitExitRecord(t *testing.T, taskDir string) {
	t.Helper()
	err := providertest.Eventually(t.Context(), func() (bool, error) {
		return supervise.Exists(filepath.Join(taskDir, supervise.FileExit)), nil
	})
	if err != nil {
		t.Fatalf("waiting for the exit record in %s: %v", taskDir, err)
	}
}

// waitGone waits for pid to end. A supervisor outlives its recorded outcome
// by a moment (and its parent, once the adapter is gone, may leave it a
// zombie: that counts as gone).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	err := providertest.Eventually(t.Context(), func() (bool, error) { return !alive(pid), nil })
	if err != nil {
		t.Errorf("process %d still alive: %v", pid, err)
	}
}

// TestSupervisorKilled: when a task's supervisor dies without recording an
// outcome, the adapter that started it stops what is left of the task and
// reports it lost; a stop requested before that makes it cancelled.
func TestSupervisorKilled(t *testing.T) {
	t.Parallel()
	for _, served := range []bool{false, true} {
		t.Run(fmt.Sprint("served=", served), func(t *testing.T) {
			t.Parallel()
			supervisorKilled(t, served)
		})
	}
}

func supervisorKilled(t *testing.T, served bool) {
	dir := workDir(t)
	p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
	h := providertest.Start(t, p, helperTask(t, "family", "stay"))
	grandchild := readPID(t, p, h)
	rec := mustReadState(t, filepath.Join(dir, h.ID))
	if err := syscall.Kill(rec.SupervisorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := providertest.WaitDone(t, p, h)
	if st.State != providers.StateLost || st.ExitCode != nil || !strings.Contains(st.Error, "supervisor") {
		t.Errorf("status %+v, want lost, no exit code, error naming the supervisor", st)
	}
	for _, pid := range []int{rec.PID, grandchild} {
		if alive(pid) {
			t.Errorf("task process %d alive after its supervisor died", pid)
		}
	}
	p2 := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: served})
	if diff := cmp.Diff(st, poll(t, p2, h)); diff != "" {
		t.Errorf("status seen by a new instance (-old +new):\n%s", diff)
	}
}

// TestInstancesAgree: two instances on one WorkDir, the second stopping the
// first one's running task, end up reporting the same outcome: one exit
// record is published, and the other side adopts it.
func TestInstancesAgree(t *testing.T) {
	t.Parallel()
	for name, newP := range map[string]func(*testing.T, Config) *Provider{
		"supervised": newTestProvider,
		"in-process": newDirectProvider,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			p1 := newP(t, Config{WorkDir: dir})
			h := providertest.Start(t, p1, helperTask(t, "sleep"))
			providertest.WaitFor(t, p1, h, "running", func(st providers.Status) bool { return st.State == providers.StateRunning })
			p2 := newP(t, Config{WorkDir: dir})
			if err := p2.Stop(t.Context(), h); err != nil {
				t.Fatalf("Stop from the second instance: %v", err)
			}
			st2 := poll(t, p2, h)
			st1 := providertest.WaitDone(t, p1, h)
			if diff := cmp.Diff(st1, st2); diff != "" {
				t.Errorf("outcomes differ (-first +second):\n%s", diff)
			}
			if !st1.State.Terminal() || st1.State == providers.StateSucceeded {
				t.Errorf("status %+v, want ended by the stop", st1)
			}
			if name == "supervised" && (st1.State != providers.StateCancelled || st1.Error != "stopped") {
				t.Errorf("status %+v, want cancelled by the stop, as the supervisor saw it", st1)
			}
		})
	}
}

// TestArgvIsNotAShellString: arguments reach the task byte for byte, in
// both modes; nothing on the way interprets them.
func TestArgvIsNotAShellString(t *testing.T) {
	t.Parallel()
	const arg = `it's "$(touch pwned)"; $HOME ` + "`id` *\n\\"
	for name, newP := range map[string]func(*testing.T, Config) *Provider{
		"supervised": newTestProvider,
		"in-process": newDirectProvider,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			p := newP(t, Config{WorkDir: dir})
			task := helperTask(t, "print", arg)
			st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
			if got := readFile(t, st.StdoutPath); st.State != providers.StateSucceeded || got != arg {
				t.Errorf("state %s, stdout %q; want succeeded, %q", st.State, got, arg)
			}
			if supervise.Exists(filepath.Join(dir, task.ID, supervise.FileWork, "pwned")) {
				t.Errorf("an argument was run as a command")
			}
		})
	}
}

// TestServerLargeRequest: a task whose spec is longer than the server's
// first read (a 100 KB environment variable) starts under the server with
// that environment whole.
func TestServerLargeRequest(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{SupervisorServer: true})
	big := strings.Repeat("0123456789", 10<<10)
	task := helperTask(t, "env", "BIG")
	task.Env["BIG"] = big
	st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
	if got := readFile(t, st.StdoutPath); st.State != providers.StateSucceeded || got != big {
		t.Errorf("state %s, %d bytes of $BIG; want succeeded, %d bytes", st.State, len(got), len(big))
	}
}

// TestSupervisorHandshakeFails: Start fails cleanly, leaving the task ID
// free, when the supervisor does not start the task.
func TestSupervisorHandshakeFails(t *testing.T) {
	t.Parallel()

	t.Run("not a supervisor", func(t *testing.T) {
		t.Parallel()
		truePath, err := exec.LookPath("true")
		if err != nil {
			t.Skip("no true(1) on this system")
		}
		truePath, _ = filepath.Abs(truePath)
		dir := workDir(t)
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: truePath})
		task := helperTask(t, "exit", "0")
		h, err := p.Start(t.Context(), task)
		if err == nil {
			t.Fatalf("Start = %v, nil; want an error", h)
		}
		t.Logf("Start: %v", err)
		if supervise.Exists(filepath.Join(dir, task.ID)) {
			t.Errorf("task directory left behind: the ID cannot be retried")
		}
	})

	for name, newP := range map[string]func(*testing.T, Config) *Provider{
		"supervised": newTestProvider,
		"in-process": newDirectProvider,
	} {
		t.Run("no such program/"+name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			p := newP(t, Config{WorkDir: dir})
			task := helperTask(t)
			task.Argv = []string{filepath.Join(workDir(t), "missing")}
			_, err := p.Start(t.Context(), task)
			if !errors.Is(err, os.ErrNotExist) && (err == nil || !strings.Contains(err.Error(), "no such file")) {
				t.Fatalf("Start: %v, want no such file", err)
			}
			if supervise.Exists(filepath.Join(dir, task.ID)) {
				t.Errorf("task directory left behind: the ID cannot be retried")
			}
		})
	}

	t.Run("dies after the task started", func(t *testing.T) {
		// The directory is the only evidence the task may have run: it must
		// stay, so nobody takes the task for never started and runs it again.
		t.Parallel()
		sup := filepath.Join(workDir(t), diesAfterStartSupervisor)
		if err := os.Symlink(testBinary(t), sup); err != nil {
			t.Fatal(err)
		}
		dir := workDir(t)
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: sup})
		task := helperTask(t, "exit", "0")
		if _, err := p.Start(t.Context(), task); err == nil {
			t.Fatal("Start succeeded with a supervisor that died before reporting ready")
		}
		if !supervise.Exists(filepath.Join(dir, task.ID)) {
			t.Fatal("task directory removed although its state was recorded")
		}
		h := providers.Handle{Provider: "local", ID: task.ID}
		if _, err := newTestProvider(t, Config{WorkDir: dir}).Poll(t.Context(), h); errors.Is(err, providers.ErrUnknownHandle) {
			t.Fatalf("Poll: %v; a task that may have run must not look never started", err)
		}
	})

	t.Run("hangs", func(t *testing.T) {
		t.Parallel()
		stuck := filepath.Join(workDir(t), stuckSupervisor)
		if err := os.Symlink(testBinary(t), stuck); err != nil {
			t.Fatal(err)
		}
		dir := workDir(t)
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: stuck, KillGrace: 50 * time.Millisecond})
		task := helperTask(t, "exit", "0")
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		h, err := p.Start(ctx, task)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start = %v, %v; want a deadline error", h, err)
		}
		t.Logf("Start: %v", err)
		if supervise.Exists(filepath.Join(dir, task.ID)) {
			t.Errorf("task directory left behind: the ID cannot be retried")
		}
	})
}

// TestPublishRecordFirstWins: of writers racing to publish a record, one
// wins, the others learn they lost, and the record on disk is the winner's,
// whole.
func TestPublishRecordFirstWins(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code := i
			errs[i] = supervise.PublishRecord(dir, supervise.FileExit, supervise.ExitRecord{Version: supervise.RecordVersion, State: supervise.StateFailed, ExitCode: &code}, true)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, supervise.ErrRecordExists):
			t.Errorf("writer %d: %v", i, err)
		}
	}
	rec, err := supervise.ReadExit(dir)
	if err != nil {
		t.Fatal(err)
	}
	if winner < 0 || rec.ExitCode == nil || *rec.ExitCode != winner {
		t.Errorf("record on disk %+v, winner %d", rec, winner)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries, want only the record (temp files removed)", len(ents))
	}
}

// TestServerIdleAndRestart: the supervisor server exits once it has had
// nothing to do for its idle time, and the next Start starts another; a
// second server for the same work directory, started while one runs,
// leaves it the work (ExitServerRunning).
func TestServerIdleAndRestart(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: true})
	first := providertest.Start(t, p, helperTask(t, "exit", "0"))
	providertest.WaitDone(t, p, first)
	rec1 := mustReadState(t, filepath.Join(dir, first.ID))
	if !rec1.SupervisorServer || rec1.SupervisorPID == 0 {
		t.Fatalf("state record %+v: want the server as supervisor", rec1)
	}
	// Another server for this work directory, with a short idle time: the
	// lock is held, so it says so and exits.
	out, err := exec.Command(testBinary(t), supervise.ServeCommand, dir, "100ms").Output()
	if code := exitCode(err); code != supervise.ExitServerRunning || strings.TrimSpace(string(out)) != "running" {
		t.Fatalf("second server: exit %d (%v), said %q; want %d, running", code, err, out, supervise.ExitServerRunning)
	}
	// A task started now runs under the same server.
	second := providertest.Start(t, p, helperTask(t, "exit", "0"))
	providertest.WaitDone(t, p, second)
	if rec2 := mustReadState(t, filepath.Join(dir, second.ID)); rec2.SupervisorPID != rec1.SupervisorPID {
		t.Fatalf("second task under supervisor %d, want the running server %d", rec2.SupervisorPID, rec1.SupervisorPID)
	}
	// The server's own idle time is ServerIdle; kill it instead, and the
	// next Start starts a new one.
	if err := syscall.Kill(rec1.SupervisorPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, rec1.SupervisorPID)
	third := providertest.Start(t, p, helperTask(t, "exit", "0"))
	providertest.WaitDone(t, p, third)
	rec3 := mustReadState(t, filepath.Join(dir, third.ID))
	if rec3.SupervisorPID == rec1.SupervisorPID || !alive(rec3.SupervisorPID) {
		t.Fatalf("third task under supervisor %d (alive %v), want a new live server", rec3.SupervisorPID, alive(rec3.SupervisorPID))
	}
	// A server with nothing to do exits after its idle time.
	idleDir := workDir(t)
	cmd := exec.Command(testBinary(t), supervise.ServeCommand, idleDir, "200ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("idle server: %v, want exit 0", err)
		}
	case <-time.After(providertest.WaitLimit):
		_ = cmd.Process.Kill()
		t.Fatal("idle server did not exit")
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestServerRefusesOtherUsers: a job running as another user than the
// adapter's cannot ask the supervisor server anything (here: to stop a
// running task of the same work directory); a peer of the server's own
// user can.
func TestServerRefusesOtherUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the job must run as another user")
	}
	dir := workDir(t)
	p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: true})
	victim := providertest.Start(t, p, helperTask(t, "sleep"))
	sock := supervise.ServerSocket(dir)
	asker := providertest.WaitDone(t, p, providertest.Start(t, p, helperTask(t, "ask-server", sock, filepath.Join(dir, victim.ID))))
	if got := readFile(t, asker.StdoutPath); got != "refused\n" {
		t.Errorf("a job of user %s asking the server to stop a task: %q, want refused", testUser, got)
	}
	if st := poll(t, p, victim); st.State != providers.StateRunning {
		t.Fatalf("the task the job asked to stop: %s, want running", st.State)
	}
	// The adapter's own user (root here) is served: the same request
	// stops the task.
	ask := exec.Command(testBinary(t), "ask-server", sock, filepath.Join(dir, victim.ID))
	ask.Env = []string{helperEnv + "=1"}
	out, err := ask.Output()
	if err != nil || strings.TrimSpace(string(out)) != "{}" {
		t.Fatalf("root asking the server: %q, %v; want {}", out, err)
	}
	if st := providertest.WaitDone(t, p, victim); st.State != providers.StateCancelled {
		t.Errorf("after root's request: %s, want cancelled", st.State)
	}
}
