package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// chromiumPath is Debian's Chromium, which `make deps` installs.
const chromiumPath = "/usr/bin/chromium"

// uiArtifacts is where the dashboard test saves its screenshots:
// $COMPUTEBOARD_TEST_ARTIFACTS when set, else a temporary directory.
func uiArtifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("COMPUTEBOARD_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "ui")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts a headless Chromium with a fresh profile and a 1280×800
// window, and returns a chromedp context on one tab of it.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing (%v): the /ui dashboard test drives a headless Chromium; "+
			"install it with `make deps` (make test installs it), or `apt-get install -y chromium`", chromiumPath, err)
	}
	var chromeOut syncBuffer
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(&chromeOut),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium output:\n%.4000s", chromeOut.String())
		}
	})
	// The first run starts the browser (no timeout on it: that would stop
	// the browser with it).
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("starting %s: %v\n%s", chromiumPath, err, chromeOut.String())
	}
	return ctx
}

// uiDo runs steps with a time limit.
func uiDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// uiText polls the page until the element sel holds want (the page polls
// the API every 2 s), and fails with what it shows otherwise.
func uiText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	uiPoll(t, ctx, sel, fmt.Sprintf("%q", want), func(got string) bool { return strings.TrimSpace(got) == want })
}

// uiContains polls the page until the element sel's text contains want.
func uiContains(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	uiPoll(t, ctx, sel, fmt.Sprintf("it to contain %q", want), func(got string) bool { return strings.Contains(got, want) })
}

