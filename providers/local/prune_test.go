package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
)

// TestPrune: finished tasks go once their outcome is older than the
// cutoff; running tasks, fresh directories and other providers' never do.
func TestPrune(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		dir := workDir(t)
		p := newP(t, Config{WorkDir: dir})

		// Not providertest.Start, whose cleanup would Stop a pruned task.
		finished, err := p.Start(t.Context(), helperTask(t, "exit", "3"))
		if err != nil {
			t.Fatal(err)
		}
		fst := providertest.WaitDone(t, p, finished)
		running := providertest.Start(t, p, helperTask(t, "sleep"))

		// A Start cut short (no state record), and a lost task (its state
		// names a process that has ended); both last changed long ago.
		old := time.Now().Add(-48 * time.Hour)
		unstarted := mkTaskDir(t, dir, nil)
		lost := mkTaskDir(t, dir, &supervise.StateRecord{Provider: "local", PID: deadPID(t), StartTicks: 1})
		foreign := mkTaskDir(t, dir, &supervise.StateRecord{Provider: "other", PID: deadPID(t), StartTicks: 1})
		for _, id := range []string{unstarted, lost, foreign} {
			if err := os.Chtimes(filepath.Join(dir, id), old, old); err != nil {
				t.Fatal(err)
			}
		}
		fresh := mkTaskDir(t, dir, nil)
		notATask := writeFileIn(t, dir, "README")

		// Not older than the cutoff: nothing goes but what is older still.
		n, err := p.Prune(t.Context(), fst.FinishedAt)
		if err != nil || n != 2 {
			t.Errorf("Prune(finished's end) = %d, %v; want 2 (the unstarted and the lost), nil", n, err)
		}
		wantPresent(t, dir, map[string]bool{
			finished.ID: true, running.ID: true, unstarted: false, lost: false, foreign: true,
			fresh: true, notATask: true,
		})

		// Far in the future: only what has ended, and is ours, goes.
		n, err = p.Prune(t.Context(), time.Now().Add(time.Hour))
		if err != nil || n != 2 {
			t.Errorf("Prune(future) = %d, %v; want 2 (the finished and the fresh), nil", n, err)
		}
		wantPresent(t, dir, map[string]bool{finished.ID: false, running.ID: true, foreign: true, fresh: false, notATask: true})
		if _, err := p.Poll(t.Context(), finished); !errors.Is(err, providers.ErrUnknownHandle) {
			t.Errorf("Poll of a pruned task: %v, want ErrUnknownHandle", err)
		}
		if st := poll(t, p, running); st.State != providers.StateRunning {
			t.Errorf("running task after Prune: %+v", st)
		}
	})
}

// TestPruneSkipsAnotherInstancesRunningTask: a task another adapter
// process runs is not this instance's, and is still never pruned.
func TestPruneSkipsAnotherInstancesRunningTask(t *testing.T) {
	t.Parallel()
	dir := workDir(t)
	p1 := newTestProvider(t, Config{WorkDir: dir})
	h := providertest.Start(t, p1, helperTask(t, "sleep"))
	p2 := newTestProvider(t, Config{WorkDir: dir})
	if n, err := p2.Prune(t.Context(), time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("Prune = %d, %v; want 0, nil", n, err)
	}
	if st := poll(t, p2, h); st.State != providers.StateRunning {
		t.Errorf("after Prune: %+v, want running", st)
	}
}

// mkTaskDir makes a task directory in dir, with state record r if not nil,
// and returns its ID.
func mkTaskDir(t *testing.T, dir string, r *supervise.StateRecord) string {
	t.Helper()
	id := providertest.TaskID(t)
	taskDir := filepath.Join(dir, id)
	if err := os.Mkdir(taskDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if r != nil {
		r.Version, r.TaskID, r.PGID, r.StartedAt = supervise.RecordVersion, id, r.PID, time.Now()
		r.BootID, _ = supervise.BootID()
		if err := supervise.WriteRecord(taskDir, supervise.FileState, r, false); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// deadPID returns the pid of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess(testBinary(t), helper(t, "exit", "0"), &os.ProcAttr{Env: []string{helperEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

func writeFileIn(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func wantPresent(t *testing.T, dir string, want map[string]bool) {
	t.Helper()
	for name, w := range want {
		if got := supervise.Exists(filepath.Join(dir, name)); got != w {
			t.Errorf("%s present: %v, want %v", name, got, w)
		}
	}
}
