package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/dispatch"
	"github.com/computeboard/computeboard/internal/adapter"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// smallNodeConfig is a one-core node, so a second job must wait.
func smallNodeConfig(t *testing.T, board, countFile, extra string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`board: %s
work_dir: jobs
templates:
  count:
    command: [/bin/sh, -c, 'echo "$COMPUTEBOARD_REQUEST_ID" >> "$COUNT_FILE"']
    env: {COUNT_FILE: %q}
  slowcount:
    command: [/bin/sh, -c, 'echo "$COMPUTEBOARD_REQUEST_ID" >> "$COUNT_FILE"; sleep 0.3']
    env: {COUNT_FILE: %q}
  sleep:
    command: [sleep]
    allow_arguments: true
    argument_pattern: '[0-9]{1,4}'
    max_arguments: 1
node:
  name: small
  cpu_cores: 1
  memory_gb: 4
scheduler:
  interval: 50ms
broker:
  module_rate: -1
%s`, board, countFile, countFile, extra))
}

func postData(t *testing.T, st *blackboard.Store, module, data string, ttl *float64) string {
	t.Helper()
	e := blackboard.NewEntry(blackboard.RequestTopic, module, json.RawMessage(data))
	e.TTLSeconds = ttl
	id, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func jobData(t *testing.T, st *blackboard.Store, reqID string) (wire.JobData, bool) {
	t.Helper()
	e, err := st.Get(t.Context(), wire.JobID(reqID))
	if err != nil {
		return wire.JobData{}, false
	}
	var jd wire.JobData
	if err := json.Unmarshal(e.Data, &jd); err != nil {
		t.Fatalf("job entry data: %v", err)
	}
	return jd, true
}

func waitStatus(t *testing.T, st *blackboard.Store, reqID string, want wire.JobStatus) wire.JobData {
	t.Helper()
	var jd wire.JobData
	eventually(t, 30*time.Second, fmt.Sprintf("job of %s to be %s", reqID, want), func() bool {
		var ok bool
		jd, ok = jobData(t, st, reqID)
		return ok && jd.Status == want
	})
	return jd
}

var apiRE = regexp.MustCompile(`HTTP API on (http://127\.0\.0\.1:\d+)`)

func apiURL(t *testing.T, out *syncBuffer) string {
	t.Helper()
	var u string
	eventually(t, 10*time.Second, "the HTTP address", func() bool {
		if m := apiRE.FindStringSubmatch(out.String()); m != nil {
			u = m[1]
		}
		return u != ""
	})
	return u
}

// TestPendingJobIsExplained fills a one-core node, then checks that the
// waiting job's entry and `adapter jobs explain` say why it waits.
func TestPendingJobIsExplained(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := smallNodeConfig(t, board, filepath.Join(jobDir(t), "runs"), "")
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, out)

	long := postData(t, st, "planner", `{"template":"sleep","arguments":["30"],"estimated_duration":30}`, nil)
	waitStatus(t, st, long, wire.JobRunning)
	waiting := postData(t, st, "critic", `{"template":"sleep","arguments":["1"],"priority":7}`, nil)

	var ex dispatch.Explained
	eventually(t, 30*time.Second, "an explanation on the job entry", func() bool {
		jd, ok := jobData(t, st, waiting)
		if !ok || len(jd.Explanation) == 0 || string(jd.Explanation) == "null" {
			return false
		}
		return json.Unmarshal(jd.Explanation, &ex) == nil && ex.Reason != ""
	})
	if ex.Placed || ex.Position != 1 || ex.Level != 7 || ex.Reason == "" || !strings.Contains(ex.Message, "cpu") {
		t.Errorf("explanation = %+v; want position 1, level 7, a reason naming cpu", ex)
	}
	if ex.EstStart == nil {
		t.Errorf("no estimated start, though the running job has an estimated duration: %+v", ex)
	}

	// The CLI asks the running adapter.
	var cli syncBuffer
	code := adapter.Main(t.Context(), []string{"jobs", "explain", wire.JobID(waiting), "--redis", srv.URL(), "--board", board, "--api", api},
		func(string) string { return "" }, &cli, &cli)
	if code != 0 || !strings.Contains(cli.String(), `"reason"`) || !strings.Contains(cli.String(), `"fair_share"`) {
		t.Fatalf("jobs explain exited %d:\n%s", code, cli.String())
	}
	resp, err := http.Get(api + "/api/v1/jobs/" + wire.JobID(waiting) + "/explain")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"position": 1`) {
		t.Fatalf("GET explain: %s\n%s", resp.Status, body)
	}
}

// TestExpiredRequestNeverRuns posts a request with a short TTL while no
// adapter runs; when one starts, the request is expired, not run.
func TestExpiredRequestNeverRuns(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	countFile := filepath.Join(jobDir(t), "runs")
	cfg := smallNodeConfig(t, board, countFile, "listen: off\n")
	ttl := 0.5
	id := postData(t, st, "planner", `{"template":"count"}`, &ttl)
	time.Sleep(time.Second)
	fresh := postData(t, st, "planner", `{"template":"count"}`, nil)
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	waitStatus(t, st, fresh, wire.JobSucceeded)
	jd := waitStatus(t, st, id, wire.JobExpired)
	if jd.StartedAt != nil {
		t.Errorf("expired job has a start time: %+v", jd)
	}
	e, err := st.Get(t.Context(), id)
	if err == nil && e.Status != blackboard.StatusExpired {
		t.Errorf("request entry status %s, want expired", e.Status)
	}
	if runs := runCounts(t, countFile); runs[id] != 0 {
		t.Errorf("expired request ran %d times", runs[id])
	}
}

// TestCancellation retracts a queued request (it never starts) and a
// running one (its process is stopped).
func TestCancellation(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	countFile := filepath.Join(jobDir(t), "runs")
	cfg := smallNodeConfig(t, board, countFile, "listen: off\n")
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	running := postData(t, st, "planner", `{"template":"sleep","arguments":["60"]}`, nil)
	jd := waitStatus(t, st, running, wire.JobRunning)
	queued := postData(t, st, "planner", `{"template":"count"}`, nil)
	waitStatus(t, st, queued, wire.JobQueued)

	if err := st.Retract(t.Context(), queued); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, queued, wire.JobCancelled)

	if err := st.Retract(t.Context(), running); err != nil {
		t.Fatal(err)
	}
	jd = waitStatus(t, st, running, wire.JobCancelled)
	// The process group is gone: its state file names the pid.
	pid := readPID(t, filepath.Dir(jd.StdoutPath))
	eventually(t, 30*time.Second, "the sleep process to die", func() bool { return !procAlive(pid) })

	// The node is free again and the cancelled request never ran.
	after := postData(t, st, "planner", `{"template":"count"}`, nil)
	waitStatus(t, st, after, wire.JobSucceeded)
	if runs := runCounts(t, countFile); runs[queued] != 0 {
		t.Errorf("cancelled request ran %d times", runs[queued])
	}

	// Telemetry counts both cancels, queued and running, as cancels, and
	// neither as a failure.
	eventually(t, 30*time.Second, "job_status telemetry counting two cancels", func() bool {
		es, err := st.GetByTopic(t.Context(), wire.TopicJobStatus)
		if err != nil || len(es) == 0 {
			return false
		}
		latest := es[0]
		for _, e := range es {
			if e.Timestamp > latest.Timestamp {
				latest = e
			}
		}
		var js wire.JobStatusData
		if json.Unmarshal(latest.Data, &js) != nil || js.CompletedJobs < 1 {
			return false // not yet the figures after the last job
		}
		if js.CancelledJobs != 2 || js.FailedJobs != 0 || js.Statistics.JobsCancelled != 2 {
			t.Fatalf("job_status: cancelled %d (statistics %d), failed %d; want 2 cancelled, 0 failed",
				js.CancelledJobs, js.Statistics.JobsCancelled, js.FailedJobs)
		}
		return true
	})
}

// TestBackpressureWithFullInbox bounds the engine's pending set and the
// inbox, posts far more, and checks that the rest waits in Redis and that
// everything still runs once.
func TestBackpressureWithFullInbox(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	countFile := filepath.Join(jobDir(t), "runs")
	cfg := smallNodeConfig(t, board, countFile, "broker:\n  inbox_capacity: 5\n  module_max_waiting: -1\n  module_rate: -1\n")
	cfg = strings.Replace(readFile(t, cfg), "scheduler:\n  interval: 50ms\nbroker:\n  module_rate: -1\n", "scheduler:\n  interval: 50ms\n  max_pending: 3\n", 1)
	path := writeConfig(t, cfg)
	_, out := runAdapter(t, "--config", path, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, out)

	ids := postBurst(t, st, "flood", "slowcount", 60)
	var stats struct {
		Held  int `json:"held"`
		Lanes []struct {
			Unread int `json:"unread"`
		} `json:"lanes"`
	}
	eventually(t, 30*time.Second, "a full inbox with requests left unread in Redis", func() bool {
		resp, err := http.Get(api + "/api/v1/inbox/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&stats) != nil {
			return false
		}
		unread := 0
		for _, l := range stats.Lanes {
			unread += l.Unread
		}
		return stats.Held == 5 && unread > 0
	})
	sts := waitAllTerminal(t, rdb, st, ids, 3*time.Minute)
	checkExactlyOnce(t, ids, sts, runCounts(t, countFile))
}

// TestFairnessAcrossModules: one module's burst must not delay another
// module's single request by more than a small bound.
func TestFairnessAcrossModules(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	countFile := filepath.Join(jobDir(t), "runs")
	cfg := smallNodeConfig(t, board, countFile, "")
	cfg = strings.Replace(readFile(t, cfg), "scheduler:\n  interval: 50ms\n", "scheduler:\n  interval: 50ms\n  max_pending: 2\n", 1)
	path := writeConfig(t, strings.Replace(cfg, "work_dir: jobs\n", "work_dir: jobs\nlisten: off\n", 1))
	runAdapter(t, "--config", path, "--redis", srv.URL())

	burst := postBurst(t, st, "flood", "slowcount", 2000)
	eventually(t, 30*time.Second, "the flood to start", func() bool { return len(runCounts(t, countFile)) >= 2 })
	n0 := len(strings.Fields(readFile(t, countFile)))
	single := postData(t, st, "quiet", `{"template":"slowcount","resource_requirements":{"cpu_cores":0.1,"memory":0.01}}`, nil)
	waitStatus(t, st, single, wire.JobSucceeded)

	// Flood runs that started after the quiet request was posted and
	// before it ran. The bound: the jobs the engine already held
	// (max_pending 2), one request in flight between inbox and engine, the
	// node's free slots at that moment (10 slots of 0.1 core), and one
	// turn of the inbox's round-robin.
	lines := strings.Fields(readFile(t, countFile))
	pos := slices.Index(lines, single)
	overtook := pos - n0
	if bound := 2 + 1 + 10 + 1; overtook > bound {
		t.Errorf("%d flood requests ran between posting the quiet request and running it; bound %d", overtook, bound)
	}
	left := 0
	for _, id := range burst {
		if !slices.Contains(lines[:pos], id) {
			left++
		}
	}
	t.Logf("quiet request overtaken by %d flood requests; %d flood requests were still waiting", overtook, left)
	if left < 1000 {
		t.Errorf("the flood drained too early (%d left) for the test to mean anything", left)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readPID(t *testing.T, taskDir string) int {
	t.Helper()
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(taskDir, "state"))), &rec); err != nil || rec.PID == 0 {
		t.Fatalf("task state in %s: %v (%+v)", taskDir, err, rec)
	}
	return rec.PID
}

func procAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestEngineStateSurvivesRestart checks that the engine's decayed usage is
// checkpointed and restored, so fair share does not reset on a restart.
func TestEngineStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := smallNodeConfig(t, board, filepath.Join(jobDir(t), "runs"), "listen: off\n")
	stop, _ := runAdapter(t, "--config", cfg, "--redis", srv.URL())
	id := postData(t, st, "planner", `{"template":"sleep","arguments":["1"]}`, nil)
	waitStatus(t, st, id, wire.JobSucceeded)
	// One more cycle charges the ended job.
	id2 := postData(t, st, "critic", `{"template":"count"}`, nil)
	waitStatus(t, st, id2, wire.JobSucceeded)
	stop()

	usage := func() map[string]float64 {
		b, err := rdb.HGet(t.Context(), st.Keys().EngineState(), "scheduler").Bytes()
		if err != nil {
			t.Fatalf("no engine checkpoint of the scheduler: %v", err)
		}
		var s struct {
			Accounts map[string]struct {
				Usage float64 `json:"usage"`
			} `json:"accounts"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for k, v := range s.Accounts {
			out[k] = v.Usage
		}
		return out
	}
	first := usage()
	if first["planner"] <= 0 {
		t.Fatalf("planner's usage was not checkpointed: %v", first)
	}
	// A restarted adapter starts from the checkpoint: after another job of
	// a different account, planner's usage is still there (decayed a little).
	stop2, _ := runAdapter(t, "--config", cfg, "--redis", srv.URL())
	id3 := postData(t, st, "critic", `{"template":"count"}`, nil)
	waitStatus(t, st, id3, wire.JobSucceeded)
	time.Sleep(200 * time.Millisecond)
	stop2()
	second := usage()
	if second["planner"] <= 0 || second["planner"] > first["planner"] {
		t.Fatalf("planner's usage after restart = %v, before = %v; want kept and decayed", second["planner"], first["planner"])
	}
}

