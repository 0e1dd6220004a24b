package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
	"github.com/google/go-cmp/cmp"
)

// TestOutputCap: output past MaxOutputBytes is dropped and counted, the
// files hold exactly the cap, and the task is not disturbed.
func TestOutputCap(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		cap                  int64
		stdout, stderr       int
		wantOut, wantErr     int   // file sizes
		wantDropO, wantDropE int64 // dropped bytes
	}{
		"over the cap":  {cap: 1000, stdout: 300_000, stderr: 1500, wantOut: 1000, wantErr: 1000, wantDropO: 299_000, wantDropE: 500},
		"at the cap":    {cap: 1000, stdout: 1000, stderr: 0, wantOut: 1000},
		"under the cap": {cap: 1000, stdout: 10, stderr: 999, wantOut: 10, wantErr: 999},
		"no cap":        {cap: -1, stdout: 300_000, stderr: 5, wantOut: 300_000, wantErr: 5},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
				p := newP(t, Config{MaxOutputBytes: tc.cap})
				task := helperTask(t, "spew", fmt.Sprint(tc.stdout), fmt.Sprint(tc.stderr))
				st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
				type result struct {
					State                  providers.State
					StdoutLen, StderrLen   int
					StdoutDrop, StderrDrop int64
					Truncated              bool
				}
				want := result{providers.StateSucceeded, tc.wantOut, tc.wantErr, tc.wantDropO, tc.wantDropE, tc.wantDropO+tc.wantDropE > 0}
				got := result{st.State, len(readFile(t, st.StdoutPath)), len(readFile(t, st.StderrPath)), st.StdoutDropped, st.StderrDropped, st.OutputTruncated()}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("outcome (-want +got):\n%s", diff)
				}
				// A restarted adapter reads the same from the exit record.
				p2 := newP(t, Config{WorkDir: p.workDir})
				if diff := cmp.Diff(st, poll(t, p2, providersHandle(task.ID))); diff != "" {
					t.Errorf("status seen by a new instance (-old +new):\n%s", diff)
				}
			})
		})
	}
}

func providersHandle(id string) providers.Handle { return providers.Handle{Provider: "local", ID: id} }

// TestLimits: every task starts with the configured resource limits, soft
// and hard, or the defaults.
func TestLimits(t *testing.T) {
	t.Parallel()
	// want is what a task gets for limit v: never above our own hard limit.
	want := func(t *testing.T, name string, resource int, v uint64) string {
		var own syscall.Rlimit
		if err := syscall.Getrlimit(resource, &own); err != nil {
			t.Fatal(err)
		}
		v = min(v, own.Max)
		return fmt.Sprintf("%s %d %d\n", name, v, v)
	}
	tests := map[string]struct {
		limits Limits
		want   [3]uint64 // nofile, nproc, core
	}{
		"defaults":   {want: [3]uint64{4096, 4096, 0}},
		"configured": {limits: Limits{OpenFiles: 999, Processes: 2999, CoreBytes: 1 << 20}, want: [3]uint64{999, 2999, 1 << 20}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantOut := want(t, "nofile", supervise.RlimitNOFILE, tc.want[0]) + want(t, "nproc", supervise.RlimitNPROC, tc.want[1]) + want(t, "core", supervise.RlimitCORE, tc.want[2])
			for mode, newP := range map[string]func(*testing.T) *Provider{
				"supervised": func(t *testing.T) *Provider { return newTestProvider(t, Config{Limits: tc.limits}) },
				// The server sets them on itself, for its tasks to inherit,
				// as a supervisor per task does: no CAP_SYS_RESOURCE.
				"served": func(t *testing.T) *Provider {
					return newTestProvider(t, Config{Limits: tc.limits, SupervisorServer: true})
				},
				// In-process, the limits are set on the running task with
				// prlimit(2), which a root provider may do to another
				// user's task only with CAP_SYS_RESOURCE (containers
				// drop it): run the task as ourselves.
				"in-process": func(t *testing.T) *Provider {
					return newDirectProvider(t, Config{Limits: tc.limits, AllowRoot: true})
				},
			} {
				t.Run(mode, func(t *testing.T) {
					t.Parallel()
					p := newP(t)
					task := helperTask(t, "limits")
					if mode == "in-process" {
						// The limits are set right after the task starts,
						// leaving it a moment under the provider's own (see
						// the package documentation): a task that reads them
						// at once on a loaded machine can see those.
						task = helperTask(t, "limits-after", "500")
					}
					st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
					if got := readFile(t, st.StdoutPath); st.State != providers.StateSucceeded || got != wantOut {
						t.Errorf("state %s, limits:\n%s\nwant succeeded,\n%s(stderr %q)", st.State, got, wantOut, readFile(t, st.StderrPath))
					}
				})
			}
		})
	}
}

// TestLimitsSeenByShell: what a job's shell reports with ulimit.
func TestLimitsSeenByShell(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this system")
	}
	if sh, err = filepath.Abs(sh); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, Config{Limits: Limits{OpenFiles: 1000}, Env: map[string]string{"PATH": os.Getenv("PATH")}})
	task := helperTask(t)
	task.Argv = []string{sh, "-c", "ulimit -n; ulimit -c"}
	st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
	if got, want := readFile(t, st.StdoutPath), "1000\n0\n"; st.State != providers.StateSucceeded || got != want {
		t.Errorf("state %s, ulimit -n; ulimit -c: %q; want succeeded, %q (stderr %q)", st.State, got, want, readFile(t, st.StderrPath))
	}
}
