package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
	"github.com/google/go-cmp/cmp"
)

func TestNewRejectsBadConfig(t *testing.T) {
	tests := map[string]Config{
		"no work dir":                 {},
		"negative kill grace":         {WorkDir: workDir(t), KillGrace: -time.Second},
		"negative max":                {WorkDir: workDir(t), MaxConcurrent: -1},
		"bad env name":                {WorkDir: workDir(t), Env: map[string]string{"A=B": "c"}},
		"work dir is not a dir":       {WorkDir: filepath.Join(writeFile(t, "file", ""), "sub")},
		"relative supervisor":         {WorkDir: workDir(t), SupervisorPath: "adapter"},
		"missing supervisor":          {WorkDir: workDir(t), SupervisorPath: "/nonexistent/adapter"},
		"supervisor not executable":   {WorkDir: workDir(t), SupervisorPath: writeFile(t, "adapter", "")},
		"unknown user":                {WorkDir: workDir(t), User: "no-such-user-cb"},
		"root user, root not allowed": {WorkDir: workDir(t), User: "root"},
		"too few open files":          {WorkDir: workDir(t), Limits: Limits{OpenFiles: 3}},
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg); err == nil {
				t.Errorf("New(%+v) = nil error, want one", cfg)
			}
		})
	}
}

// taskUserName is the name of the user test tasks run as by default.
func taskUserName(t *testing.T) string {
	if os.Geteuid() == 0 {
		return testUser
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func TestOutputFiles(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args                   []string
		wantStdout, wantStderr string
	}{
		"stdout": {args: []string{"print", "to stdout\n"}, wantStdout: "to stdout\n"},
		"stderr": {args: []string{"stderr", "to stderr\n"}, wantStderr: "to stderr\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			p := newTestProvider(t, Config{WorkDir: dir})
			task := helperTask(t, tc.args...)
			task.Payload = []byte(`{"n":1}`)
			h := providertest.Start(t, p, task)
			st := providertest.WaitDone(t, p, h)

			taskDir := filepath.Join(dir, task.ID)
			wantPaths := [2]string{filepath.Join(taskDir, "stdout"), filepath.Join(taskDir, "stderr")}
			if diff := cmp.Diff(wantPaths, [2]string{st.StdoutPath, st.StderrPath}); diff != "" {
				t.Errorf("output paths (-want +got):\n%s", diff)
			}
			got := [2]string{readFile(t, st.StdoutPath), readFile(t, st.StderrPath)}
			if diff := cmp.Diff([2]string{tc.wantStdout, tc.wantStderr}, got); diff != "" {
				t.Errorf("stdout, stderr (-want +got):\n%s", diff)
			}
			for _, f := range []string{"payload", "state", "exit"} {
				if _, err := os.Stat(filepath.Join(taskDir, f)); err != nil {
					t.Errorf("task dir: %v", err)
				}
			}
		})
	}
}

