package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// runPython runs one of examples/python's scripts with Debian's python3.
func runPython(t *testing.T, timeout time.Duration, script string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python(t), append([]string{filepath.Join(repoRoot(t), "examples", "python", script)}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func lastJSONLine(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out)
	}
	return m
}

func storeFor(t *testing.T, rdb redis.UniversalClient, board string) *blackboard.Store {
	t.Helper()
	s, err := blackboard.New(rdb, blackboard.Config{Namespace: board, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPythonRequestRunsAProcess is the foundation path end to end: a
// module posts a compute.request with plain redis-py, the adapter runs a
// real process, and the job entry comes back with its outcome.
func TestPythonRequestRunsAProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	_, board := redistest.New(t)
	cfg := writeConfig(t, testConfig(board, ""))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	out, err := runPython(t, 60*time.Second, "post_request.py", "--redis", srv.URL(), "--board", board, "--template", "hello")
	if err != nil {
		t.Fatalf("post_request.py: %v\n%s", err, out)
	}
	job := lastJSONLine(t, out)
	if job["status"] != "succeeded" || job["exit_code"] != 0.0 {
		t.Fatalf("job did not succeed: %v", job)
	}
	stdout, err := os.ReadFile(job["stdout_path"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from " + job["job_id"].(string); strings.TrimSpace(string(stdout)) != want {
		t.Fatalf("stdout = %q, want %q", stdout, want)
	}

	// The request entry is consumed; the job entry points at it.
	rdb := srv.Client(t)
	st := storeFor(t, rdb, board)
	req, err := st.Get(t.Context(), job["request_entry_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if req.Status != blackboard.StatusConsumed {
		t.Fatalf("request entry status = %s, want consumed", req.Status)
	}
	je, err := st.Get(t.Context(), job["job_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if je.Topic != wire.TopicJob || je.ParentID != req.ID || je.SourceModule != "compute" {
		t.Fatalf("job entry = %+v", je)
	}

	// A failing template ends failed with its exit code and stderr.
	out, err = runPython(t, 60*time.Second, "post_request.py", "--redis", srv.URL(), "--board", board, "--template", "fail")
	if err == nil {
		t.Fatalf("a failed job should make post_request.py exit non-zero:\n%s", out)
	}
	job = lastJSONLine(t, out)
	if job["status"] != "failed" || job["exit_code"] != 3.0 {
		t.Fatalf("want failed with exit 3, got %v", job)
	}
	stderr, _ := os.ReadFile(job["stderr_path"].(string))
	if !strings.Contains(string(stderr), "about to fail") {
		t.Fatalf("stderr = %q", stderr)
	}
}

// TestWatchPressure checks that the telemetry entries reach a redis-py
// watcher.
func TestWatchPressure(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	_, board := redistest.New(t)
	cfg := writeConfig(t, testConfig(board, ""))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	// The watcher replays from the start, so it sees the first publish too.
	out, err := runPython(t, 60*time.Second, "watch_pressure.py", "--redis", srv.URL(), "--board", board, "--count", "3", "--from-start", "--timeout", "50")
	if err != nil {
		t.Fatalf("watch_pressure.py: %v\n%s", err, out)
	}
	for _, topic := range []string{"compute.resource_utilization", "compute.job_status", "compute.metrics"} {
		if !strings.Contains(out, topic) {
			t.Errorf("watcher did not see %s:\n%s", topic, out)
		}
	}
	var util map[string]any
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "compute.resource_utilization") {
			_ = json.Unmarshal([]byte(line), &util)
		}
	}
	data, _ := util["data"].(map[string]any)
	for _, k := range []string{"cpu", "memory", "max_utilization"} {
		v, ok := data[k].(float64)
		if !ok || v < 0 || v > 1 {
			t.Errorf("utilization %s = %v, want a fraction", k, data[k])
		}
	}
}

// TestEmbeddedBlackboard runs the adapter as `make run` does, with no
// Redis at all, and posts to the address it prints.
func TestEmbeddedBlackboard(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, testConfig("default", ""))
	_, out := runAdapter(t, "--config", cfg, "--embedded", "127.0.0.1:0")
	re := regexp.MustCompile(`redis://127\.0\.0\.1:\d+`)
	var url string
	eventually(t, 10*time.Second, "the embedded address", func() bool {
		url = re.FindString(out.String())
		return url != ""
	})
	res, err := runPython(t, 60*time.Second, "post_request.py", "--redis", url, "--template", "echo", "--arg", "embedded ok")
	if err != nil {
		t.Fatalf("post_request.py: %v\n%s\nadapter:\n%s", err, res, out.String())
	}
	job := lastJSONLine(t, res)
	stdout, _ := os.ReadFile(job["stdout_path"].(string))
	if strings.TrimSpace(string(stdout)) != "embedded ok" {
		t.Fatalf("stdout = %q", stdout)
	}
}

// badRequests are posted raw, as a careless or hostile module might.
var badRequests = map[string]struct {
	data     string
	wantCode wire.Code
}{
	"malformed JSON":      {`{"template": "hello"`, wire.CodeMalformedJSON},
	"wrong type":          {`{"template": "hello", "priority": "high"}`, wire.CodeWrongType},
	"unknown field":       {`{"template": "hello", "shell": "rm -rf /"}`, wire.CodeUnknownField},
	"missing template":    {`{"arguments": ["x"]}`, wire.CodeMissingField},
	"unknown template":    {`{"template": "rm"}`, wire.CodeUnknownTemplate},
	"command not allowed": {`{"command": ["/bin/rm", "-rf", "/tmp/x"]}`, wire.CodeCommandNotAllowed},
	"negative resources":  {`{"template": "hello", "resource_requirements": {"cpu_cores": -2}}`, wire.CodeInvalidValue},
	"absurd resources":    {`{"template": "hello", "resource_requirements": {"memory": 1e12}}`, wire.CodeInvalidValue},
	"impossible request":  {`{"template": "hello", "resource_requirements": {"gpu_count": 4}}`, wire.CodeImpossibleRequest},
	"oversized payload":   {`{"template": "hello", "payload": "` + strings.Repeat("x", 70<<10) + `"}`, wire.CodePayloadTooLarge},
	"not an object":       {`[1, 2, 3]`, wire.CodeWrongType},
}

// TestBadInputIsRejectedAndOthersRun posts every kind of bad request plus
// good ones, and checks that each bad one gets a structured error on its
// job entry and in the dead-letter stream while the good ones still run.
func TestBadInputIsRejectedAndOthersRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	cfg := writeConfig(t, testConfig(board, ""))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	st := storeFor(t, rdb, board)
	ctx := t.Context()

	post := func(data string) string {
		if json.Valid([]byte(data)) {
			e := blackboard.NewEntry(blackboard.RequestTopic, "reasoning", json.RawMessage(data))
			id, err := st.Post(ctx, e)
			if err != nil {
				t.Fatalf("post %q: %v", data[:min(len(data), 40)], err)
			}
			return id
		}
		// The Go blackboard refuses invalid JSON, so write what a broken
		// client would: the hash and an intake message with raw bytes.
		id := blackboard.NewID()
		k := st.Keys()
		ts := fmt.Sprintf("%.6f", float64(time.Now().UnixNano())/1e9)
		if err := rdb.HSet(ctx, k.Entry(id), "v", "1", "entry_id", id, "topic", blackboard.RequestTopic,
			"source_module", "reasoning", "status", "active", "timestamp", ts, "confidence", "1",
			"priority", "1", "data", data, "metadata", "{}", "tags", "[]").Err(); err != nil {
			t.Fatal(err)
		}
		entry := `{"entry_id":"` + id + `","topic":"compute.request","source_module":"reasoning","timestamp":` + ts +
			`,"confidence":1,"priority":1,"status":"active","ttl_seconds":null,"tags":[],"parent_id":null,"metadata":{},"data":` + data + `}`
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Inbox(4), Values: []any{"v", "1", "entry_id", id,
			"topic", blackboard.RequestTopic, "priority", "1", "timestamp", ts, "entry", entry}}).Err(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	good1 := post(`{"template": "echo", "arguments": ["before"]}`)
	ids := map[string]string{}
	for name, tc := range badRequests {
		ids[name] = post(tc.data)
	}
	good2 := post(`{"template": "echo", "arguments": ["after"]}`)

	waitJob := func(reqID string) wire.JobData {
		var jd wire.JobData
		eventually(t, 60*time.Second, "job of "+reqID, func() bool {
			e, err := st.Get(ctx, wire.JobID(reqID))
			if err != nil {
				return false
			}
			jd = wire.JobData{}
			return json.Unmarshal(e.Data, &jd) == nil && jd.Status.Terminal()
		})
		return jd
	}
	for _, id := range []string{good1, good2} {
		if jd := waitJob(id); jd.Status != wire.JobSucceeded {
			t.Errorf("good request %s: %s (%+v)", id, jd.Status, jd.Error)
		}
	}
	for name, tc := range badRequests {
		jd := waitJob(ids[name])
		if jd.Status != wire.JobRejected || jd.ReasonCode != tc.wantCode || jd.Error == nil || jd.Error.Message == "" {
			t.Errorf("%s: job = status %s reason %q error %+v; want rejected %s with a message", name, jd.Status, jd.ReasonCode, jd.Error, tc.wantCode)
		}
		// Read the raw hash: a malformed entry cannot be decoded.
		status, err := rdb.HGet(ctx, st.Keys().Entry(ids[name]), "status").Result()
		if err != nil || status != string(blackboard.StatusConsumed) {
			t.Errorf("%s: request entry status %q, %v; want consumed", name, status, err)
		}
	}
	// Every bad request is in the dead-letter stream with its code.
	msgs, err := rdb.XRange(ctx, st.Keys().DLQ(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	byEntry := map[string]map[string]any{}
	for _, m := range msgs {
		byEntry[fmt.Sprint(m.Values["entry_id"])] = m.Values
	}
	for name, tc := range badRequests {
		dl, ok := byEntry[ids[name]]
		if !ok {
			t.Errorf("%s: no dead letter", name)
			continue
		}
		if dl["code"] != string(tc.wantCode) {
			t.Errorf("%s: dead letter code %v, want %s", name, dl["code"], tc.wantCode)
		}
	}
}

// TestRestartDoesNotRunTwice stops the adapter while requests are queued
// and running, starts it again, and checks that every request ran once.
func TestRestartDoesNotRunTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	dir := jobDir(t)
	countFile := filepath.Join(dir, "runs")
	extra := fmt.Sprintf(`  count:
    command: [/bin/sh, -c, 'echo "$COMPUTEBOARD_REQUEST_ID" >> "$COUNT_FILE"; sleep 0.3']
    env: {COUNT_FILE: %q}
node:
  name: restart-node
  cpu_cores: 4
`, countFile)
	body := strings.Replace(testConfig(board, ""), "allowlist:", extra+"allowlist:", 1)
	cfg := writeConfig(t, body)
	stop, _ := runAdapter(t, "--config", cfg, "--redis", srv.URL())
	st := storeFor(t, rdb, board)
	const n = 20
	var ids []string
	for range n {
		e := blackboard.NewEntry(blackboard.RequestTopic, "planner", json.RawMessage(`{"template":"count"}`))
		id, err := st.Post(t.Context(), e)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Let some start, then stop the adapter mid-stream.
	eventually(t, 30*time.Second, "first runs", func() bool {
		b, _ := os.ReadFile(countFile)
		return strings.Count(string(b), "\n") >= 3
	})
	stop()
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	for _, id := range ids {
		eventually(t, 60*time.Second, "job of "+id, func() bool {
			e, err := st.Get(t.Context(), wire.JobID(id))
			var jd wire.JobData
			return err == nil && json.Unmarshal(e.Data, &jd) == nil && jd.Status.Terminal()
		})
	}
	b, _ := os.ReadFile(countFile)
	runs := map[string]int{}
	for _, line := range strings.Fields(string(b)) {
		runs[line]++
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("request %s ran %d times, want 1", id, runs[id])
		}
	}
}
