package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// docBlocks returns the fenced blocks of a repository file that follow an
// "<!-- MARKER: KIND -->" line, by kind.
func docBlocks(t *testing.T, file, marker string) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- " + marker + ": ([a-z_-]+) -->\n```[a-z]*\n(.*?)\n```")
	out := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = append(out[m[1]], m[2])
	}
	return out
}

// TestReadmeRedisCliRecipe runs the README's redis-cli recipe, as written
// but for the server's address and the board, against a real Redis and
// against the embedded blackboard (what the README runs it on): the job
// must succeed, and the request entry must appear in a topic query and a
// source query, as a real client's does.
func TestReadmeRedisCliRecipe(t *testing.T) {
	t.Parallel()
	recipes := docBlocks(t, "README.md", "recipe")["redis-cli"]
	if len(recipes) != 1 {
		t.Fatalf("README.md has %d redis-cli recipes, want 1", len(recipes))
	}
	recipe := recipes[0]
	if !strings.Contains(recipe, "redis-cli -p 6380 ") || !strings.Contains(recipe, "{default}") {
		t.Fatalf("the recipe no longer names `redis-cli -p 6380` and board {default}: update this test\n%s", recipe)
	}
	run := func(t *testing.T, rdb redis.UniversalClient, board, cli string) {
		script := strings.ReplaceAll(recipe, "redis-cli -p 6380 ", cli+" ")
		script = strings.ReplaceAll(script, "{default}", "{"+board+"}")
		out, err := exec.Command("bash", "-c", script+"\necho \"ID=$ID\"").CombinedOutput()
		if err != nil {
			t.Fatalf("recipe: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`(?m)^ID=(shell:[0-9a-f]{32})$`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("recipe printed no request id:\n%s", out)
		}
		id := string(m[1])
		st := storeFor(t, rdb, board)
		waitStatus(t, st, id, wire.JobSucceeded)

		ctx := context.Background()
		// (Query, not GetByTopic: the request is consumed by now.)
		byTopic, err := st.Query(ctx, blackboard.Query{Topics: []string{blackboard.RequestTopic}})
		if err != nil {
			t.Fatal(err)
		}
		bySource, err := st.Query(ctx, blackboard.Query{SourceModules: []string{"shell"}})
		if err != nil {
			t.Fatal(err)
		}
		has := func(es []blackboard.Entry) bool {
			return slices.ContainsFunc(es, func(e blackboard.Entry) bool { return e.ID == id })
		}
		if !has(byTopic) || !has(bySource) {
			t.Errorf("request %s: in the topic query %v, in the source query %v; want both", id, has(byTopic), has(bySource))
		}
	}

	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Shared(t)
		rdb, board := redistest.New(t)
		runAdapter(t, "--config", writeConfig(t, testConfig(board, "")), "--redis", srv.URL())
		run(t, rdb, board, "redis-cli -s "+srv.SocketPath())
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		_, out := runAdapter(t, "--config", writeConfig(t, testConfig("default", "")), "--embedded", "127.0.0.1:0")
		re := regexp.MustCompile(`redis://127\.0\.0\.1:(\d+)`)
		var m []string
		eventually(t, 10*time.Second, "the embedded address", func() bool {
			m = re.FindStringSubmatch(out.String())
			return m != nil
		})
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + m[1]})
		t.Cleanup(func() { rdb.Close() })
		run(t, rdb, "default", "redis-cli -p "+m[1])
	})
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, data []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

// TestDocExamplesMatchTheAdapter holds docs/wire-format.md's examples of
// what the adapter writes to real entries: the job data's keys and its
// stdout_path layout, and the telemetry data's keys.
func TestDocExamplesMatchTheAdapter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ex := docBlocks(t, "docs/wire-format.md", "example")
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	cfg := writeConfig(t, testConfig(board, ""))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	st := storeFor(t, rdb, board)
	id := postData(t, st, "reasoning", `{"template":"hello"}`, nil)
	waitStatus(t, st, id, wire.JobSucceeded)
	je, err := st.Get(ctx, wire.JobID(id))
	if err != nil {
		t.Fatal(err)
	}

	var docJob []byte
	for _, data := range ex["job"] {
		var j struct{ Status string }
		if json.Unmarshal([]byte(data), &j) == nil && j.Status == string(wire.JobSucceeded) {
			docJob = []byte(data)
		}
	}
	if docJob == nil {
		t.Fatal("docs/wire-format.md has no succeeded job example")
	}
	if diff := cmp.Diff(keysOf(t, docJob), keysOf(t, je.Data)); diff != "" {
		t.Errorf("job data keys (-doc +adapter):\n%s", diff)
	}

	// stdout_path: the doc's layout under its work_dir, for this job.
	var docPaths, gotPaths struct {
		JobID      string `json:"job_id"`
		StdoutPath string `json:"stdout_path"`
		StderrPath string `json:"stderr_path"`
	}
	if err := json.Unmarshal(docJob, &docPaths); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(je.Data, &gotPaths); err != nil {
		t.Fatal(err)
	}
	workDir := filepath.Join(filepath.Dir(cfg), "jobs")
	for _, p := range []struct{ doc, got string }{{docPaths.StdoutPath, gotPaths.StdoutPath}, {docPaths.StderrPath, gotPaths.StderrPath}} {
		_, rest, ok := strings.Cut(p.doc, docPaths.JobID)
		if !ok {
			t.Fatalf("doc path %q does not contain its job id", p.doc)
		}
		if want := filepath.Join(workDir, gotPaths.JobID+rest); p.got != want {
			t.Errorf("adapter wrote %q; the doc's example (%q) says %q", p.got, p.doc, want)
		}
	}

	// Telemetry: the keys of the latest entry of each topic.
	for topic, kind := range map[string]string{wire.TopicMetrics: "metrics", wire.TopicJobStatus: "job_status"} {
		var es []blackboard.Entry
		eventually(t, 30*time.Second, topic+" entries", func() bool {
			es, err = st.GetByTopic(ctx, topic)
			return err == nil && len(es) > 0
		})
		if len(ex[kind]) != 1 {
			t.Fatalf("docs/wire-format.md has %d %s examples, want 1", len(ex[kind]), kind)
		}
		if diff := cmp.Diff(keysOf(t, []byte(ex[kind][0])), keysOf(t, es[len(es)-1].Data)); diff != "" {
			t.Errorf("%s data keys (-doc +adapter):\n%s", topic, diff)
		}
	}
}
