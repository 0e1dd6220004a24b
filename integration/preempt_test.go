package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/dispatch"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestPreemptionEndToEnd: an adapter process (local provider, real
// processes) runs a long low-priority job filling its 2-core node; a
// CRITICAL request arrives; with scheduler.preemption on, the low job is
// evicted (requeue), the CRITICAL job runs and succeeds, then the low job
// runs again (attempt 2) and succeeds. A compute.preemption entry names
// both jobs, and `adapter jobs explain` names the eviction on each.
func TestPreemptionEndToEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	runs := filepath.Join(dir, "runs")
	cfg := writeConfig(t, fmt.Sprintf(`board: %s
work_dir: jobs
templates:
  low:
    command: [/bin/sh, -c, 'echo "low $COMPUTEBOARD_ATTEMPT" >> "$RUNS"; sleep 4; echo "low done $COMPUTEBOARD_ATTEMPT" >> "$RUNS"']
    env: {RUNS: %q}
  crit:
    command: [/bin/sh, -c, 'echo crit >> "$RUNS"; sleep 2']
    env: {RUNS: %q}
node:
  name: preempt-node
  cpu_cores: 2
  memory_gb: 4
scheduler:
  interval: 50ms
  preemption:
    policy: priority
    min_runtime: 0s
    min_preemptor_level: 8
telemetry:
  interval: 500ms
broker:
  claim_idle: 2s
  lease_timeout: 5s
`, board, runs, runs))
	p := startProc(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, p.out)

	low := postData(t, st, "batch", `{"template":"low","priority":2,"resource_requirements":{"cpu_cores":2}}`, nil)
	waitStatus(t, st, low, wire.JobRunning)
	eventually(t, 10*time.Second, "the low job's process", func() bool {
		b, _ := os.ReadFile(runs)
		return strings.Contains(string(b), "low 1")
	})
	e := blackboard.NewEntry(blackboard.RequestTopic, "pager", json.RawMessage(`{"template":"crit","resource_requirements":{"cpu_cores":2}}`))
	e.Priority = blackboard.Priority(wire.EntryPriorityCritical) // request priority 8
	crit, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}

	// Evicted and requeued while the CRITICAL job runs.
	cj := waitStatus(t, st, crit, wire.JobRunning)
	if cj.Priority != 8 {
		t.Fatalf("CRITICAL request got priority %d, want 8", cj.Priority)
	}
	lj, _ := jobData(t, st, low)
	if lj.Status != wire.JobQueued || lj.Attempt != 1 {
		t.Fatalf("low job %s attempt %d while the CRITICAL job runs, want queued after attempt 1", lj.Status, lj.Attempt)
	}
	out := jobsExplain(t, srv.URL(), board, api, wire.JobID(low))
	var lowEx dispatch.Explained
	if err := json.Unmarshal([]byte(out), &lowEx); err != nil || lowEx.Preempted == nil || lowEx.Preempted.By != wire.JobID(crit) ||
		lowEx.Preempted.Mode != "requeue" || lowEx.Preempted.Policy != "priority" {
		t.Errorf("jobs explain of the evicted job (%v):\n%s", err, out)
	}
	if out := jobsExplain(t, srv.URL(), board, api, wire.JobID(crit)); !strings.Contains(out, `"evicts"`) || !strings.Contains(out, wire.JobID(low)) {
		t.Errorf("jobs explain of the preemptor does not name its victim:\n%s", out)
	}

	// The CRITICAL job succeeds, then the low job runs again and succeeds.
	waitStatus(t, st, crit, wire.JobSucceeded)
	var lowEnd wire.JobData
	eventually(t, 30*time.Second, "the low job's second run to succeed", func() bool {
		var ok bool
		lowEnd, ok = jobData(t, st, low)
		return ok && lowEnd.Status.Terminal()
	})
	if lowEnd.Status != wire.JobSucceeded || lowEnd.Attempt != 2 {
		t.Errorf("low job ended %s at attempt %d, want succeeded at attempt 2 (error %+v)", lowEnd.Status, lowEnd.Attempt, lowEnd.Error)
	}
	b, _ := os.ReadFile(runs)
	if got, want := strings.Fields(strings.ReplaceAll(string(b), "\n", ";")), strings.Fields("low 1;crit;low 2;low done 2;"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("runs:\n%s\nwant: low 1, crit, low 2, low done 2 (the first run never finished)", b)
	}

	ents, err := st.GetByTopic(t.Context(), wire.TopicPreemption)
	if err != nil || len(ents) != 1 {
		t.Fatalf("compute.preemption entries: %d (%v), want 1", len(ents), err)
	}
	var pd wire.PreemptionData
	if err := json.Unmarshal(ents[0].Data, &pd); err != nil || pd.Victim != wire.JobID(low) || pd.Preemptor != wire.JobID(crit) ||
		pd.Node != "preempt-node" || pd.Policy != "priority" || pd.Mode != "requeue" || pd.Reason == "" || pd.LostWorkSeconds <= 0 {
		t.Errorf("compute.preemption data (%v): %s", err, ents[0].Data)
	}
}

// jobsExplain runs `adapter jobs explain ID` (the binary) and returns its
// output.
func jobsExplain(t *testing.T, redisURL, board, api, id string) string {
	t.Helper()
	out, err := exec.Command(adapterBinary(t), "jobs", "explain", id, "--redis", redisURL, "--board", board, "--api", api).CombinedOutput()
	if err != nil {
		t.Fatalf("jobs explain %s: %v\n%s", id, err, out)
	}
	return string(out)
}
