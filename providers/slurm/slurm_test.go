package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/slurmtest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
	"github.com/google/go-cmp/cmp"
)

// run starts task on p and waits for its end, returning the status and
// its stdout.
func run(t *testing.T, p *Provider, task providers.Task) (providers.Status, string) {
	t.Helper()
	if task.ID == "" {
		task.ID = providertest.TaskID(t)
	}
	h := providertest.Start(t, p, task)
	st := providertest.WaitDone(t, p, h)
	b, err := os.ReadFile(st.StdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	return st, string(b)
}

// TestArgvAndEnvAreNotInterpreted: argv and env values reach the task
// byte for byte, whatever a shell would make of them.
func TestArgvAndEnvAreNotInterpreted(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tricky := []string{"it's", `"$HOME" $(touch /tmp/cb-pwned) ` + "`id`", "a\nb", "*", "-n", `back\slash`, "", "; exit 7"}
	argv := append([]string{"/usr/bin/printf", strings.Repeat("%s|", len(tricky))}, tricky...)
	st, out := run(t, p, providers.Task{Argv: argv})
	if want := strings.Join(tricky, "|") + "|"; st.State != providers.StateSucceeded || out != want {
		t.Errorf("state %s, stdout %q; want succeeded, %q", st.State, out, want)
	}
	val := strings.Join(tricky, "\t")
	st, out = run(t, p, providers.Task{Argv: cmds.PrintEnv("CB_TRICKY"), Env: map[string]string{"CB_TRICKY": val}})
	if st.State != providers.StateSucceeded || out != val {
		t.Errorf("env: state %s, stdout %q; want %q", st.State, out, val)
	}
	if _, err := os.Stat("/tmp/cb-pwned"); err == nil {
		t.Errorf("a shell ran $(touch /tmp/cb-pwned)")
	}
}

// TestEnvironment: the task sees Slurm's variables, its own and the
// payload's, never the adapter's.
func TestEnvironment(t *testing.T) {
	t.Setenv("CB_ADAPTER_SECRET", "leak") // not parallel: Setenv
	t.Setenv("SBATCH_TIMELIMIT", "1")     // sbatch would read it as --time
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testEnvironment(t, tr) })
	}
}

func testEnvironment(t *testing.T, tr string) {
	p := newTestProviderOver(t, tr, Config{Env: map[string]string{"PATH": "/usr/bin:/bin", "CB_BASE": "base"}})
	st, out := run(t, p, providers.Task{Argv: []string{"/usr/bin/env", "-0"}, Env: map[string]string{"CB_TASK": "task", "CB_BASE": "over"}})
	if st.State != providers.StateSucceeded {
		t.Fatalf("status %+v", st)
	}
	env := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, want := range map[string]string{"CB_TASK": "task", "CB_BASE": "over", "PATH": "/usr/bin:/bin"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if env["SLURM_JOB_ID"] == "" || env[providers.PayloadEnv] == "" {
		t.Errorf("SLURM_JOB_ID or %s missing: %v", providers.PayloadEnv, env)
	}
	allowed := []string{"CB_TASK", "CB_BASE", "PATH", providers.PayloadEnv, "HOME", "USER", "LOGNAME", "PWD", "SHLVL", "_"}
	for k := range env {
		if !slices.Contains(allowed, k) && !strings.HasPrefix(k, "SLURM") {
			t.Errorf("unexpected variable %s=%q in the task's environment", k, env[k])
		}
	}
	if env["SLURM_TIMELIMIT"] != "" {
		t.Errorf("the adapter's SBATCH_TIMELIMIT reached sbatch")
	}
}

// TestPlacementAndResources: node, GPUs, CPUs and memory become sbatch
// options the job sees.
func TestPlacementAndResources(t *testing.T) {
	t.Parallel()
	for _, tr := range transports { // one after the other: each expects the first GPU free
		t.Run(tr, func(t *testing.T) { testPlacementAndResources(t, tr) })
	}
}

func testPlacementAndResources(t *testing.T, tr string) {
	c := slurmtest.Shared(t)
	p := newTestProviderOver(t, tr, Config{})
	task := providers.Task{
		Argv:      []string{"/bin/sh", "-c", `printf '%s ' "$SLURM_JOB_NODELIST" "$SLURM_CPUS_PER_TASK" "$SLURM_MEM_PER_NODE" "$CUDA_VISIBLE_DEVICES"`},
		Resources: providers.Resources{CPUCores: 1.5, MemoryBytes: 100<<20 + 1},
		Placement: providers.Placement{Node: c.Node, GPUs: []string{GPUID(c.Node, slurmtest.FakeGPUType, 1)}},
	}
	st, out := run(t, p, task)
	if want := c.Node + " 2 101 0 "; st.State != providers.StateSucceeded || out != want {
		t.Errorf("state %s, job saw %q; want succeeded, %q", st.State, out, want)
	}
}

// TestNodes lists the cluster's node as a pool node.
func TestNodes(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			testNodes(t, tr)
		})
	}
}

