package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestCheckpointResume: the example job (examples/python/checkpoint_job.py,
// a real process under a real adapter) counts; a CRITICAL request evicts
// it in checkpoint mode: SIGUSR1, the job saves its count, it is stopped
// after the grace and requeued; the agent verifies the checkpoint and
// records it on the job record; the job's next attempt gets it in
// COMPUTEBOARD_CHECKPOINT_RESTORE and resumes from that count.
//
// Corrupt: a byte of the checkpoint is flipped while the job waits in the
// queue; the next attempt refuses it (checkpoint_refused on the record,
// no COMPUTEBOARD_CHECKPOINT_RESTORE) and starts from scratch.
func TestCheckpointResume(t *testing.T) {
	t.Parallel()
	for _, corrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "good", true: "corrupt"}[corrupt], func(t *testing.T) {
			t.Parallel()
			checkpointScenario(t, corrupt)
		})
	}
}

func checkpointScenario(t *testing.T, corrupt bool) {
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	js, err := jobs.New(rdb, st, jobs.Config{Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	dir := jobDir(t)
	ckdir := filepath.Join(dir, "checkpoints")
	example := filepath.Join(repoRoot(t), "examples", "python", "checkpoint_job.py")
	cfg := writeConfig(t, fmt.Sprintf(`board: %s
work_dir: %s
templates:
  count:
    command: [/usr/bin/python3, %q, --to, "60", --step, "0.1"]
    preempt_mode: checkpoint
  crit:
    command: [/bin/sh, -c, 'sleep 3']
node:
  name: ckpt-node
  cpu_cores: 2
  memory_gb: 4
pool:
  checkpoint_dir: %s
  checkpoint_interval: 1h
scheduler:
  interval: 50ms
  preemption:
    policy: priority
    min_runtime: 0s
    min_preemptor_level: 8
    checkpoint_grace: 1s
telemetry:
  interval: 500ms
broker:
  claim_idle: 2s
  lease_timeout: 5s
`, board, filepath.Join(dir, "jobs"), example, ckdir))
	startProc(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")

	low := postData(t, st, "batch", `{"template":"count","priority":2,"resource_requirements":{"cpu_cores":2}}`, nil)
	id := wire.JobID(low)
	waitStatus(t, st, low, wire.JobRunning)
	stdout1 := filepath.Join(dir, "jobs", id+"-1", "stdout") // the entry names it once the attempt ends
	var began time.Time
	eventually(t, 15*time.Second, "the job to count a while", func() bool {
		b, _ := os.ReadFile(stdout1)
		if began.IsZero() && strings.Contains(string(b), "starting from scratch") {
			began = time.Now()
		}
		return !began.IsZero() && time.Since(began) > 1500*time.Millisecond
	})

	e := blackboard.NewEntry(blackboard.RequestTopic, "pager", json.RawMessage(`{"template":"crit","resource_requirements":{"cpu_cores":2}}`))
	e.Priority = blackboard.Priority(wire.EntryPriorityCritical)
	crit, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, crit, wire.JobRunning)

	// Evicted: checkpointed on SIGUSR1, requeued, the checkpoint verified
	// and recorded.
	rec, err := js.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	out1 := readFile(t, stdout1)
	saved := checkpointCount(t, out1)
	if rec.Status != wire.JobQueued || rec.Attempt != 1 || rec.Checkpoint == nil || rec.Checkpoint.Seq != 1 ||
		rec.Checkpoint.Path != filepath.Join(ckdir, id, "1") || rec.CheckpointRefused != nil {
		t.Fatalf("record after the eviction: %s attempt %d, checkpoint %+v, refused %+v; want queued after attempt 1 with checkpoint 1\nstdout:\n%s",
			rec.Status, rec.Attempt, rec.Checkpoint, rec.CheckpointRefused, out1)
	}
	if corrupt {
		p := filepath.Join(rec.Checkpoint.Path, "state.json")
		b := []byte(readFile(t, p))
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	waitStatus(t, st, crit, wire.JobSucceeded)
	var end wire.JobData
	eventually(t, 40*time.Second, "the job's second run to end", func() bool {
		var ok bool
		end, ok = jobData(t, st, low)
		return ok && end.Status.Terminal()
	})
	out2 := readFile(t, end.StdoutPath)
	if end.Status != wire.JobSucceeded || end.Attempt != 2 || !strings.Contains(out2, "done 60") {
		t.Fatalf("job ended %s at attempt %d (error %+v), want succeeded at attempt 2\nstdout:\n%s", end.Status, end.Attempt, end.Error, out2)
	}
	rec, err = js.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !corrupt {
		if want := fmt.Sprintf("resumed from %d\n", saved); !strings.HasPrefix(out2, want) {
			t.Errorf("second run's stdout does not start with %q:\n%s", want, out2)
		}
		if rec.CheckpointRefused != nil {
			t.Errorf("checkpoint refused: %+v", rec.CheckpointRefused)
		}
	} else {
		if !strings.HasPrefix(out2, "starting from scratch\n") {
			t.Errorf("second run did not start from scratch after its checkpoint was spoiled:\n%s", out2)
		}
		if r := rec.CheckpointRefused; r == nil || r.Seq != 1 || !strings.Contains(r.Reason, "sha256") {
			t.Errorf("record's checkpoint_refused %+v, want seq 1 refused for its sha256", r)
		}
	}
	// Done: its checkpoints are gone (the agent removes them just after it
	// records the end, so the record may say so a moment before).
	eventually(t, 10*time.Second, "the finished job's checkpoint directory removed", func() bool {
		_, err := os.Stat(filepath.Join(ckdir, id))
		return os.IsNotExist(err)
	})
}

var checkpointLine = regexp.MustCompile(`(?m)^checkpoint 1 at (\d+) \(signal\)$`)

// checkpointCount is the count the job saved in its checkpoint on SIGUSR1.
func checkpointCount(t *testing.T, out string) int {
	t.Helper()
	m := checkpointLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no checkpoint on SIGUSR1 in the job's stdout:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	if n == 0 {
		t.Fatalf("checkpoint at count 0:\n%s", out)
	}
	return n
}

// TestCheckpointMigratesOnNodeLoss: two agents share a checkpoint
// directory (a scheduler-only adapter apart). The example job runs on
// node ck-a and checkpoints every second; the agent verifies and records
// its checkpoints while it runs. Node ck-a is lost (its adapter and the
// job's process killed): the job, with a verified checkpoint and a retry
// left, goes back to the queue instead of failing lost, runs on ck-b,
// and resumes from the checkpoint ck-a's agent verified.
func TestCheckpointMigratesOnNodeLoss(t *testing.T) {
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
    command: [/usr/bin/python3, %q, --to, "80", --step, "0.1"]
scheduler:
  interval: 50ms
  node_timeout: 3s
pool:
  lease_time: 2s
  heartbeat: 250ms
  node_unhealthy: 1500ms
  checkpoint_dir: %s
  checkpoint_interval: 1s
broker:
  claim_idle: 2s
  lease_timeout: 5s
%s`, board, filepath.Join(dir, "work-"+name), example, ckdir, node))
	}
	node := func(name string) string {
		return fmt.Sprintf("node:\n  name: %s\n  cpu_cores: 2\n  memory_gb: 4\n  gpu_discovery: off\n", name)
	}
	startProc(t, "--config", config("sched", ""), "--redis", srv.URL(), "--role", "scheduler")
	a := startProc(t, "--config", config("ck-a", node("ck-a")), "--redis", srv.URL(), "--role", "agent")

	req := postData(t, st, "batch", `{"template":"count","max_retries":1,"resource_requirements":{"cpu_cores":2}}`, nil)
	id := wire.JobID(req)
	if jd := waitStatus(t, st, req, wire.JobRunning); jd.Node != "ck-a" {
		t.Fatalf("job runs on %q, want ck-a", jd.Node)
	}
	startProc(t, "--config", config("ck-b", node("ck-b")), "--redis", srv.URL(), "--role", "agent")

	// Its checkpoints are verified and recorded while it runs.
	var rec jobs.Job
	eventually(t, 20*time.Second, "a checkpoint recorded while the job runs", func() bool {
		rec, err = js.Get(t.Context(), id)
		return err == nil && rec.Status == wire.JobRunning && rec.Checkpoint != nil && rec.Checkpoint.Seq >= 2
	})
	if want := filepath.Join(ckdir, id); filepath.Dir(rec.Checkpoint.Path) != want {
		t.Fatalf("checkpoint at %s, want under %s", rec.Checkpoint.Path, want)
	}
	// Node ck-a is lost: its adapter and the job's process die.
	pid := readPID(t, filepath.Join(dir, "work-ck-a", id+"-1"))
	a.kill(t)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	recorded := rec.Checkpoint.Seq

	var end wire.JobData
	eventually(t, 40*time.Second, "the job to end after its node was lost", func() bool {
		var ok bool
		end, ok = jobData(t, st, req)
		return ok && end.Status.Terminal()
	})
	if end.Status != wire.JobSucceeded || end.Attempt != 2 || end.Node != "ck-b" {
		t.Fatalf("job ended %s at attempt %d on %q (error %+v), want succeeded at attempt 2 on ck-b", end.Status, end.Attempt, end.Node, end.Error)
	}
	out := readFile(t, end.StdoutPath)
	m := regexp.MustCompile(`^resumed from (\d+)\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the run on ck-b did not resume from a checkpoint:\n%s", out)
	}
	// It resumed from the checkpoint recorded before the loss, or a newer
	// one the dying process completed: never from an older one.
	first := readFile(t, filepath.Join(dir, "work-ck-a", id+"-1", "stdout"))
	at := regexp.MustCompile(fmt.Sprintf(`(?m)^checkpoint %d at (\d+) `, recorded)).FindStringSubmatch(first)
	if at == nil {
		t.Fatalf("checkpoint %d not in the first run's stdout:\n%s", recorded, first)
	}
	if got, min := atoi(m[1]), atoi(at[1]); got < min || got == 0 {
		t.Errorf("resumed from %d, want at least %d (checkpoint %d)", got, min, recorded)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