// TestRetractWhileAdapterDown retracts requests whose jobs were accepted
// while no adapter was running: on restart the queued one never starts and
// the running one is stopped.
func TestRetractWhileAdapterDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	countFile := filepath.Join(jobDir(t), "runs")
	cfg := smallNodeConfig(t, board, countFile, "listen: off\n")
	stop, _ := runAdapter(t, "--config", cfg, "--redis", srv.URL())
	running := postData(t, st, "planner", `{"template":"sleep","arguments":["60"]}`, nil)
	waitStatus(t, st, running, wire.JobRunning)
	queued := postData(t, st, "planner", `{"template":"count"}`, nil)
	waitStatus(t, st, queued, wire.JobQueued)
	stop()

	for _, id := range []string{queued, running} {
		if err := st.Retract(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	waitStatus(t, st, queued, wire.JobCancelled)
	jd := waitStatus(t, st, running, wire.JobCancelled)
	pid := readPID(t, filepath.Dir(jd.StdoutPath))
	eventually(t, 30*time.Second, "the sleep process to die", func() bool { return !procAlive(pid) })
	if runs := runCounts(t, countFile); runs[queued] != 0 {
		t.Errorf("the retracted request ran %d times", runs[queued])
	}
}

// TestAccountQuota: an account's quota holds its second job back although
// the node has room, and the job's explanation says so.
func TestAccountQuota(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := smallNodeConfig(t, board, filepath.Join(jobDir(t), "runs"),
		"listen: off\naccounts:\n  - name: planner\n    shares: 1\n    quota: {cpu_cores: 1}\n")
	cfg = writeConfig(t, strings.Replace(readFile(t, cfg), "cpu_cores: 1\n", "cpu_cores: 4\n", 1))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	first := postData(t, st, "planner", `{"template":"sleep","arguments":["30"]}`, nil)
	waitStatus(t, st, first, wire.JobRunning)
	second := postData(t, st, "planner", `{"template":"sleep","arguments":["30"]}`, nil)
	other := postData(t, st, "critic", `{"template":"sleep","arguments":["1"]}`, nil)
	waitStatus(t, st, other, wire.JobSucceeded) // the node had room
	var ex dispatch.Explained
	eventually(t, 30*time.Second, "a quota explanation", func() bool {
		jd, ok := jobData(t, st, second)
		return ok && jd.Status == wire.JobQueued && len(jd.Explanation) > 0 &&
			json.Unmarshal(jd.Explanation, &ex) == nil && ex.Reason == "quota"
	})
	for _, id := range []string{first, second} {
		if err := st.Retract(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
}
