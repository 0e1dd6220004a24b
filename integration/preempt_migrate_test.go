package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestPreemptionMigrates: migration through an eviction. Two agents
// (nodes ck-a and ck-b, 2 cores each) share a checkpoint directory, with a
// scheduler-only adapter apart. The example job (checkpoint mode) runs on
// ck-a; a non-preemptible job fills ck-b; a CRITICAL request then fits
// nowhere and evicts the example job: SIGUSR1, its checkpoint saved and
// verified, the job requeued, the CRITICAL job started on ck-a. ck-a stays
// full, so when ck-b frees the example job restarts there, from the
// checkpoint it saved on ck-a (its stdout says so), and succeeds.
// The sizes leave room for a loaded machine: the grace (4 s) for the save,
// the filler (12 s) outlasting the grace so that the CRITICAL job can only
// take ck-a, the count (15 s) outlasting both so that the job cannot
// finish before its eviction, and the CRITICAL job (60 s) outlasting the
// restarted run.
func TestPreemptionMigrates(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	js, err := jobs.New(rdb, st, jobs.Config{Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	dir := jobDir(t)
	ckdir := filepath.Join(dir, "shared-checkpoints")
	example := filepath.Join(repoRoot(t), "examples", "python", "checkpoint_job.py")
	config := func(name, node string) string {
		return writeConfig(t, fmt.Sprintf(`board: %s
listen: 127.0.0.1:0
work_dir: %s
templates:
  count:
    command: [/usr/bin/python3, %q, --to, "150", --step, "0.1"]
    preempt_mode: checkpoint
  filler:
    command: [/bin/sh, -c, 'sleep 12']
    non_preemptible: true
  crit:
    command: [/bin/sh, -c, 'sleep 60']
scheduler:
  interval: 50ms
  preemption:
    policy: priority
    min_runtime: 0s
    min_preemptor_level: 8
    checkpoint_grace: 4s
pool:
  lease_time: 2s
  heartbeat: 250ms
  checkpoint_dir: %s
  checkpoint_interval: 1h
broker:
  claim_idle: 2s
  lease_timeout: 5s
%s`, board, filepath.Join(dir, "work-"+name), example, ckdir, node))
	}
	node := func(name string) string {
		return fmt.Sprintf("node:\n  name: %s\n  cpu_cores: 2\n  memory_gb: 4\n  gpu_discovery: off\n", name)
	}
	startProc(t, "--config", config("sched", ""), "--redis", srv.URL(), "--role", "scheduler")
	startProc(t, "--config", config("ck-a", node("ck-a")), "--redis", srv.URL(), "--role", "agent")

	low := postData(t, st, "batch", `{"template":"count","priority":2,"resource_requirements":{"cpu_cores":2}}`, nil)
	id := wire.JobID(low)
	if jd := waitStatus(t, st, low, wire.JobRunning); jd.Node != "ck-a" {
		t.Fatalf("job runs on %q, want ck-a", jd.Node)
	}
	stdout1 := filepath.Join(dir, "work-ck-a", id+"-1", "stdout")
	var began time.Time
	eventually(t, 15*time.Second, "the job to count a while", func() bool {
		b, _ := os.ReadFile(stdout1)
		if began.IsZero() && strings.Contains(string(b), "starting from scratch") {
			began = time.Now()
		}
		return !began.IsZero() && time.Since(began) > 1500*time.Millisecond
	})

	startProc(t, "--config", config("ck-b", node("ck-b")), "--redis", srv.URL(), "--role", "agent")
	filler := postData(t, st, "batch", `{"template":"filler","priority":5,"resource_requirements":{"cpu_cores":2}}`, nil)
	if jd := waitStatus(t, st, filler, wire.JobRunning); jd.Node != "ck-b" {
		t.Fatalf("filler runs on %q, want ck-b", jd.Node)
	}

	e := blackboard.NewEntry(blackboard.RequestTopic, "pager", json.RawMessage(`{"template":"crit","resource_requirements":{"cpu_cores":2}}`))
	e.Priority = blackboard.Priority(wire.EntryPriorityCritical)
	crit, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	if jd := waitStatus(t, st, crit, wire.JobRunning); jd.Node != "ck-a" {
		t.Fatalf("CRITICAL job runs on %q, want ck-a (its victim's node)", jd.Node)
	}
	rec, err := js.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	out1 := readFile(t, stdout1)
	saved := checkpointCount(t, out1)
	if rec.Attempt != 1 || rec.Checkpoint == nil || rec.Checkpoint.Seq != 1 || rec.Checkpoint.Path != filepath.Join(ckdir, id, "1") {
		t.Fatalf("record after the eviction: %s attempt %d, checkpoint %+v; want attempt 1 with checkpoint 1\nstdout:\n%s",
			rec.Status, rec.Attempt, rec.Checkpoint, out1)
	}

	var end wire.JobData
	eventually(t, 60*time.Second, "the evicted job to end", func() bool {
		var ok bool
		end, ok = jobData(t, st, low)
		return ok && end.Status.Terminal()
	})
	if end.Status != wire.JobSucceeded || end.Attempt != 2 || end.Node != "ck-b" {
		t.Fatalf("evicted job ended %s at attempt %d on %q (error %+v), want succeeded at attempt 2 on ck-b", end.Status, end.Attempt, end.Node, end.Error)
	}
	if cj, _ := jobData(t, st, crit); cj.Status != wire.JobRunning || cj.Node != "ck-a" {
		t.Errorf("CRITICAL job %s on %q when the evicted job ended, want still running on ck-a", cj.Status, cj.Node)
	}
	out2 := readFile(t, end.StdoutPath)
	if want := fmt.Sprintf("resumed from %d\n", saved); !strings.HasPrefix(out2, want) {
		t.Errorf("run on ck-b does not start with %q:\n%s", want, out2)
	}
	if !regexp.MustCompile(`(?m)^done 150$`).MatchString(out2) {
		t.Errorf("run on ck-b did not count to 150:\n%s", out2)
	}
}