func testNodes(t *testing.T, tr string) {
	c := slurmtest.Shared(t)
	p := newTestProviderOver(t, tr, Config{})
	got, err := p.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gpu := func(i int) inventory.GPU {
		return inventory.GPU{UUID: GPUID(c.Node, slurmtest.FakeGPUType, i), Model: slurmtest.FakeGPUType, Source: inventory.FromConfig}
	}
	want := []inventory.Node{{
		Name: c.Node, CPUs: 32, MemoryMiB: 8192, GPUs: []inventory.GPU{gpu(0), gpu(1)},
		Labels: map[string]string{LabelProvider: "slurm", LabelPartition: c.Partition},
	}}
	for i := range got {
		delete(got[i].Labels, LabelState) // idle or mixed, as other tests run
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	other := newTestProviderOver(t, tr, Config{Partition: "nosuchpartition"})
	if got, err := other.Nodes(t.Context()); err != nil || len(got) != 0 {
		t.Errorf("Nodes of another partition = %v, %v; want none", got, err)
	}
}

// TestStartIsIdempotent: a task ID is submitted once, also by a provider
// that lost its WorkDir; the job is then found by its task ID.
func TestStartIsIdempotent(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	task := providers.Task{ID: providertest.TaskID(t), Argv: cmds.Sleep}
	h := providertest.Start(t, p, task)
	fresh := newTestProvider(t, Config{}) // same name, another WorkDir
	if _, err := fresh.Start(t.Context(), task); !errors.Is(err, providers.ErrTaskExists) || !errors.Is(err, providers.ErrInvalidTask) {
		t.Fatalf("second Start: %v, want ErrTaskExists and ErrInvalidTask", err)
	}
	byTask := providers.Handle{Provider: h.Provider, ID: task.ID}
	for name, prov := range map[string]*Provider{"first": p, "fresh": fresh} {
		st, err := prov.Poll(t.Context(), byTask)
		if err != nil || st.State.Terminal() {
			t.Errorf("%s: Poll by task ID = %+v, %v; want the running job", name, st, err)
		}
	}
	if err := fresh.Stop(t.Context(), byTask); err != nil {
		t.Fatalf("Stop by task ID: %v", err)
	}
	if st := providertest.WaitDone(t, p, h); st.State != providers.StateCancelled {
		t.Errorf("state = %s, want cancelled", st.State)
	}
	jobs, err := p.tr.Jobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range jobs {
		if j.Name == DefaultJobNamePrefix+task.ID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d jobs named for the task, want 1", n)
	}
}

// TestOutcomeOutlivesSqueue: once Poll has seen a job end, its outcome
// is reported after squeue forgets the job; a job never seen ending is
// lost.
func TestOutcomeOutlivesSqueue(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	task := providers.Task{ID: providertest.TaskID(t), Argv: cmds.Exit(3)}
	h := providertest.Start(t, p, task)
	want := providertest.WaitDone(t, p, h)
	q := newTestProvider(t, Config{WorkDir: p.workDir, Transport: forgetful{p.tr}})
	got, err := q.Poll(t.Context(), h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status once squeue forgot the job (-want +got):\n%s", diff)
	}
	if err := os.Remove(filepath.Join(p.taskDir(task.ID), fileOutcome)); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Poll(t.Context(), h); err != nil || got.State != providers.StateLost {
		t.Errorf("without a recorded outcome: %+v, %v; want lost", got, err)
	}
	if _, err := q.Poll(t.Context(), providers.Handle{Provider: h.Provider, ID: "999999"}); !errors.Is(err, providers.ErrUnknownHandle) {
		t.Errorf("a job ID with no record: %v, want ErrUnknownHandle", err)
	}
}

// forgetful is a Slurm that has forgotten every job.
type forgetful struct{ Transport }

func (forgetful) Jobs(context.Context) ([]Job, error) { return nil, nil }

// TestOutOfMemory runs a task over its memory on a cluster with Slurm's
// cgroup v1 plugins (ConstrainRAMSpace): it ends OUT_OF_MEMORY, reported
// as OOMKilled.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		t.Skip("no cgroup v1 memory controller: Slurm's task/cgroup cannot confine memory here")
	}
	c := slurmtest.StartT(t, slurmtest.Options{Cgroup: true, CPUs: 2, MemoryMiB: 1024})
	p := newProviderOn(t, c, Config{})
	st, _ := run(t, p, providers.Task{
		Argv:      []string{"/bin/sh", "-c", "head -c 400M /dev/zero | tail >/dev/null"},
		Resources: providers.Resources{CPUCores: 1, MemoryBytes: 64 << 20},
	})
	if st.State != providers.StateFailed || !st.OOMKilled || !strings.HasPrefix(st.Error, ReasonOOM) {
		t.Errorf("status %+v; want failed, OOMKilled, Error %s: ...", st, ReasonOOM)
	}
}