func TestEnvironmentAndDir(t *testing.T) {
	t.Parallel()
	otherDir := workDir(t)
	tests := map[string]struct {
		base    map[string]string
		task    providers.Task // ID, Argv and the helper switch are filled in
		args    []string
		want    string
		wantDir bool // want is relative to the task dir
	}{
		"base env": {
			base: map[string]string{"CB_X": "base"},
			args: []string{"env", "CB_X"}, want: "base",
		},
		"task env over base": {
			base: map[string]string{"CB_X": "base"},
			task: providers.Task{Env: map[string]string{"CB_X": "task"}},
			args: []string{"env", "CB_X"}, want: "task",
		},
		"HOME is the work dir, not the base's": {
			base: map[string]string{"HOME": "/root"},
			args: []string{"env", "HOME"}, want: "work", wantDir: true,
		},
		"task env may set HOME": {
			base: map[string]string{"HOME": "/root"},
			task: providers.Task{Env: map[string]string{"HOME": "/srv/job"}},
			args: []string{"env", "HOME"}, want: "/srv/job",
		},
		"USER is the task's user": {
			base: map[string]string{"USER": "root"},
			args: []string{"env", "USER"}, want: taskUserName(t),
		},
		"LOGNAME is the task's user": {
			base: map[string]string{"LOGNAME": "root"},
			args: []string{"env", "LOGNAME"}, want: taskUserName(t),
		},
		"adapter env not inherited": {
			args: []string{"env", "PATH"}, want: "",
		},
		"placed GPUs and MIG instances, in order, for CUDA": {
			task: providers.Task{Placement: providers.Placement{GPUs: []string{"GPU-b2", "GPU-a1"}, MIG: []string{"MIG-c3"}}},
			args: []string{"lookup", "CUDA_VISIBLE_DEVICES"}, want: "GPU-b2,GPU-a1,MIG-c3",
		},
		"placed GPUs and MIG instances, in order, for the NVIDIA runtime": {
			task: providers.Task{Placement: providers.Placement{GPUs: []string{"GPU-b2", "GPU-a1"}, MIG: []string{"MIG-c3"}}},
			args: []string{"lookup", "NVIDIA_VISIBLE_DEVICES"}, want: "GPU-b2,GPU-a1,MIG-c3",
		},
		"no GPU placed: none for CUDA": {
			args: []string{"lookup", "CUDA_VISIBLE_DEVICES"}, want: "",
		},
		"no GPU placed: none for the NVIDIA runtime": {
			args: []string{"lookup", "NVIDIA_VISIBLE_DEVICES"}, want: "void",
		},
		"task env cannot widen its GPUs": {
			base: map[string]string{"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "all"},
			task: providers.Task{
				Env:       map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_VISIBLE_DEVICES": "all"},
				Placement: providers.Placement{MIG: []string{"MIG-c3"}},
			},
			args: []string{"lookup", "CUDA_VISIBLE_DEVICES"}, want: "MIG-c3",
		},
		"payload path not overridable": {
			task: providers.Task{Env: map[string]string{providers.PayloadEnv: "/etc/passwd"}, Payload: []byte(`{"n":1}`)},
			args: []string{"env", providers.PayloadEnv}, want: "payload", wantDir: true,
		},
		// No file is made for it: an empty file all the same, as the
		// Kubernetes provider gives.
		"no payload: /dev/null": {
			args: []string{"env", providers.PayloadEnv}, want: "/dev/null",
		},
		"default working dir is the task's work dir": {
			args: []string{"pwd"}, want: "work", wantDir: true,
		},
		"working dir": {
			task: providers.Task{Dir: otherDir},
			args: []string{"pwd"}, want: otherDir,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			p := newTestProvider(t, Config{WorkDir: dir, Env: tc.base})
			task := tc.task
			ht := helperTask(t, tc.args...)
			task.ID, task.Argv = ht.ID, ht.Argv
			if task.Env == nil {
				task.Env = map[string]string{}
			}
			task.Env[helperEnv] = "1"
			want := tc.want
			if tc.wantDir {
				want = filepath.Join(dir, task.ID, want)
			}
			st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
			if got := readFile(t, st.StdoutPath); st.State != providers.StateSucceeded || got != want {
				t.Errorf("state %s, output %q; want succeeded, %q (stderr %q)", st.State, got, want, readFile(t, st.StderrPath))
			}
			if _, err := os.Stat(filepath.Join(dir, task.ID, supervise.FilePayload)); (err == nil) != (task.Payload != nil) {
				t.Errorf("payload file with payload %q: %v", task.Payload, err)
			}
		})
	}
}

