package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestSuspendEndToEnd: an adapter process (local provider, real
// processes) runs a low-priority job that burns 3 s of CPU on its 2-core
// node, its template evicting it in suspend mode. A CRITICAL request
// arrives: the low job's process is stopped in place (state T, its CPU
// time frozen while the CRITICAL job runs; its record still running on
// the node, attempt 1, with suspended_at), the compute.preemption entry
// says suspend; once the CRITICAL job succeeds the low job is resumed on
// the same node, the same process, and succeeds at attempt 1.
func TestSuspendEndToEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	js, err := jobs.New(rdb, st, jobs.Config{Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	dir := jobDir(t)
	burn := "import time\nwhile time.process_time() < 3:\n    pass\nprint('done', flush=True)\n"
	cfg := writeConfig(t, fmt.Sprintf(`board: %s
work_dir: %s
templates:
  burn:
    command: [/usr/bin/python3, -c, %q]
    preempt_mode: suspend
  crit:
    command: [/bin/sh, -c, 'sleep 3']
node:
  name: suspend-node
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
`, board, filepath.Join(dir, "jobs"), burn))
	startProc(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")

	low := postData(t, st, "batch", `{"template":"burn","priority":2,"resource_requirements":{"cpu_cores":2,"memory":1}}`, nil)
	id := wire.JobID(low)
	waitStatus(t, st, low, wire.JobRunning)
	var pid int
	eventually(t, 10*time.Second, "the low job's process state", func() bool {
		_, err := os.Stat(filepath.Join(dir, "jobs", id+"-1", "state"))
		return err == nil
	})
	pid = readPID(t, filepath.Join(dir, "jobs", id+"-1"))
	eventually(t, 15*time.Second, "the low job to burn some CPU", func() bool {
		_, cpu := procCPU(t, pid)
		return cpu >= 50 // clock ticks: half a second at 100 Hz
	})

	e := blackboard.NewEntry(blackboard.RequestTopic, "pager", json.RawMessage(`{"template":"crit","resource_requirements":{"cpu_cores":2,"memory":1}}`))
	e.Priority = blackboard.Priority(wire.EntryPriorityCritical)
	crit, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, crit, wire.JobRunning)

	// Suspended in place while the CRITICAL job runs.
	rec, err := js.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != wire.JobRunning || rec.Attempt != 1 || rec.Node != "suspend-node" || rec.SuspendedAt == nil {
		t.Fatalf("low job while the CRITICAL job runs: %s attempt %d on %q, suspended_at %v; want running, attempt 1, suspend-node, suspended",
			rec.Status, rec.Attempt, rec.Node, rec.SuspendedAt)
	}
	state, before := procCPU(t, pid)
	time.Sleep(time.Second)
	state2, after := procCPU(t, pid)
	if state != "T" || state2 != "T" || after != before {
		t.Errorf("suspended process: state %s then %s, CPU ticks %d then %d a second later; want stopped (T), unchanged", state, state2, before, after)
	}
	if cj, _ := jobData(t, st, crit); cj.Status != wire.JobRunning {
		t.Fatalf("CRITICAL job %s while the low job is suspended", cj.Status)
	}

	// Resumed on the same node once the CRITICAL job is done; it succeeds
	// as the same attempt.
	waitStatus(t, st, crit, wire.JobSucceeded)
	eventually(t, 15*time.Second, "the low job resumed", func() bool {
		r, err := js.Get(t.Context(), id)
		if err != nil || r.SuspendedAt != nil {
			return false
		}
		s, _ := procCPU(t, pid)
		return s != "T"
	})
	var end wire.JobData
	eventually(t, 40*time.Second, "the low job to end", func() bool {
		var ok bool
		end, ok = jobData(t, st, low)
		return ok && end.Status.Terminal()
	})
	if end.Status != wire.JobSucceeded || end.Attempt != 1 || end.Node != "suspend-node" {
		t.Fatalf("low job ended %s at attempt %d on %q (error %+v), want succeeded at attempt 1 on suspend-node", end.Status, end.Attempt, end.Node, end.Error)
	}
	if out := readFile(t, end.StdoutPath); out != "done\n" {
		t.Errorf("low job's stdout %q, want done", out)
	}

	ents, err := st.GetByTopic(t.Context(), wire.TopicPreemption)
	if err != nil || len(ents) != 1 {
		t.Fatalf("compute.preemption entries: %d (%v), want 1", len(ents), err)
	}
	var pd wire.PreemptionData
	if err := json.Unmarshal(ents[0].Data, &pd); err != nil || pd.Victim != id || pd.Preemptor != wire.JobID(crit) || pd.Mode != "suspend" {
		t.Errorf("compute.preemption data (%v): %s, want low suspended for crit", err, ents[0].Data)
	}
}

// procCPU reads a process's state letter and its CPU time (utime + stime,
// in clock ticks) from /proc/<pid>/stat; ("", -1) when it is gone.
func procCPU(t *testing.T, pid int) (string, int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state is field 3 of stat, utime 14, stime 15
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return f[0], u + k
}
