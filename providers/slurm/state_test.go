package slurm

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/google/go-cmp/cmp"
)

// TestStatusFromRecordedSqueue maps the jobs of a squeue --json recorded
// from a real Slurm 22.05.8 (testdata/record.sh: one job per state, each
// named for it; OUT_OF_MEMORY under the cgroup plugins, NODE_FAIL by
// taking the node down).
func TestStatusFromRecordedSqueue(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/squeue-22.05.8.json")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := decodeJobs(data)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		State     providers.State
		ExitCode  *int
		TimedOut  bool
		OOMKilled bool
		Suspended bool
		Reason    string // Error's prefix, up to ":"
		Started   bool
		Finished  bool
	}
	want := map[string]outcome{
		"COMPLETED":     {State: providers.StateSucceeded, ExitCode: ptr(0), Started: true, Finished: true},
		"FAILED":        {State: providers.StateFailed, ExitCode: ptr(3), Reason: ReasonFailed, Started: true, Finished: true},
		"FAILED_SIGNAL": {State: providers.StateFailed, Reason: ReasonFailed, Started: true, Finished: true},
		"CANCELLED":     {State: providers.StateCancelled, Reason: ReasonCancelled, Started: true, Finished: true},
		"TIMEOUT":       {State: providers.StateFailed, TimedOut: true, Reason: ReasonTimeout, Started: true, Finished: true},
		"OUT_OF_MEMORY": {State: providers.StateFailed, OOMKilled: true, Reason: ReasonOOM, Started: true, Finished: true},
		"NODE_FAIL":     {State: providers.StateFailed, Reason: ReasonNodeFail, Started: true, Finished: true},
		"RUNNING":       {State: providers.StateRunning, Started: true},
		"SUSPENDED":     {State: providers.StateRunning, Suspended: true, Started: true},
		"PENDING":       {State: providers.StatePending},
	}
	got := map[string]outcome{}
	for _, j := range jobs {
		st := status(j)
		reason, _, _ := strings.Cut(st.Error, ":")
		got[j.Name] = outcome{State: st.State, ExitCode: st.ExitCode, TimedOut: st.TimedOut, OOMKilled: st.OOMKilled,
			Suspended: st.Suspended, Reason: reason, Started: !st.StartedAt.IsZero(), Finished: !st.FinishedAt.IsZero()}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}

