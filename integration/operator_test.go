package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/adapter"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// cli runs one adapter subcommand in-process.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out syncBuffer
	code := adapter.Main(t.Context(), args, func(string) string { return "" }, &out, &out)
	return out.String(), code
}

// operatorAdapter starts an adapter with operator token token, its HTTP API
// on, and a one-core node whose scheduler keeps at most one job pending in
// the engine; it returns once this adapter is the scheduler (its figures
// are on /metrics), with the Redis server, the board's store and name, and
// the API's address.
func operatorAdapter(t *testing.T, token string) (srv *redistest.Server, st *blackboard.Store, board, api string) {
	t.Helper()
	srv = redistest.Shared(t)
	rdb, board := redistest.New(t)
	st = storeFor(t, rdb, board)
	cfg := smallNodeConfig(t, board, jobDir(t)+"/runs", "operator_token: "+token+"\n")
	cfg = writeConfig(t, strings.Replace(readFile(t, cfg), "scheduler:\n  interval: 50ms\n", "scheduler:\n  interval: 50ms\n  max_pending: 1\n", 1))
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api = apiURL(t, out)
	waitScheduler(t, api)
	return srv, st, board, api
}

// waitScheduler waits until the adapter at api is the scheduler: its
// figures are on /metrics once it is elected.
func waitScheduler(t *testing.T, api string) {
	t.Helper()
	eventually(t, 45*time.Second, "the scheduler's metrics", func() bool {
		resp, err := http.Get(api + "/metrics")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), "computeboard_broker_inbox_capacity")
	})
}