// uiPoll polls the text of element sel until ok says it is what is wanted
// (want, for the failure), for up to 45 s.
func uiPoll(t *testing.T, ctx context.Context, sel, want string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, 15*time.Second)
		got, err := chromedp.Run(c, chromedp.TextContent(chromedp.CSS(sel)))
		cancel()
		if err == nil && ok(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page shows %q in %s (err %v), want %s", strings.TrimSpace(got), sel, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// screenshot saves the viewport (1280×800) as dir/name.png.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// getAPI GETs path from the adapter's API (with the token when given)
// and decodes the JSON answer into v.
func getAPI(t *testing.T, api, path, token string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, api+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

type uiDeadLetter struct {
	ID      string `json:"id"`
	EntryID string `json:"entry_id"`
	Code    string `json:"code"`
}

type uiDeadLetters struct {
	DeadLetters []uiDeadLetter `json:"dead_letters"`
}

// TestUIDashboard drives the operators' dashboard at /ui/ in a headless
// Chromium against a real adapter on real Redis: each view shows what the
// API says (inbox depth and dead letters, a job's status and node, a
// pending job's explanation, the nodes, the fair-share accounts), a dead
// letter is replayed through the page with the token typed into it, and
// each view is saved as a 1280×800 screenshot. It does not run in
// parallel: a browser next to every other test's adapters would make its
// waits for the page a matter of luck.
func TestUIDashboard(t *testing.T) {
	ctx := browser(t) // first: fails at once when Chromium is missing

	const token = "ui-s3cret"
	_, st, _, api := operatorAdapter(t, token)

	// One job holds the one-core node, one waits in the engine (so it has
	// an explanation), two wait in the inbox, one is refused (a dead
	// letter).
	busy := postData(t, st, "planner", `{"template":"sleep","arguments":["60"]}`, nil)
	waitStatus(t, st, busy, wire.JobRunning)
	pending := postData(t, st, "critic", `{"template":"count"}`, nil)
	waitStatus(t, st, pending, wire.JobQueued)
	postData(t, st, "critic", `{"template":"count","priority":3}`, nil)
	postData(t, st, "critic", `{"template":"count","priority":3}`, nil)
	bad := postData(t, st, "critic", `{"template":"no-such-template"}`, nil)
	waitStatus(t, st, bad, wire.JobRejected)
	busyJob, pendingJob := wire.JobID(busy), wire.JobID(pending)

	var stats struct {
		Held        int `json:"held"`
		DeadLetters int `json:"dead_letters"`
	}
	eventually(t, 60*time.Second, "two requests held and a dead letter", func() bool {
		getAPI(t, api, "/api/v1/inbox/stats", "", &stats)
		return stats.Held == 2 && stats.DeadLetters >= 1
	})
	var dls uiDeadLetters
	getAPI(t, api, "/api/v1/inbox/dlq", token, &dls)
	i := slices.IndexFunc(dls.DeadLetters, func(d uiDeadLetter) bool { return d.EntryID == bad })
	if i < 0 {
		t.Fatalf("the refused request %s is not in the dead letters: %+v", bad, dls)
	}
	dl := dls.DeadLetters[i]
	dlqID := dl.ID
	type explained struct {
		Position int    `json:"position"`
		Reason   string `json:"reason"`
	}
	var ex explained
	eventually(t, 60*time.Second, "the pending job's explanation", func() bool {
		resp, err := http.Get(api + "/api/v1/jobs/" + pendingJob + "/explain")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&ex) == nil
	})

	dir := uiArtifacts(t)

	// GET /ui redirects to the page; the page loads only from the adapter.
	uiDo(t, ctx, "load /ui", chromedp.Navigate(api+"/ui"), chromedp.WaitVisible(chromedp.CSS("#view-overview")))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || loc != api+"/ui/" {
		t.Errorf("GET /ui landed on %q (%v), want %s/ui/", loc, err, api)
	}

	// Overview: the figures and the charts, once a few polls are in.
	var sched struct {
		Nodes   int                `json:"nodes"`
		Healthy int                `json:"healthy"`
		Jobs    wire.JobStatusData `json:"jobs"`
	}
	getAPI(t, api, "/api/v1/scheduler", "", &sched)
	uiText(t, ctx, "#ov-nodes", fmt.Sprintf("%d (%d)", sched.Nodes, sched.Healthy))
	uiText(t, ctx, "#ov-depth", strconv.Itoa(stats.Held))
	uiText(t, ctx, "#ov-running", "1")
	eventually(t, 60*time.Second, "the charts to draw a line", func() bool {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart-queue polyline").length`))
		polls, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.body.dataset.polls || 0)`))
		return err == nil && n > 0 && polls >= 3
	})
	screenshot(t, ctx, dir, "overview")

	// Keyboard: Tab moves from one view link to the next, with a visible
	// focus ring; Enter on the inbox link opens the inbox.
	uiDo(t, ctx, "tab between the view links",
		chromedp.Focus(chromedp.CSS(`#tabs a[data-view="overview"]`)), chromedp.KeyEvent(kb.Tab))
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`document.activeElement.dataset.view + " " + getComputedStyle(document.activeElement).outlineStyle`)); err != nil || got != "inbox solid" {
		t.Errorf("after Tab the focus is on %q (view, outline style; %v), want the inbox link with a solid outline", got, err)
	}
	// Inbox, reached with the keyboard: the tab link, then Enter.
	uiDo(t, ctx, "open the inbox with the keyboard",
		chromedp.Focus(chromedp.CSS(`#tabs a[data-view="inbox"]`)), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#view-inbox")))
	if cur, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#tabs a[aria-current="page"]').dataset.view`)); err != nil || cur != "inbox" {
		t.Errorf("the current tab is %q (%v), want inbox", cur, err)
	}
	uiText(t, ctx, "#inbox-depth", strconv.Itoa(stats.Held))
	uiText(t, ctx, "#dlq-count", strconv.Itoa(stats.DeadLetters))
	uiText(t, ctx, `#inbox-by-priority td[data-priority="3"]`, "2")
	uiText(t, ctx, `#inbox-by-priority td[data-priority="0"]`, "0")
	uiText(t, ctx, `#inbox-by-module tr[data-module="critic"] td:last-child`, "2")
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#inbox-items tbody tr[data-entry-id]").length`)); err != nil || n != 2 {
		t.Errorf("the page lists %d held requests (%v), want 2", n, err)
	}
	// Listing dead letters needs the token: the page says so, then lists
	// them once the token is entered.
	uiText(t, ctx, "#dlq-note", "Listing dead letters shows request payloads: enter the operator token above to see them.")
	uiDo(t, ctx, "enter the token",
		chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#token-save")))
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("computeboard.operatorToken")`)); err != nil || got != token {
		t.Errorf("sessionStorage holds %q (%v), want the token", got, err)
	}
	replaySel := fmt.Sprintf(`#dlq button[data-replay=%q]`, dlqID)
	uiDo(t, ctx, "the dead letter's replay button", chromedp.WaitVisible(chromedp.CSS(replaySel)))
	uiText(t, ctx, fmt.Sprintf(`#dlq tr[data-dlq-id=%q] td:nth-child(3)`, dlqID), dl.Code)
	screenshot(t, ctx, dir, "inbox")

	// Replay it through the page; the API no longer lists it.
	uiDo(t, ctx, "replay the dead letter", chromedp.Click(chromedp.CSS(replaySel)))
	uiContains(t, ctx, "#flash", "Replayed dead letter "+dlqID)
	eventually(t, 45*time.Second, "the dead letter to leave the stream", func() bool {
		var now uiDeadLetters
		getAPI(t, api, "/api/v1/inbox/dlq", token, &now)
		return !slices.ContainsFunc(now.DeadLetters, func(d uiDeadLetter) bool { return d.ID == dlqID })
	})
	uiDo(t, ctx, "the replayed dead letter leaves the page", chromedp.WaitNotPresent(chromedp.CSS(replaySel)))

	// Drop a held request through the page: the first press arms the
	// button, the second drops it.
	var items struct {
		Items []struct {
			EntryID string `json:"entry_id"`
		} `json:"items"`
	}
	getAPI(t, api, "/api/v1/inbox/items", "", &items)
	if len(items.Items) != 2 {
		t.Fatalf("the API lists %d held requests, want 2", len(items.Items))
	}
	dropSel := fmt.Sprintf(`#inbox-items button[data-drop=%q]`, items.Items[0].EntryID)
	uiDo(t, ctx, "arm the drop button", chromedp.Click(chromedp.CSS(dropSel)))
	uiText(t, ctx, dropSel, "Confirm drop")
	uiDo(t, ctx, "drop the held request", chromedp.Click(chromedp.CSS(dropSel)))
	uiContains(t, ctx, "#flash", "Dropped request "+items.Items[0].EntryID)
	eventually(t, 45*time.Second, "the dropped request to leave the inbox", func() bool {
		getAPI(t, api, "/api/v1/inbox/stats", "", &stats)
		return stats.Held == 1
	})
	uiText(t, ctx, "#inbox-depth", "1")

	// Jobs: a job's status and node as the API has them, and the pending
	// job's explanation.
	uiDo(t, ctx, "open the jobs", chromedp.Click(chromedp.CSS(`#tabs a[data-view="jobs"]`)),
		chromedp.WaitVisible(chromedp.CSS("#view-jobs")))
	var rec struct {
		Status wire.JobStatus `json:"status"`
		Node   string         `json:"node"`
	}
	getAPI(t, api, "/api/v1/jobs/"+busyJob, token, &rec)
	uiText(t, ctx, fmt.Sprintf(`#jobs tr[data-job-id=%q] td.status`, busyJob), string(rec.Status))
	uiText(t, ctx, fmt.Sprintf(`#jobs tr[data-job-id=%q] td.node`, busyJob), rec.Node)
	uiText(t, ctx, fmt.Sprintf(`#jobs tr[data-job-id=%q] td.provider`, busyJob), "local")
	uiText(t, ctx, fmt.Sprintf(`#jobs tr[data-job-id=%q] td.status`, pendingJob), string(wire.JobQueued))
	uiDo(t, ctx, "explain the pending job", chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-explain=%q]`, pendingJob))),
		chromedp.WaitVisible(chromedp.CSS("#explain-body")))
	getAPI(t, api, "/api/v1/jobs/"+pendingJob+"/explain", "", &ex)
	uiText(t, ctx, "#explain-job", pendingJob)
	uiText(t, ctx, "#explain-position", strconv.Itoa(ex.Position))
	if ex.Reason != "" {
		uiText(t, ctx, "#explain-reason", ex.Reason)
	}
	screenshot(t, ctx, dir, "job-explanation")

	// Nodes.
	var nodes struct {
		Nodes []struct {
			Name string `json:"name"`
			Jobs int    `json:"jobs"`
		} `json:"nodes"`
	}
	getAPI(t, api, "/api/v1/nodes", "", &nodes)
	if len(nodes.Nodes) == 0 {
		t.Fatal("the API lists no nodes")
	}
	uiDo(t, ctx, "open the nodes", chromedp.Click(chromedp.CSS(`#tabs a[data-view="nodes"]`)),
		chromedp.WaitVisible(chromedp.CSS("#view-nodes")))
	uiText(t, ctx, "#node-count", strconv.Itoa(len(nodes.Nodes)))
	n0 := nodes.Nodes[0]
	uiText(t, ctx, fmt.Sprintf(`#nodes tr[data-node=%q] td.jobs`, n0.Name), strconv.Itoa(n0.Jobs))
	uiContains(t, ctx, fmt.Sprintf(`#nodes tr[data-node=%q] td[data-dim="cpu"]`, n0.Name), "cores")
	screenshot(t, ctx, dir, "nodes")

	// Fair share: the tree the API gives, each account's target, usage
	// share and factor, with the jobs it runs and has pending.
	var fs struct {
		Accounts []struct {
			Account string  `json:"account"`
			Target  float64 `json:"target_share"`
			Factor  float64 `json:"factor"`
			Running int     `json:"running_jobs"`
			Pending int     `json:"pending_jobs"`
		} `json:"accounts"`
	}
	getAPI(t, api, "/api/v1/fairshare", "", &fs)
	if len(fs.Accounts) < 2 {
		t.Fatalf("the API's fair-share tree: %+v", fs)
	}
	uiDo(t, ctx, "open the fair share", chromedp.Click(chromedp.CSS(`#tabs a[data-view="fairshare"]`)),
		chromedp.WaitVisible(chromedp.CSS("#view-fairshare")))
	uiText(t, ctx, `#fairshare tr[data-account="planner"] td:nth-child(6)`, "1")
	uiText(t, ctx, `#fairshare tr[data-account="critic"] td:nth-child(7)`, "1")
	for _, a := range fs.Accounts {
		uiText(t, ctx, fmt.Sprintf(`#fairshare tr[data-account=%q] td:nth-child(3)`, a.Account),
			fmt.Sprintf("%d%%", int(math.Round(100*a.Target))))
	}
	screenshot(t, ctx, dir, "fairshare")

	// The list the Jobs view reads, filtered; the page's headers.
	var queued struct {
		Jobs []struct {
			JobID string `json:"job_id"`
		} `json:"jobs"`
		Total int `json:"total"`
	}
	getAPI(t, api, "/api/v1/jobs?status=queued", "", &queued)
	if queued.Total != 1 || len(queued.Jobs) != 1 || queued.Jobs[0].JobID != pendingJob {
		t.Errorf("GET /api/v1/jobs?status=queued: %+v, want just %s", queued, pendingJob)
	}
	for path, want := range map[string]int{"/api/v1/jobs?status=succeeded": 400, "/api/v1/jobs?limit=1001": 400, "/ui/app.js": 200, "/ui/nope.js": 404} {
		resp, err := http.Get(api + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); strings.HasPrefix(path, "/ui/") && !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}

	// Nothing went wrong in the page, and its Content-Security-Policy
	// (everything from the adapter, no inline code or style) refused
	// nothing.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.body.dataset.cspViolations || 0)`)); err != nil || n != 0 {
		t.Errorf("the Content-Security-Policy refused %d things (%v)", n, err)
	}
	if conn, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#conn"))); err != nil || !strings.HasPrefix(conn, "updated ") {
		t.Errorf("the page's connection line: %q (%v)", conn, err)
	}
}