// TestProcessGroup checks that a task's grandchildren end with it, however
// it ends: no orphan processes survive a task.
func TestProcessGroup(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mode      string // helper "family" mode
		grace     time.Duration
		stop      bool
		wantState providers.State
	}{
		"stop ends grandchild":             {mode: "stay", stop: true, wantState: providers.StateCancelled},
		"leftovers end with the task":      {mode: "leave", wantState: providers.StateSucceeded},
		"SIGTERM ignored: SIGKILL follows": {mode: "stubborn", grace: 200 * time.Millisecond, stop: true, wantState: providers.StateCancelled},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newTestProvider(t, Config{KillGrace: tc.grace})
			h := providertest.Start(t, p, helperTask(t, "family", tc.mode))
			grandchild := readPID(t, p, h)
			if tc.stop {
				if err := p.Stop(t.Context(), h); err != nil {
					t.Fatalf("Stop: %v", err)
				}
			}
			st := providertest.WaitDone(t, p, h)
			if st.State != tc.wantState {
				t.Errorf("state = %s, want %s (status %+v)", st.State, tc.wantState, st)
			}
			// A terminal state is reported only after the group is empty,
			// so no waiting here.
			if alive(grandchild) {
				t.Errorf("grandchild %d still alive after the task ended", grandchild)
			}
		})
	}
}