// TestOperatorCommands drives `adapter inbox …` against a running adapter:
// public reads work without a token; reads that show request payloads
// (one held request, the dead letters) and writes need it.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	const token = "op-s3cret"
	srv, st, board, api := operatorAdapter(t, token)
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(api + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "computeboard_broker_inbox_capacity") {
			t.Errorf("/metrics lacks the broker's figures:\n%.500s", body)
		}
	}

	// One job holds the node, one waits in the engine (critic's share of
	// max_pending, all of it while critic is the only account waiting), the
	// rest wait in the inbox.
	busy := postData(t, st, "planner", `{"template":"sleep","arguments":["60"]}`, nil)
	waitStatus(t, st, busy, wire.JobRunning)
	engineHeld := postData(t, st, "critic", `{"template":"count"}`, nil)
	waitStatus(t, st, engineHeld, wire.JobQueued)
	a := postData(t, st, "critic", `{"template":"count","priority":3}`, nil)
	b := postData(t, st, "critic", `{"template":"count","priority":3}`, nil)
	bad := postData(t, st, "critic", `{"template":"no-such-template"}`, nil)
	waitStatus(t, st, bad, wire.JobRejected)

	var list struct {
		Items []struct {
			EntryID string `json:"entry_id"`
			Module  string `json:"module"`
		} `json:"items"`
	}
	eventually(t, 20*time.Second, "two requests held in the inbox", func() bool {
		o, code := cli(t, "inbox", "list", "--api", api, "--module", "critic")
		return code == 0 && json.Unmarshal([]byte(o), &list) == nil && len(list.Items) == 2
	})
	// `adapter top --once` shows what the API says: the node with its one
	// job, one job pending in the engine, two requests held, one rejected.
	if o, code := cli(t, "top", "--once", "--api", api); code != 0 ||
		!regexp.MustCompile(`(?m)^small\s+local\s+ok\s+1\.0/1\.0\s+\S+\s+0/0\s+1\s*$`).MatchString(o) ||
		!strings.Contains(o, "pending 1  running 1") || !strings.Contains(o, "held 2 of") ||
		!strings.Contains(o, "rejected 1") || !strings.Contains(o, "1 nodes, 1 healthy") {
		t.Errorf("top --once: exit %d\n%s", code, o)
	}
	if o, code := cli(t, "inbox", "show", a, "--api", api, "--token", token); code != 0 || !strings.Contains(o, a) {
		t.Fatalf("inbox show: exit %d\n%s", code, o)
	}
	if o, code := cli(t, "inbox", "stats", "--api", api); code != 0 || !strings.Contains(o, `"by_module"`) {
		t.Fatalf("inbox stats: exit %d\n%s", code, o)
	}

	// Writes without the token are refused and change nothing.
	if o, code := cli(t, "inbox", "drop", a, "--api", api); code == 0 || !strings.Contains(o, "401") {
		t.Fatalf("drop without a token: exit %d\n%s", code, o)
	}
	if o, code := cli(t, "inbox", "drop", a, "--api", api, "--token", "wrong"); code == 0 {
		t.Fatalf("drop with a wrong token succeeded:\n%s", o)
	}
	if o, code := cli(t, "inbox", "drop", a, "--api", api, "--token", token); code != 0 {
		t.Fatalf("drop with the token: exit %d\n%s", code, o)
	}
	jd := waitStatus(t, st, a, wire.JobCancelled)
	if jd.Error == nil || jd.Error.Code != "dropped" || !strings.Contains(jd.Error.Message, "operator") {
		t.Errorf("dropped request's job entry: %+v", jd)
	}

	// The dead-letter stream lists the bad request and the dropped one.
	o, code := cli(t, "inbox", "dlq", "list", "--api", api, "--token", token)
	if code != 0 || !strings.Contains(o, bad) || !strings.Contains(o, a) {
		t.Fatalf("dlq list: exit %d\n%s", code, o)
	}
	var dl struct {
		DeadLetters []struct {
			ID      string `json:"id"`
			EntryID string `json:"entry_id"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(o), &dl); err != nil {
		t.Fatalf("dlq list is not JSON: %v\n%s", err, o)
	}
	var dlqID string
	for _, d := range dl.DeadLetters {
		if d.EntryID == a {
			dlqID = d.ID
		}
	}
	// Replaying the dropped request needs the token, then runs it.
	if o, code := cli(t, "inbox", "dlq", "replay", dlqID, "--api", api); code == 0 {
		t.Fatalf("replay without a token succeeded:\n%s", o)
	}
	if o, code := cli(t, "inbox", "dlq", "replay", dlqID, "--api", api, "--token", token); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, o)
	}
	if o, code := cli(t, "jobs", "list", "--redis", srv.URL(), "--board", board); code != 0 || !strings.Contains(o, wire.JobID(busy)) {
		t.Fatalf("jobs list: exit %d\n%s", code, o)
	}
	// Free the node: everything left runs.
	if err := st.Retract(t.Context(), busy); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{engineHeld, a, b} {
		waitStatus(t, st, id, wire.JobSucceeded)
	}
	// `inbox dlq replay --all` goes in batches, saying how far it got; the
	// refused request is refused again (and not replayed twice).
	o, code = cli(t, "inbox", "dlq", "replay", "--all", "--api", api, "--token", token)
	if code != 0 || !regexp.MustCompile(`(?m)^replayed [0-9]+; looked at [1-9][0-9]* of the [1-9][0-9]* dead letters there were$`).MatchString(o) ||
		!regexp.MustCompile(`(?m)^\{"replayed": [0-9]+\}$`).MatchString(o) {
		t.Errorf("dlq replay --all: exit %d\n%s", code, o)
	}
	// `post --wait` says how the job moves, then prints its entry.
	o, code = cli(t, "post", "--redis", srv.URL(), "--board", board, "--template", "count", "--wait", "--timeout", "60s")
	if code != 0 || !regexp.MustCompile(`(?m)^ *[0-9]+\.[0-9]{2}s  succeeded on small$`).MatchString(o) ||
		!strings.Contains(o, `"status": "succeeded"`) {
		t.Errorf("post --wait: exit %d\n%s", code, o)
	}
}