// uiSeconds reads a duration as the page writes it (fmtAge: "4.2 s",
// "1.5 min", "2.0 h", "1.0 d") back into seconds; ok is false for
// anything else.
func uiSeconds(s string) (float64, bool) {
	num, unit, ok := strings.Cut(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), " ago")), " ")
	v, err := strconv.ParseFloat(num, 64)
	mult := map[string]float64{"s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
	if !ok || err != nil || mult == 0 {
		return 0, false
	}
	return v * mult, true
}

// TestUIPreemptions drives the dashboard's Preemptions view against a
// real adapter whose scheduler evicts real jobs: two low-priority jobs
// (one evicted in mode cancel, one in requeue) fill a 2-core node and two
// CRITICAL requests evict them one after the other. The view starts
// empty, the tab counts the first eviction while another view shows, the
// second appears live in the open view, every row shows what GET
// /api/v1/preemptions says (victim, account, preemptor, policy, mode,
// node, lost work), the figures add the rows up, and a victim's link
// opens the job in the Jobs view, focused, with the explanation naming
// its preemptor. The view is saved as preemptions.png.
func TestUIPreemptions(t *testing.T) {
	ctx := browser(t)

	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := writeConfig(t, fmt.Sprintf(`board: %s
work_dir: jobs
templates:
  low:
    command: [sleep, "60"]
  lowcancel:
    command: [sleep, "60"]
    preempt_mode: cancel
  crit:
    command: [sleep, "30"]
node:
  name: ui-preempt
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
`, board))
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, out)
	waitScheduler(t, api)
	dir := uiArtifacts(t)

	// Two low-priority jobs fill the node's two cores.
	lowCancel := postData(t, st, "batch", `{"template":"lowcancel","priority":1,"account":"batch"}`, nil)
	lowRequeue := postData(t, st, "etl", `{"template":"low","priority":2,"account":"etl"}`, nil)
	waitStatus(t, st, lowCancel, wire.JobRunning)
	waitStatus(t, st, lowRequeue, wire.JobRunning)
	critical := func() string {
		t.Helper()
		e := blackboard.NewEntry(blackboard.RequestTopic, "pager", json.RawMessage(`{"template":"crit"}`))
		e.Priority = blackboard.Priority(wire.EntryPriorityCritical)
		id, err := st.Post(t.Context(), e)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	preemptions := func(n int) preemptionList {
		t.Helper()
		var l preemptionList
		eventually(t, 60*time.Second, fmt.Sprintf("%d preemptions in GET /api/v1/preemptions", n), func() bool {
			getAPI(t, api, "/api/v1/preemptions", "", &l)
			return len(l.Preemptions) >= n
		})
		if len(l.Preemptions) != n {
			t.Fatalf("GET /api/v1/preemptions lists %d, want %d: %+v", len(l.Preemptions), n, l)
		}
		return l
	}
	rows := func() int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#preemptions tbody tr[data-entry-id]").length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Nothing evicted yet: the view says so.
	uiDo(t, ctx, "load the preemptions view", chromedp.Navigate(api+"/ui/#preemptions"),
		chromedp.WaitVisible(chromedp.CSS("#view-preemptions")))
	uiContains(t, ctx, "#preemptions tbody tr.empty", "No preemption in the last hour")
	uiText(t, ctx, "#preempt-count", "0")

	// The first eviction, while the overview shows: the tab counts it.
	uiDo(t, ctx, "open the overview", chromedp.Click(chromedp.CSS(`#tabs a[data-view="overview"]`)),
		chromedp.WaitVisible(chromedp.CSS("#view-overview")))
	crit1 := critical()
	first := preemptions(1).Preemptions[0]
	if first.Victim != wire.JobID(lowCancel) || first.Preemptor != wire.JobID(crit1) || first.Mode != "cancel" {
		t.Fatalf("the first eviction: %+v, want %s evicted (cancel) for %s", first, wire.JobID(lowCancel), wire.JobID(crit1))
	}
	uiText(t, ctx, "#preempt-badge", "1 new")
	// Keyboard: the tab link and Enter open the view; the count clears.
	uiDo(t, ctx, "open the preemptions with the keyboard",
		chromedp.Focus(chromedp.CSS(`#tabs a[data-view="preemptions"]`)), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#view-preemptions")))
	if disp, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("#preempt-badge")).display`)); err != nil || disp != "none" {
		t.Errorf("the tab's count still shows in the view (display %q, %v)", disp, err)
	}
	uiText(t, ctx, "#preempt-count", "1")

	// The second eviction appears in the open view, newest first and
	// highlighted as new.
	waitStatus(t, st, crit1, wire.JobRunning)
	crit2 := critical()
	l := preemptions(2)
	if l.More || l.Preemptions[0].Victim != wire.JobID(lowRequeue) || l.Preemptions[0].Preemptor != wire.JobID(crit2) ||
		l.Preemptions[0].At < l.Preemptions[1].At {
		t.Fatalf("GET /api/v1/preemptions after the second eviction: %+v, want %s evicted for %s first", l, wire.JobID(lowRequeue), wire.JobID(crit2))
	}
	newest := l.Preemptions[0]
	uiPoll(t, ctx, "#preemptions tbody tr:first-child", "the newest eviction first", func(string) bool {
		id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#preemptions tbody tr").dataset.entryId || ""`))
		return err == nil && id == newest.EntryID
	})
	if cls, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#preemptions tbody tr").className`)); err != nil || cls != "new" {
		t.Errorf("the newest row's class is %q (%v), want new", cls, err)
	}
	if n := rows(); n != len(l.Preemptions) {
		t.Errorf("the page lists %d preemptions, the API %d", n, len(l.Preemptions))
	}
	// Each row as the API has it, in its order.
	var lost float64
	victims := map[string]bool{}
	for i, p := range l.Preemptions {
		row := fmt.Sprintf(`#preemptions tbody tr:nth-child(%d)`, i+1)
		var cells struct {
			Entry, Victim, Account, Preemptor, Policy, Mode, Node, Lost, Reason string
			Seconds                                                             float64
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
			const tr = document.querySelector(%q), td = (c) => tr.querySelector("td." + c);
			return JSON.stringify({Entry: tr.dataset.entryId, Victim: td("victim").querySelector("a").dataset.job,
				Account: td("account").textContent, Preemptor: td("preemptor").querySelector("a").dataset.job,
				Policy: td("policy").textContent, Mode: td("mode").textContent, Node: td("node").textContent,
				Lost: td("lost").textContent, Seconds: Number(td("lost").dataset.seconds), Reason: td("reason").title});
		})()`, row)))
		if err != nil || json.Unmarshal([]byte(got), &cells) != nil {
			t.Fatalf("row %d: %q (%v)", i+1, got, err)
		}
		wantCells := cells
		wantCells.Entry, wantCells.Victim, wantCells.Account, wantCells.Preemptor = p.EntryID, p.Victim, p.Account, p.Preemptor
		wantCells.Policy, wantCells.Mode, wantCells.Node, wantCells.Seconds, wantCells.Reason = p.Policy, p.Mode, p.Node, p.LostWorkSeconds, p.Reason
		if cells != wantCells {
			t.Errorf("row %d shows %+v, the API says %+v", i+1, cells, p)
		}
		if s, ok := uiSeconds(cells.Lost); !ok || math.Abs(s-p.LostWorkSeconds) > 0.06 || p.LostWorkSeconds <= 0 {
			t.Errorf("row %d: lost work %q, the API says %v s", i+1, cells.Lost, p.LostWorkSeconds)
		}
		if p.Policy != "priority" || p.Node != "ui-preempt" || p.Provider != "local" {
			t.Errorf("preemption %d: %+v, want policy priority on ui-preempt (local)", i, p)
		}
		lost += p.LostWorkSeconds
		victims[p.Victim] = true
	}
	if l.Preemptions[0].Mode != "requeue" || l.Preemptions[0].Account != "etl" || l.Preemptions[1].Account != "batch" {
		t.Errorf("modes and accounts: %+v", l.Preemptions)
	}
	// The figures add the rows up.
	uiText(t, ctx, "#preempt-count", strconv.Itoa(len(l.Preemptions)))
	uiText(t, ctx, "#preempt-victims", strconv.Itoa(len(victims)))
	if got, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#preempt-lost"))); err != nil {
		t.Error(err)
	} else if s, ok := uiSeconds(got); !ok || math.Abs(s-lost) > 0.06 {
		t.Errorf("work lost shows %q, the rows add up to %.3f s", got, lost)
	}
	uiContains(t, ctx, "#preempt-latest", " ago")
	screenshot(t, ctx, dir, "preemptions")

	// The newest victim's link, with the keyboard: the Jobs view, its row
	// focused, and (it is queued again) its explanation naming the
	// preemptor.
	uiText(t, ctx, fmt.Sprintf(`#jobs tr[data-job-id=%q] td.status`, newest.Victim), string(wire.JobQueued)) // the page knows it is queued again
	link := fmt.Sprintf(`#preemptions tbody tr:first-child td.victim a[data-job=%q]`, newest.Victim)
	uiDo(t, ctx, "follow the victim's link", chromedp.Focus(chromedp.CSS(link)), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS("#view-jobs")))
	uiPoll(t, ctx, "#jobs", "the victim's row focused", func(string) bool {
		id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.dataset.jobId || ""`))
		return err == nil && id == newest.Victim
	})
	uiText(t, ctx, "#explain-job", newest.Victim)
	uiContains(t, ctx, "#explain-preempted", "by "+newest.Preemptor[:12])
	uiContains(t, ctx, "#explain-preempted", "(requeue, priority)")
	screenshot(t, ctx, dir, "preemption-victim")

	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.body.dataset.cspViolations || 0)`)); err != nil || n != 0 {
		t.Errorf("the Content-Security-Policy refused %d things (%v)", n, err)
	}
}