// TestTimeoutEndsProcessGroup checks that a timeout, like Stop, ends the
// task's grandchildren. The timeout must not fire before the helper has
// started its grandchild, and how long that takes depends on the machine's
// load, so the test starts short and doubles the timeout until a run gets
// that far.
func TestTimeoutEndsProcessGroup(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	for timeout := 300 * time.Millisecond; ; timeout *= 2 {
		if timeout > providertest.WaitLimit {
			t.Fatalf("the helper never started its grandchild within a timeout")
		}
		task := helperTask(t, "family", "stay")
		task.Timeout = timeout
		h := providertest.Start(t, p, task)
		grandchild, err := tryReadPID(t, p, h)
		if errors.Is(err, errNoPID) {
			t.Logf("timed out before the grandchild started; retrying: %v", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		st := providertest.WaitDone(t, p, h)
		if st.State != providers.StateFailed || !st.TimedOut {
			t.Errorf("status %+v, want failed, timed out", st)
		}
		if alive(grandchild) {
			t.Errorf("grandchild %d alive after the timeout", grandchild)
		}
		return
	}
}

func TestSuspendResume(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	p := newTestProvider(t, Config{WorkDir: dir})
	task := helperTask(t, "family", "stay")
	h := providertest.Start(t, p, task)
	grandchild := readPID(t, p, h)
	leader := mustReadState(t, filepath.Join(dir, task.ID)).PID
	family := []int{leader, grandchild}

	if err := p.Suspend(t.Context(), h); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	waitProcStates(t, family, "stopped", func(s byte) bool { return s == 'T' })
	if st := poll(t, p, h); st.State != providers.StateRunning || !st.Suspended {
		t.Errorf("after Suspend: state %s, suspended %v; want running, true", st.State, st.Suspended)
	}

	if err := p.Resume(t.Context(), h); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitProcStates(t, family, "resumed", func(s byte) bool { return s != 'T' })
	if st := poll(t, p, h); st.State != providers.StateRunning || st.Suspended {
		t.Errorf("after Resume: state %s, suspended %v; want running, false", st.State, st.Suspended)
	}

	// A suspended task can still be stopped.
	if err := p.Suspend(t.Context(), h); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if err := p.Stop(t.Context(), h); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st := poll(t, p, h); st.State != providers.StateCancelled || st.Suspended {
		t.Errorf("after Stop: state %s, suspended %v; want cancelled, false", st.State, st.Suspended)
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d alive after Stop", grandchild)
	}
	if err := p.Resume(t.Context(), h); !errors.Is(err, providers.ErrNotRunning) {
		t.Errorf("Resume after Stop: %v, want ErrNotRunning", err)
	}
	if err := p.Suspend(t.Context(), providers.Handle{Provider: "local", ID: "nope"}); !errors.Is(err, providers.ErrUnknownHandle) {
		t.Errorf("Suspend of unknown handle: %v, want ErrUnknownHandle", err)
	}
}

func TestSignal(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	h := providertest.Start(t, p, helperTask(t, "sleep"))
	if err := p.Signal(t.Context(), h, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	// Not a Stop, so the task failed rather than being cancelled.
	st := providertest.WaitDone(t, p, h)
	want := providers.Status{State: providers.StateFailed, Error: "killed by signal: terminated"}
	if diff := cmp.Diff(want, providers.Status{State: st.State, ExitCode: st.ExitCode, Error: st.Error}); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if err := p.Signal(t.Context(), h, syscall.SIGTERM); !errors.Is(err, providers.ErrNotRunning) {
		t.Errorf("Signal after the end: %v, want ErrNotRunning", err)
	}
}

func TestManyConcurrentTasks(t *testing.T) {
	t.Parallel()
	const n = 32
	p := newTestProvider(t, Config{})
	handles := make([]providers.Handle, n)
	for i := range n {
		handles[i] = providertest.Start(t, p, helperTask(t, "print", "task "+strconv.Itoa(i)))
	}
	for i, h := range handles {
		st := providertest.WaitDone(t, p, h)
		if got, want := readFile(t, st.StdoutPath), "task "+strconv.Itoa(i); st.State != providers.StateSucceeded || got != want {
			t.Errorf("task %d: state %s, stdout %q; want succeeded, %q", i, st.State, got, want)
		}
	}
	p.mu.Lock()
	running, kept := p.running, len(p.tasks)
	p.mu.Unlock()
	if running != 0 || kept != 0 {
		t.Errorf("after all ended: running %d, tasks in memory %d; want 0, 0", running, kept)
	}
}

func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{MaxConcurrent: 2})
	first := providertest.Start(t, p, helperTask(t, "sleep"))
	providertest.Start(t, p, helperTask(t, "sleep"))
	if h, err := p.Start(t.Context(), helperTask(t, "sleep")); !errors.Is(err, providers.ErrAtCapacity) {
		t.Fatalf("third Start: %v, %v; want ErrAtCapacity", h, err)
	}
	if err := p.Stop(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	providertest.Start(t, p, helperTask(t, "sleep")) // a slot is free again
}

func TestClose(t *testing.T) {
	t.Parallel()
	t.Run("supervised", func(t *testing.T) { testClose(t, testBinary(t)) })
	t.Run("in-process", func(t *testing.T) { testClose(t, "") })
}

func testClose(t *testing.T, supervisor string) {
	t.Parallel()
	dir := workDir(t)
	cfg := Config{WorkDir: dir, SupervisorPath: supervisor}
	if os.Geteuid() == 0 {
		cfg.User = testUser
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var handles []providers.Handle
	for range 3 {
		h, err := p.Start(t.Context(), helperTask(t, "family", "stay"))
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	grandchild := readPID(t, p, handles[0])
	if err := p.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, h := range handles {
		if st := poll(t, p, h); st.State != providers.StateCancelled || st.Error != "provider closed" {
			t.Errorf("%v after Close: %+v, want cancelled by close", h, st)
		}
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d alive after Close", grandchild)
	}
	if _, err := p.Start(t.Context(), helperTask(t, "exit", "0")); err == nil {
		t.Errorf("Start after Close succeeded")
	}
	if err := p.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestRestartSeesOldHandles plays a restarted adapter: a second Provider on
// the same WorkDir, given handles the first one returned.
func TestRestartSeesOldHandles(t *testing.T) {
	t.Parallel()

	t.Run("finished", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		p1 := newTestProvider(t, Config{WorkDir: dir})
		h := providertest.Start(t, p1, helperTask(t, "exit", "3"))
		want := providertest.WaitDone(t, p1, h)

		p2 := newTestProvider(t, Config{WorkDir: dir})
		if diff := cmp.Diff(want, poll(t, p2, h)); diff != "" {
			t.Errorf("status seen by the new instance (-old +new):\n%s", diff)
		}
		if err := p2.Stop(t.Context(), h); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if err := p2.Suspend(t.Context(), h); !errors.Is(err, providers.ErrNotRunning) {
			t.Errorf("Suspend: %v, want ErrNotRunning", err)
		}
	})

	t.Run("running", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		p1 := newTestProvider(t, Config{WorkDir: dir})
		h := providertest.Start(t, p1, helperTask(t, "sleep"))
		p2 := newTestProvider(t, Config{WorkDir: dir})
		if st := poll(t, p2, h); st.State != providers.StateRunning {
			t.Errorf("state seen by the new instance = %s, want running", st.State)
		}
	})

	t.Run("adopted", func(t *testing.T) {
		// The test process plays the adapter that died: it starts the task
		// and writes its state record, and the provider only ever sees the
		// task directory.
		t.Parallel()
		dir := workDir(t)
		cmd, id := startOrphan(t, dir, "family", "stay")
		p := newTestProvider(t, Config{WorkDir: dir})
		h := providers.Handle{Provider: "local", ID: id}
		grandchild := readPID(t, p, h)

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
		st := poll(t, p, h)
		if st.State != providers.StateCancelled || st.ExitCode != nil || !strings.Contains(st.Error, "restart") {
			t.Errorf("after Stop: %+v, want cancelled, no exit code, error explaining the restart", st)
		}
		if alive(grandchild) {
			t.Errorf("grandchild %d alive after Stop", grandchild)
		}
		if err := cmd.Wait(); err == nil {
			t.Errorf("orphan exited cleanly after Stop; want killed")
		}
	})

	t.Run("never started", func(t *testing.T) {
		// A directory without a state record is a Start cut short: pending
		// while a supervisor might still be starting, then never started.
		t.Parallel()
		dir := workDir(t)
		id := providertest.TaskID(t)
		if err := os.Mkdir(filepath.Join(dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, id))
		if err != nil {
			t.Fatal(err)
		}
		clk := clock.NewFake(fi.ModTime().Add(time.Second))
		p := newTestProvider(t, Config{WorkDir: dir, Clock: clk})
		h := providers.Handle{Provider: "local", ID: id}
		if st, err := p.Poll(t.Context(), h); err != nil || st.State != providers.StatePending {
			t.Fatalf("fresh directory: %+v, %v; want pending", st, err)
		}
		clk.Advance(startGrace)
		if _, err := p.Poll(t.Context(), h); !errors.Is(err, providers.ErrUnknownHandle) {
			t.Fatalf("after the grace: %v, want ErrUnknownHandle (never started)", err)
		}
	})

	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		boot, err := supervise.BootID()
		if err != nil {
			t.Skipf("no boot ID on this system: %v", err)
		}
		_, _, selfTicks, err := supervise.ProcStat(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		self := supervise.StateRecord{PID: os.Getpid(), PGID: os.Getpid(), StartTicks: selfTicks, BootID: boot}
		tests := map[string]func(t *testing.T) *supervise.StateRecord{ // nil: no state record
			"process ended": func(t *testing.T) *supervise.StateRecord {
				cmd := exec.Command(helper(t, "exit", "0")[0], "exit", "0")
				cmd.Env = []string{helperEnv + "=1"}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				r := self
				r.PID, r.PGID = cmd.Process.Pid, cmd.Process.Pid
				_, _, r.StartTicks, _ = supervise.ProcStat(r.PID)
				if err := cmd.Wait(); err != nil {
					t.Fatal(err)
				}
				return &r
			},
			"pid reused": func(t *testing.T) *supervise.StateRecord {
				r := self // alive, but started at another time: not our task
				r.StartTicks++
				return &r
			},
			"rebooted": func(t *testing.T) *supervise.StateRecord {
				r := self
				r.BootID = "00000000-0000-0000-0000-000000000000"
				return &r
			},
			"identity unknown": func(t *testing.T) *supervise.StateRecord {
				r := self
				r.StartTicks = 0
				return &r
			},
		}
		for name, record := range tests {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dir := workDir(t)
				id := providertest.TaskID(t)
				if err := os.Mkdir(filepath.Join(dir, id), 0o700); err != nil {
					t.Fatal(err)
				}
				if r := record(t); r != nil {
					r.Version, r.Provider, r.TaskID, r.StartedAt = supervise.RecordVersion, "local", id, time.Unix(1700000000, 0)
					if err := supervise.WriteRecord(filepath.Join(dir, id), supervise.FileState, r, false); err != nil {
						t.Fatal(err)
					}
				}
				p := newTestProvider(t, Config{WorkDir: dir})
				h := providers.Handle{Provider: "local", ID: id}
				if st := poll(t, p, h); st.State != providers.StateLost || st.Error == "" {
					t.Errorf("status %+v, want lost with a reason", st)
				}
				// Nothing to stop or signal; above all, never the test process.
				if err := p.Stop(t.Context(), h); err != nil {
					t.Errorf("Stop: %v", err)
				}
				if err := p.Suspend(t.Context(), h); !errors.Is(err, providers.ErrNotRunning) {
					t.Errorf("Suspend: %v, want ErrNotRunning", err)
				}
			})
		}
	})
}

