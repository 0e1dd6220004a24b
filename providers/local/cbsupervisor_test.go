package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/proctimes"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
	"github.com/google/go-cmp/cmp"
)

// buildCmd builds the command pkg (a path from the module root) into dir
// and returns the binary's path.
func buildCmd(tb testing.TB, dir, pkg string) string {
	tb.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("no go tool to build %s: %v", pkg, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command(gobin, "build", "-o", bin, "github.com/computeboard/computeboard/"+pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// TestCBSupervisor runs tasks under the real supervisor binary,
// cmd/cb-supervisor, built here: a task's outcome, recorded by it, is the
// same to the provider that started the task, to another instance on the
// same WorkDir, to one made after the first was closed, and to one made
// after the adapter that started the task was SIGKILLed.
func TestCBSupervisor(t *testing.T) {
	t.Parallel()
	sup := buildCmd(t, t.TempDir(), "cmd/cb-supervisor")
	want := func(code int) providers.Status {
		st := providers.Status{State: providers.StateSucceeded, ExitCode: &code}
		if code != 0 {
			st.State, st.Error = providers.StateFailed, "exit status "+strconv.Itoa(code)
		}
		return st
	}
	outcome := func(st providers.Status) providers.Status {
		return providers.Status{State: st.State, ExitCode: st.ExitCode, Error: st.Error}
	}

	t.Run("through the provider, then recreated", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		release := filepath.Join(workDir(t), "release")
		p1 := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: sup})
		ended := p1.Ended()
		h := providertest.Start(t, p1, helperTask(t, "exit-when", release, "3"))
		rec := taskState(t, p1, h)
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", rec.SupervisorPID)); err != nil || exe != sup {
			t.Fatalf("supervisor pid %d runs %q (%v), want %s", rec.SupervisorPID, exe, err, sup)
		}
		// Another instance on the same WorkDir (an adapter restarted while
		// the first one hung, say) sees it running, through the records.
		p2 := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: sup})
		if st := poll(t, p2, h); st.State != providers.StateRunning {
			t.Fatalf("second instance, before the task ends: %+v, want running", st)
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ended:
			if got != h {
				t.Fatalf("Ended said %v, want %v", got, h)
			}
		case <-time.After(providertest.WaitLimit):
			t.Fatal("no notice of the task's end")
		}
		st := poll(t, p1, h)
		if diff := cmp.Diff(want(3), outcome(st)); diff != "" {
			t.Errorf("outcome (-want +got):\n%s", diff)
		}
		if out := readFile(t, st.StdoutPath); out != "ran\n" {
			t.Errorf("stdout %q, want %q", out, "ran\n")
		}
		if diff := cmp.Diff(want(3), outcome(providertest.WaitDone(t, p2, h))); diff != "" {
			t.Errorf("outcome seen by the second instance (-want +got):\n%s", diff)
		}
		if err := p1.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		p3 := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: sup})
		if diff := cmp.Diff(st, poll(t, p3, h)); diff != "" {
			t.Errorf("outcome seen by an instance made after Close (-first +later):\n%s", diff)
		}
	})

	t.Run("adapter killed", func(t *testing.T) {
		t.Parallel()
		dir := workDir(t)
		release := filepath.Join(workDir(t), "release")
		h := startInDoomedAdapterWith(t, dir, sup, 0, "exit-when", release, "0")
		p := newTestProvider(t, Config{WorkDir: dir, SupervisorPath: sup})
		if st := poll(t, p, h); st.State != providers.StateRunning {
			t.Fatalf("after the adapter died: %+v, want running", st)
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		st := providertest.WaitDone(t, p, h)
		if diff := cmp.Diff(want(0), outcome(st)); diff != "" {
			t.Errorf("outcome seen by the new instance (-want +got):\n%s", diff)
		}
		if out := readFile(t, st.StdoutPath); out != "ran\n" {
			t.Errorf("stdout %q, want %q: the task ran once, and only once", out, "ran\n")
		}
	})

	t.Run("misused", func(t *testing.T) {
		t.Parallel()
		// Run by hand, it says how it is run, and does nothing.
		out, err := exec.Command(sup).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("cb-supervisor without arguments: %v, want exit code 2; output %q", err, out)
		}
	})
}

// TestExitStatesMatch: supervise spells the terminal states as providers
// does (it may not import it).
func TestExitStatesMatch(t *testing.T) {
	for _, s := range []providers.State{providers.StateSucceeded, providers.StateFailed, providers.StateCancelled, providers.StateLost} {
		if !(supervise.ExitRecord{Version: supervise.RecordVersion, State: string(s)}).Valid() {
			t.Errorf("supervise does not know terminal state %q", s)
		}
	}
	for _, s := range []providers.State{providers.StatePending, providers.StateRunning} {
		if (supervise.ExitRecord{Version: supervise.RecordVersion, State: string(s)}).Valid() {
			t.Errorf("supervise takes %q for an outcome", s)
		}
	}
}