// TestRunAsUser: a provider running as root submits a task naming a user
// with sbatch --uid; the job runs as that user and writes its output in
// the task directory, which it owns.
func TestRunAsUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			testRunAsUser(t, tr)
		})
	}
}

func testRunAsUser(t *testing.T, tr string) {
	base, err := os.MkdirTemp("", "cbslurm-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil { // nobody passes through
		t.Fatal(err)
	}
	p := newTestProviderOver(t, tr, Config{WorkDir: filepath.Join(base, "work")})
	p.allowRoot = false
	st, out := run(t, p, providers.Task{Argv: []string{"/usr/bin/id", "-un"}, User: "nobody"})
	if st.State != providers.StateSucceeded || out != "nobody\n" {
		t.Errorf("state %s, id -un = %q; want succeeded, nobody", st.State, out)
	}
	if _, err := p.Start(t.Context(), providers.Task{ID: providertest.TaskID(t), Argv: cmds.Exit(0)}); !errors.Is(err, providers.ErrInvalidTask) {
		t.Errorf("a task that would run as root without AllowRoot: %v, want ErrInvalidTask", err)
	}
}

// TestRefusedSubmission: a job sbatch refuses leaves nothing behind, so
// the task ID can be started again.
func TestRefusedSubmission(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			testRefusedSubmission(t, tr)
		})
	}
}

func testRefusedSubmission(t *testing.T, tr string) {
	p := newTestProviderOver(t, tr, Config{})
	task := providers.Task{ID: providertest.TaskID(t), Argv: cmds.Exit(0), Placement: providers.Placement{Node: "nosuchnode"}}
	if _, err := p.Start(t.Context(), task); err == nil || errors.Is(err, providers.ErrTaskExists) {
		t.Fatalf("Start on a node Slurm does not have: %v, want sbatch's refusal", err)
	}
	task.Placement.Node = ""
	if st, _ := run(t, p, task); st.State != providers.StateSucceeded {
		t.Errorf("retry: state %s, want succeeded", st.State)
	}
}

// TestPartitionNodesOut: a node drained in Slurm is listed Out, with
// Slurm's state and reason, and left out of Nodes, over each transport;
// resumed, it is usable again.
func TestPartitionNodesOut(t *testing.T) {
	t.Parallel()
	c := slurmtest.StartT(t, slurmtest.Options{CPUs: 2, REST: true})
	scontrol := func(args ...string) {
		t.Helper()
		if out, err := c.Command(t.Context(), "scontrol", args...).CombinedOutput(); err != nil {
			t.Fatalf("scontrol %v: %v: %s", args, err, out)
		}
	}
	providersOn := map[string]*Provider{}
	for _, tr := range transports {
		cfg := Config{}
		if tr == "rest" {
			r, err := NewREST(RESTConfig{URL: c.RESTURL}, "", c.Conf, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Transport = r
		}
		providersOn[tr] = newProviderOn(t, c, cfg)
	}
	check := func(wantOut []string) {
		t.Helper()
		for tr, p := range providersOn {
			all, err := p.PartitionNodes(t.Context())
			if err != nil || len(all) != 1 || all[0].Name != c.Node {
				t.Fatalf("%s: PartitionNodes = %+v, %v; want node %s", tr, all, err, c.Node)
			}
			for _, w := range wantOut {
				if !strings.Contains(all[0].Out, w) {
					t.Errorf("%s: Out %q; want it to say %q", tr, all[0].Out, w)
				}
			}
			if len(wantOut) == 0 && all[0].Out != "" {
				t.Errorf("%s: Out %q; want usable", tr, all[0].Out)
			}
			usable, err := p.Nodes(t.Context())
			if err != nil || len(usable) != map[bool]int{true: 1, false: 0}[len(wantOut) == 0] {
				t.Errorf("%s: Nodes = %+v, %v", tr, usable, err)
			}
		}
	}
	check(nil)
	scontrol("update", "nodename="+c.Node, "state=drain", "reason=cb-drain-test")
	check([]string{"drain", "cb-drain-test"})
	scontrol("update", "nodename="+c.Node, "state=resume")
	// Resumed, the node is not responding until slurmctld's next ping.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if all, err := providersOn["cli"].PartitionNodes(t.Context()); err == nil && len(all) == 1 && all[0].Out == "" {
			break
		}
	}
	check(nil)
}