// TestDecodeLaterFormats: job_state as an array and exit_code as an
// object (Slurm 23.02+) decode as 22.05's string and wait status do.
func TestDecodeLaterFormats(t *testing.T) {
	t.Parallel()
	jobs, err := decodeJobs([]byte(`{"jobs":[
		{"job_id":1,"name":"a","job_state":["FAILED"],"exit_code":{"status":["ERROR"],"return_code":{"set":true,"number":2}}},
		{"job_id":2,"name":"b","job_state":["CANCELLED"],"exit_code":{"status":["SIGNALED"],"return_code":0,"signal":{"id":{"set":true,"number":9}}}},
		{"job_id":3,"name":"c","job_state":"FAILED","exit_code":512}]}`))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		State  string
		Status int
	}
	var gots []got
	for _, j := range jobs {
		gots = append(gots, got{j.State, j.ExitStatus})
	}
	if diff := cmp.Diff([]got{{"FAILED", 512}, {"CANCELLED", 9}, {"FAILED", 512}}, gots); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseGres(t *testing.T) {
	t.Parallel()
	tests := map[string][]gres{
		"":                                     nil,
		"(null)":                               nil,
		"gpu:2":                                {{Name: "gpu", Count: 2}},
		"gpu:a100:4(S:0-1)":                    {{Name: "gpu", Type: "a100", Count: 4}},
		"gpu:a100:2(S:0,1),gpu:v100:1,mps:100": {{Name: "gpu", Type: "a100", Count: 2}, {Name: "gpu", Type: "v100", Count: 1}, {Name: "mps", Count: 100}},
		"gpu:fake":                             {{Name: "gpu", Type: "fake", Count: 1}},
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, parseGres(in)); diff != "" {
			t.Errorf("parseGres(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestGresOf(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		pl   providers.Placement
		want string
	}{
		"none":    {want: ""},
		"typed":   {pl: providers.Placement{GPUs: []string{GPUID("n1", "a100", 0), GPUID("n1", "a100", 3)}}, want: "gpu:a100:2"},
		"untyped": {pl: providers.Placement{GPUs: []string{GPUID("n1", "", 0), "GPU-1234"}}, want: "gpu:2"},
		"mixed":   {pl: providers.Placement{GPUs: []string{GPUID("n1", "v100", 0)}, MIG: []string{"MIG-1"}}, want: "gpu:v100:1,gpu:1"},
	}
	for name, tc := range tests {
		if got := gresOf(tc.pl); got != tc.want {
			t.Errorf("%s: gresOf = %q, want %q", name, got, tc.want)
		}
	}
}

// TestScript runs a generated batch script with bash, outside Slurm: the
// environment is cleared but for what is kept, and argv arrives as is.
func TestScript(t *testing.T) {
	t.Parallel()
	argv := []string{"/bin/sh", "-c", `printf '%s|' "$1" "$CB_X" "${SLURM_JOB_ID-}" "${CB_ADAPTER-unset}"`, "sh", "it's $(id) `id`\n"}
	cmd := exec.Command("/bin/bash", "-c", string(script("t1", argv, map[string]string{"CB_X": "a'b\"c"})))
	cmd.Env = []string{"CB_ADAPTER=leak", "SLURM_JOB_ID=42", "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "it's $(id) `id`\n|a'b\"c|42|unset|"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSubmissionArgs: what sbatch is given, through an injected run
// function (no Slurm).
func TestSubmissionArgs(t *testing.T) {
	t.Parallel()
	var gotName string
	var gotArgs []string
	var gotStdin []byte
	cli := &CLI{Run: func(_ context.Context, name string, args []string, stdin []byte) ([]byte, error) {
		gotName, gotArgs, gotStdin = name, args, stdin
		return []byte("4242;cluster\n"), nil
	}}
	id, err := cli.Submit(t.Context(), Submission{
		Name: "cb-t1", Comment: `{"task":"t1"}`, Partition: "p", Script: []byte("#!/bin/bash\n"),
		Dir: "/w", Stdout: "/o", Stderr: "/e", TimeLimit: 61 * time.Second, CPUs: 2, MemoryMiB: 100,
		NodeList: "n1", Gres: "gpu:a100:1", User: "1000",
	})
	if err != nil || id != "4242" {
		t.Fatalf("Submit = %q, %v; want 4242", id, err)
	}
	want := []string{"--parsable", "--export=NONE", "--open-mode=append", "--job-name=cb-t1", `--comment={"task":"t1"}`,
		"--chdir=/w", "--output=/o", "--error=/e", "--partition=p", "--time=2", "--cpus-per-task=2", "--mem=100M",
		"--nodelist=n1", "--gres=gpu:a100:1", "--uid=1000"}
	if diff := cmp.Diff(want, gotArgs); gotName != "sbatch" || diff != "" || string(gotStdin) != "#!/bin/bash\n" {
		t.Errorf("ran %s (-want +got args):\n%s\nstdin %q", gotName, diff, gotStdin)
	}
	cli.Run = func(context.Context, string, []string, []byte) ([]byte, error) {
		return []byte("sbatch: warning\n"), nil
	}
	if _, err := cli.Submit(t.Context(), Submission{}); err == nil {
		t.Errorf("Submit accepted %q as a job ID", "sbatch: warning")
	}
}

// TestReportedErrors: a client's listed error is the error, compacted;
// the one Slurm 22.05 gives when slurmctld does not answer (sinfo's
// exact output with slurmctld killed) says so.
func TestReportedErrors(t *testing.T) {
	down := []byte(`{"meta": {}, "errors": [
    {
      "error": "Unspecified error",
      "errno": -1
    }
  ],
  "nodes": [
  ]
}`)
	_, err := decodeNodes(down)
	if err == nil || !strings.Contains(err.Error(), `{"error":"Unspecified error","errno":-1}`) || !strings.Contains(err.Error(), "slurmctld does not answer") {
		t.Errorf("sinfo with slurmctld down: %v", err)
	}
	_, err = decodeJobs([]byte(`{"errors": [{"error": "Invalid user", "errno": 2010}], "jobs": []}`))
	if err == nil || !strings.Contains(err.Error(), `squeue --json reported errors: {"error":"Invalid user","errno":2010}`) || strings.Contains(err.Error(), "slurmctld") {
		t.Errorf("squeue with another error: %v", err)
	}
}