// BenchmarkStartToExit measures how long a trivial task (/bin/true) takes
// from Start to its outcome being known (the provider's notice), 8 at a
// time, under each supervisor binary, next to the floor: /bin/true run
// straight, 8 at a time. Compare ns/op across the sub-benchmarks, from
// one run. On a busy machine wall time says little; child-cpu-us/op (the
// CPU time of the supervisors and their tasks, per task) and
// self-cpu-us/op (this process's: the provider) do not depend on what
// else runs.
//
//	go test -run '^$' -bench StartToExit -benchtime 400x ./providers/local
//
// "adapter" (the adapter re-executing itself, as before cb-supervisor)
// builds cmd/adapter first.
func BenchmarkStartToExit(b *testing.B) {
	const parallel = 8
	run := func(b *testing.B, one func(i int) error, settle func()) {
		b.Helper()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, parallel)
		var self0, children0 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children0)
		live0 := proctimes.LiveChildren(os.Getpid())
		b.ResetTimer()
		for range parallel {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= b.N {
						return
					}
					if err := one(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		settle() // every child reaped
		var self1, children1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children1)
		live1 := proctimes.LiveChildren(os.Getpid())
		cpu := func(a, b syscall.Rusage) float64 {
			return float64(time.Duration(b.Utime.Nano() + b.Stime.Nano() - a.Utime.Nano() - a.Stime.Nano()).Microseconds())
		}
		// A supervisor server outlives the run (it exits when idle): its
		// CPU time is read from /proc.
		b.ReportMetric((cpu(children0, children1)+float64((live1-live0).Microseconds()))/float64(b.N), "child-cpu-us/op")
		b.ReportMetric(cpu(self0, self1)/float64(b.N), "self-cpu-us/op")
	}
	b.Run("bin-true", func(b *testing.B) {
		run(b, func(int) error { return exec.Command("/bin/true").Run() }, func() {})
	})
	bins := []struct {
		name, path      string
		cgroups, server bool
	}{
		{"test-binary", testBinary(b), true, false}, // a re-executed Go binary with this package's dependencies
		{"cb-supervisor", "", true, false},
		{"adapter", "", true, false},
		// One supervisor server for every task (SupervisorServer, what the
		// adapter runs by default on Linux).
		{"cb-supervisor-server", "", true, true},
		// Without a cgroup per task (which, as root, costs the kernel
		// more than the supervisor costs): the supervisors alone.
		{"cb-supervisor-unconfined", "", false, false},
		{"adapter-unconfined", "", false, false},
		{"cb-supervisor-server-unconfined", "", false, true},
	}
	for _, bin := range bins {
		b.Run(bin.name, func(b *testing.B) {
			sup := bin.path
			switch {
			case strings.HasPrefix(bin.name, "cb-supervisor"):
				sup = buildCmd(b, b.TempDir(), "cmd/cb-supervisor")
			case strings.HasPrefix(bin.name, "adapter"):
				sup = buildCmd(b, b.TempDir(), "cmd/adapter")
			}
			benchStartToExit(b, sup, !bin.cgroups, bin.server, run)
		})
	}
}

func benchStartToExit(b *testing.B, sup string, unconfined, server bool, run func(*testing.B, func(int) error, func())) {
	if server && runtime.GOOS != "linux" {
		b.Skip("the supervisor server is Linux only")
	}
	cfg := Config{WorkDir: workDir(b), SupervisorPath: sup, SupervisorServer: server, Cgroups: Cgroups{Disable: unconfined}}
	if os.Geteuid() == 0 {
		cfg.User = testUser
	}
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	var mu sync.Mutex
	waiting := map[string]chan struct{}{}
	ended := p.Ended()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // ends with the benchmark
		for {
			select {
			case h := <-ended:
				mu.Lock()
				if c := waiting[h.ID]; c != nil {
					close(c)
					delete(waiting, h.ID)
				}
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	prefix := fmt.Sprintf("b%d-%d", os.Getpid(), time.Now().UnixNano())
	run(b, func(i int) error {
		id := fmt.Sprintf("%s-%d", prefix, i)
		done := make(chan struct{})
		mu.Lock()
		waiting[id] = done
		mu.Unlock()
		h, err := p.Start(context.Background(), providers.Task{ID: id, Argv: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		<-done
		st, err := p.Poll(context.Background(), h)
		if err == nil && st.State != providers.StateSucceeded {
			err = fmt.Errorf("task %s: %+v", id, st)
		}
		return err
	}, func() { _ = p.Close(context.Background()) })
}

// BenchmarkExecToExit measures what a supervisor costs before it does
// anything: exec to exit of each supervisor binary, run with
// supervise.Command and no task directory (it prints its usage and exits
// at once), next to /bin/true. One at a time. child-cpu-us/op is the CPU
// time each run took, which does not depend on what else the machine runs.
//
//	go test -run '^$' -bench ExecToExit ./providers/local
func BenchmarkExecToExit(b *testing.B) {
	for _, bin := range []struct{ name, pkg string }{
		{"bin-true", ""},
		{"cb-supervisor", "cmd/cb-supervisor"},
		{"adapter", "cmd/adapter"},
		{"test-binary", ""},
	} {
		b.Run(bin.name, func(b *testing.B) {
			argv := []string{"/bin/true"}
			switch {
			case bin.pkg != "":
				argv = []string{buildCmd(b, b.TempDir(), bin.pkg), supervise.Command}
			case bin.name == "test-binary":
				argv = []string{testBinary(b), supervise.Command}
			}
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
			for b.Loop() { // b.Loop times only the loop
				cmd := exec.Command(argv[0], argv[1:]...)
				if err := cmd.Run(); err != nil && cmd.ProcessState.ExitCode() != 2 {
					b.Fatal(err)
				}
			}
			_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
			used := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
			b.ReportMetric(float64(used)/1e3/float64(b.N), "child-cpu-us/op")
		})
	}
}