func TestDiscover(t *testing.T) {
	c, err := Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if c.Hostname != host || c.CPUs < 1 || c.MemoryTotal <= 0 || c.MemoryAvailable <= 0 || c.MemoryAvailable > c.MemoryTotal {
		t.Errorf("Discover() = %+v; want hostname %q, at least 1 CPU, 0 < available <= total memory", c, host)
	}
}

// startOrphan starts helper program args the way a provider would, from
// the test process, and records it in <dir>/<id>/state, as an adapter that
// has since died would have left it.
func startOrphan(t *testing.T, dir string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	id := providertest.TaskID(t)
	taskDir := filepath.Join(dir, id)
	if err := os.Mkdir(taskDir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := createOutput(taskDir, supervise.FileStdout)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	argv := helper(t, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{helperEnv + "=1"}
	cmd.Stdout = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // in case the test fails before stopping it
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	rec := supervise.StateRecord{Version: supervise.RecordVersion, Provider: "local", TaskID: id,
		PID: cmd.Process.Pid, PGID: cmd.Process.Pid, StartedAt: time.Now()}
	if _, _, rec.StartTicks, err = supervise.ProcStat(rec.PID); err != nil {
		t.Fatal(err)
	}
	if rec.BootID, err = supervise.BootID(); err != nil {
		t.Fatal(err)
	}
	if err := supervise.WriteRecord(taskDir, supervise.FileState, rec, false); err != nil {
		t.Fatal(err)
	}
	return cmd, id
}

// readPID waits for a "family" helper to write its grandchild's pid.
func readPID(t *testing.T, p providers.Provider, h providers.Handle) int {
	t.Helper()
	pid, err := tryReadPID(t, p, h)
	if err != nil {
		t.Fatalf("reading grandchild pid: %v", err)
	}
	return pid
}

// errNoPID: the task ended before its helper wrote the grandchild's pid.
var errNoPID = errors.New("task ended before writing the grandchild pid")

func tryReadPID(t *testing.T, p providers.Provider, h providers.Handle) (int, error) {
	var pid int
	err := providertest.Eventually(t.Context(), func() (bool, error) {
		st, err := p.Poll(t.Context(), h)
		if err != nil {
			return false, err
		}
		b, err := os.ReadFile(st.StdoutPath)
		if err != nil {
			return false, err
		}
		if !strings.HasSuffix(string(b), "\n") {
			if st.State.Terminal() {
				stderr, _ := os.ReadFile(st.StderrPath)
				return false, fmt.Errorf("%w (status %+v, stderr %q)", errNoPID, st, stderr)
			}
			return false, nil
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return true, err
	})
	return pid, err
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	st, _, _, err := supervise.ProcStat(pid)
	return err == nil && !supervise.Dead(st)
}

func waitProcStates(t *testing.T, pids []int, what string, ok func(byte) bool) {
	t.Helper()
	err := providertest.Eventually(t.Context(), func() (bool, error) {
		for _, pid := range pids {
			st, _, _, err := supervise.ProcStat(pid)
			if err != nil {
				return false, err
			}
			if !ok(st) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for %v to be %s: %v", pids, what, err)
	}
}

func mustReadState(t *testing.T, taskDir string) supervise.StateRecord {
	t.Helper()
	r, err := supervise.ReadState(taskDir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func poll(t *testing.T, p providers.Provider, h providers.Handle) providers.Status {
	t.Helper()
	st, err := p.Poll(t.Context(), h)
	if err != nil {
		t.Fatalf("Poll(%v): %v", h, err)
	}
	return st
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(workDir(t), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTasksListsTheStartLog: a second Provider on the same WorkDir (a
// restarted adapter that lost its records with Redis) lists every task the
// first one started, ended or running, with its labels and note (the ended one only
// when it ended after the time asked for); a directory with no
// state record (a start cut short) is not listed; and starting the same
// task ID again says ErrTaskExists (as well as ErrInvalidTask).
func TestTasksListsTheStartLog(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	p1 := newTestProvider(t, Config{WorkDir: dir})
	done := helperTask(t, "exit", "3")
	done.ID += "-done"
	done.Labels = map[string]string{"job": "j1", "attempt": "1"}
	done.Note = json.RawMessage(`{"request":{"template":"x"}}`)
	running := helperTask(t, "sleep")
	running.ID += "-running"
	running.Labels = map[string]string{"job": "j2", "attempt": "2"}
	hd := providertest.Start(t, p1, done)
	providertest.WaitDone(t, p1, hd)
	hr := providertest.Start(t, p1, running)
	t.Cleanup(func() { _ = p1.Stop(context.Background(), hr) })
	if err := os.Mkdir(filepath.Join(dir, "cut-short"), 0o700); err != nil {
		t.Fatal(err)
	}

	p2 := newTestProvider(t, Config{WorkDir: dir})
	// Since later than the end: only the running task.
	got, err := p2.Tasks(t.Context(), time.Now().Add(time.Hour))
	if err != nil || len(got) != 1 || got[0].Handle != hr {
		t.Errorf("Tasks since an hour from now = %+v, %v; want only the running task", got, err)
	}
	got, err = p2.Tasks(t.Context(), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]providers.TaskRecord{}
	for _, r := range got {
		byID[r.Handle.ID] = r
	}
	if len(got) != 2 {
		t.Fatalf("listed %d tasks (%v), want 2", len(got), got)
	}
	d, r := byID[done.ID], byID[running.ID]
	if d.Handle != hd || d.Status.State != providers.StateFailed || d.Status.ExitCode == nil || *d.Status.ExitCode != 3 ||
		!maps.Equal(d.Labels, done.Labels) || string(d.Note) != string(done.Note) {
		t.Errorf("ended task listed as %+v", d)
	}
	if r.Handle != hr || r.Status.State != providers.StateRunning || !maps.Equal(r.Labels, running.Labels) {
		t.Errorf("running task listed as %+v", r)
	}
	_, err = p2.Start(t.Context(), done)
	if !errors.Is(err, providers.ErrTaskExists) || !errors.Is(err, providers.ErrInvalidTask) {
		t.Errorf("second start of %s: %v, want ErrTaskExists and ErrInvalidTask", done.ID, err)
	}
}

// TestSuspendStopsCPUTime (issue 13: suspend/resume of a real process):
// a task spinning on a core uses no CPU time while suspended, and uses it
// again once resumed. Under the supervisor server, as the adapter runs it.
func TestSuspendStopsCPUTime(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	p := newTestProvider(t, Config{WorkDir: dir, SupervisorServer: true})
	task := helperTask(t, "spin", "1")
	h := providertest.Start(t, p, task)
	leader := mustReadState(t, filepath.Join(dir, task.ID)).PID
	cpu := func() time.Duration { // the task's utime+stime so far
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", leader))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(u+k) * 10 * time.Millisecond // USER_HZ 100
	}
	grows := func(what string) {
		t.Helper()
		before := cpu()
		deadline := time.Now().Add(providertest.WaitLimit)
		for cpu()-before < 200*time.Millisecond {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the task used %v of CPU, want it spinning", what, cpu()-before)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	grows("running")
	if err := p.Suspend(t.Context(), h); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	waitProcStates(t, []int{leader}, "stopped", func(s byte) bool { return s == 'T' })
	before := cpu()
	time.Sleep(time.Second)
	if used := cpu() - before; used > 20*time.Millisecond {
		t.Errorf("suspended for 1 s, the task used %v of CPU, want none", used)
	}
	if err := p.Resume(t.Context(), h); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	grows("resumed")
	if err := p.Stop(t.Context(), h); err != nil {
		t.Fatal(err)
	}
}
