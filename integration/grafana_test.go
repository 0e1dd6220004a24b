package integration

import (
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// grafanaDashboard is the part of Grafana's dashboard JSON model the test
// reads.
type grafanaDashboard struct {
	Title         string         `json:"title"`
	UID           string         `json:"uid"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's panels
}

var (
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promLabels   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true}
)

// promMetricNames returns the metric names a PromQL expression selects:
// its identifiers once strings, label matchers, ranges and grouping
// clauses are cut, less function names (followed by "("), keywords,
// numbers' exponents and Grafana variables.
func promMetricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, "{}")
	s = promRanges.ReplaceAllString(s, "[]")
	s = promLabels.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("$0123456789.", rune(s[loc[0]-1])) {
			continue // a Grafana variable, or a number's exponent (1e3)
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || promKeywords[name] {
			continue
		}
		out = append(out, name)
	}
	return out
}

// balanced reports whether the brackets of a PromQL expression pair up.
func balanced(expr string) bool {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, c := range promStrings.ReplaceAllString(expr, `""`) {
		switch c {
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pair[c] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0
}

func TestPromMetricNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`sum by (code) (rate(computeboard_broker_rejected_total{instance=~"$instance", code!="x(y)"}[$__rate_interval]))`: {"computeboard_broker_rejected_total"},
		`sum(a_total) / sum(b{c="d"}) * 1e3 > bool 0 and on (instance) up offset 5m`:                                      {"a_total", "b", "up"},
		`topk(10, sum without (module) (x:y:z))`:                                                                          {"x:y:z"},
	} {
		if got := promMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("promMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// exposedFamilies lists the metric names of a Prometheus text exposition
// (with the _bucket, _sum and _count series of histograms and summaries).
func exposedFamilies(body string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				out[f[2]+suffix] = true
			}
		}
	}
	return out
}

// TestGrafanaDashboard checks deploy/grafana/computeboard.json: Grafana's
// dashboard JSON model (title, uid, schemaVersion, panels placed on the
// grid, each with Prometheus targets whose expr is PromQL), and that every
// metric its panels and variables query is on the /metrics of a real
// adapter holding the scheduler lease, with jobs running and waiting and a
// request rejected.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	var d grafanaDashboard
	readRepoJSON(t, "deploy/grafana/computeboard.json", &d)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("dashboard: title %q, uid %q, schemaVersion %d, %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	hasDS := false
	used := map[string][]string{} // metric name → panels using it
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			hasDS = hasDS || (v.Name == "datasource" && v.Query == "prometheus")
		case "query":
			for _, m := range promMetricNames(strings.TrimPrefix(v.Definition, "label_values")) {
				if m != "instance" {
					used[m] = append(used[m], "variable "+v.Name)
				}
			}
		}
	}
	if !hasDS {
		t.Error(`no templating variable "datasource" of type datasource, query prometheus`)
	}
	var panels []grafanaPanel
	for _, p := range d.Panels {
		panels = append(panels, p)
		panels = append(panels, p.Panels...)
	}
	ids := map[int]bool{}
	for _, p := range panels {
		if p.Type == "" || p.Title == "" || ids[p.ID] || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q: type %q, gridPos %+v (a unique id, a type, a title and a place on the 24-column grid are needed)",
				p.ID, p.Title, p.Type, p.GridPos)
		}
		ids[p.ID] = true
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			names := promMetricNames(tg.Expr)
			if tg.RefID == "" || refs[tg.RefID] || !balanced(tg.Expr) || len(names) == 0 {
				t.Errorf("panel %q target %q: expr %q (a unique refId and a PromQL expr selecting a metric are needed)", p.Title, tg.RefID, tg.Expr)
			}
			refs[tg.RefID] = true
			for _, m := range names {
				used[m] = append(used[m], p.Title)
			}
		}
	}
	// A real adapter, elected scheduler, with one fake one-core node: one
	// job runs on it, one waits in the engine (max_pending 1), one waits in
	// the inbox (the per-module series exist only while requests are held
	// there), and one is rejected (the per-code rejection counter).
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := testConfig(board, "pool:\n  fake_nodes:\n    count: 1\n    duration: 60s\n    node: {cpu_cores: 1, memory_gb: 4}\n")
	cfg = strings.Replace(cfg, "scheduler:\n  interval: 50ms\n", "scheduler:\n  interval: 50ms\n  max_pending: 1\n", 1)
	_, out := runAdapter(t, "--config", writeConfig(t, cfg), "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, out)
	running := postData(t, st, "planner", `{"template":"hello"}`, nil)
	waitStatus(t, st, running, wire.JobRunning)
	for range 2 {
		postData(t, st, "planner", `{"template":"hello"}`, nil)
	}
	bad := postData(t, st, "critic", `{"template":"no-such-template"}`, nil)
	waitStatus(t, st, bad, wire.JobRejected)

	var missing []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(api + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		exposed := exposedFamilies(string(body))
		missing = missing[:0]
		for _, m := range slices.Sorted(maps.Keys(used)) {
			if !exposed[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range missing {
		t.Errorf("the dashboard queries %s (%s), which the adapter's /metrics does not expose", m, strings.Join(used[m], ", "))
	}
}
