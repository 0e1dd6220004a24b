package sim_test

import (
	"bytes"
	"encoding/json"
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine/sim"
)

func TestParseErrors(t *testing.T) {
	base := `"nodes": [{"name": "n", "cpu": 4, "memory": 8}], "jobs": [{"cpu": 1, "duration": 10}]`
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field":      {`{` + base + `, "nodez": 1}`, "unknown field"},
		"bad selection":      {`{` + base + `, "policy": {"selection": "fifo"}}`, "unknown selection"},
		"bad strategy":       {`{` + base + `, "policy": {"strategy": "random"}}`, "unknown strategy"},
		"bad billing dim":    {`{` + base + `, "policy": {"billing": {"cpus": 1}}}`, "unknown dimension"},
		"no nodes":           {`{"jobs": [{"duration": 1}]}`, "no nodes"},
		"no jobs":            {`{"nodes": [{"name": "n", "cpu": 1}]}`, "no jobs"},
		"zero duration":      {`{"nodes": [{"name": "n", "cpu": 1}], "jobs": [{"cpu": 1}]}`, "duration"},
		"priority range":     {`{"nodes": [{"name": "n", "cpu": 1}], "jobs": [{"priority": 10, "duration": 1}]}`, "priority"},
		"variant shadows":    {`{` + base + `, "variants": {"drf": {}}}`, "shadows"},
		"bad variant":        {`{` + base + `, "variants": {"x": {"selection": "nope"}}}`, "unknown selection"},
		"events off":         {`{` + base + `, "cycle": {"on_events": false}}`, "interval"},
		"gen without shape":  {`{"nodes": [{"name": "n", "cpu": 1}], "generate": [{"accounts": ["a"], "count": 1, "duration": {"mean": 1}}]}`, "no shapes"},
		"negative limit":     {`{"nodes": [{"name": "n", "cpu": 1}], "jobs": [{"duration": 1, "time_limit": -1}]}`, "time limit"},
		"bad limit factor":   {`{"nodes": [{"name": "n", "cpu": 1}], "generate": [{"accounts": ["a"], "count": 1, "time_limit": [0, 2], "duration": {"mean": 1}, "shapes": [{}]}]}`, "time limit"},
		"bad deadline order": {`{` + base + `, "policy": {"deadline_order": "edf"}}`, "deadline_order"},
		"bad range":          {`{"nodes": [{"name": "n", "cpu": 1}], "generate": [{"accounts": ["a"], "count": 1, "priority": [5, 2], "duration": {"mean": 1}, "shapes": [{}]}]}`, "lo, hi"},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := sim.Parse([]byte(tc.doc))
			if err == nil {
				err = tr.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestUnknownPolicy(t *testing.T) {
	tr := load(t, "testdata/backfill.json")
	if _, err := sim.Run(tr, "fifo"); err == nil || !strings.Contains(err.Error(), "unknown policy") {
		t.Errorf("error %v", err)
	}
}

// TestCSVJobs: jobs_csv adds jobs from a CSV file next to the trace; the
// result equals the same jobs listed in JSON.
func TestCSVJobs(t *testing.T) {
	dir := t.TempDir()
	csv := "id,arrival,account,priority,cpu,memory,duration,estimate,deadline,selector\n" +
		"# a comment\n" +
		"a,0,x,2,2,1,100,,,\n" +
		"b,1,y,6,4,1,100,100,,pool=p\n" +
		"c,2,x,2,2,1,50,,60,\n" +
		"d,3,y,2,2,1,200,,300,\n"
	trace := `{"name": "backfill", "nodes": [{"name": "n", "cpu": 4, "memory": 16, "labels": {"pool": "p"}}],
		"accounts": [{"name": "x", "shares": 1}, {"name": "y", "shares": 1}], "jobs_csv": "jobs.csv"}`
	if err := os.WriteFile(filepath.Join(dir, "jobs.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t.json"), []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	got := run(t, load(t, filepath.Join(dir, "t.json")), "").WithoutTimings()
	want := run(t, load(t, "testdata/backfill.json"), "").WithoutTimings()
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("CSV trace report differs from the JSON one:\n%s\n%s", gj, wj)
	}
	// time_limit and estimate columns: the hand-checked time-limit trace.
	csv = "id,arrival,account,priority,cpu,memory,duration,estimate,time_limit\n" +
		"a,0,x,2,2,1,100,,\n" +
		"b,1,y,6,4,1,100,,\n" +
		"c,2,x,2,2,1,300,50,150\n" +
		"d,3,y,2,2,1,60,50,90\n"
	trace = strings.Replace(trace, `"backfill"`, `"timelimit"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "jobs.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t.json"), []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	got = run(t, load(t, filepath.Join(dir, "t.json")), "").WithoutTimings()
	want = run(t, load(t, "testdata/timelimit.json"), "").WithoutTimings()
	gj, _ = json.Marshal(got)
	wj, _ = json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("CSV time-limit trace report differs from the JSON one:\n%s\n%s", gj, wj)
	}
	bad := "id,arrival,bogus\nx,0,1\n"
	if _, err := sim.ReadJobsCSV(strings.NewReader(bad)); err == nil {
		t.Error("unknown CSV column accepted")
	}
}

func TestCLI(t *testing.T) {
	trace := "testdata/backfill.json"
	var out, errb bytes.Buffer
	if err := sim.Main([]string{trace}, &out, &errb, time.Now); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"policy priority", "Jain's fairness index", "Wait (start − arrival)", "Utilization", "Deadlines:"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, out.String())
		}
	}
	// Progress goes to stderr, never into the report: a line per tenth of
	// the jobs ended at most, the last one saying done.
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if n := len(lines); n < 2 || n > 11 || !strings.HasSuffix(lines[n-1], "jobs ended: done") ||
		!strings.HasPrefix(lines[0], "sim backfill, policy priority: simulated ") || strings.Contains(out.String(), "jobs ended") {
		t.Errorf("progress on stderr:\n%s", errb.String())
	}
	errb.Reset()

	out.Reset()
	if err := sim.Main([]string{"--compare", "priority,drf", trace, "--json"}, &out, &errb, time.Now); err != nil {
		t.Fatal(err)
	}
	var rs []sim.Report
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil || len(rs) != 2 || rs[1].Policy.Name != "drf" || rs[1].Measure != sim.MeasureDominant {
		t.Errorf("--compare --json: %v, %d reports", err, len(rs))
	}

	out.Reset()
	if err := sim.Main([]string{trace, "--compare", "all"}, &out, &errb, time.Now); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"priority", "proportional", "lottery", "wfq", "drr", "drf"} {
		if !strings.Contains(out.String(), "\n  "+p+" ") {
			t.Errorf("--compare all lacks a row for %s:\n%s", p, out.String())
		}
	}

	out.Reset()
	if err := sim.Main([]string{trace, "--policy", "wfq", "--json"}, &out, &errb, time.Now); err != nil {
		t.Fatal(err)
	}
	var r sim.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Policy.Selection != "wfq" {
		t.Errorf("--policy wfq --json: %v, %+v", err, r.Policy)
	}

	for _, args := range [][]string{
		{},
		{trace, trace},
		{trace, "--policy", "drf", "--compare", "wfq"},
		{trace, "--policy", "nope"},
		{trace, "--compare", "drf,nope"},
		{trace, "--bogus"},
		{"does-not-exist.json"},
	} {
		if err := sim.Main(args, &out, &errb, time.Now); err == nil {
			t.Errorf("Main(%q) succeeded", args)
		}
	}
	errb.Reset()
	if err := sim.Main([]string{"--help"}, &out, &errb, time.Now); err != nil || !strings.Contains(errb.String(), "usage: adapter sim") {
		t.Errorf("--help: %v, %q", err, errb.String())
	}
}

// TestStdlibOnly keeps the simulator free of third-party code: it may
// import the standard library and the engine only.
func TestStdlibOnly(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if strings.Contains(first, ".") && imp != "github.com/computeboard/computeboard/engine" {
			t.Errorf("engine/sim imports %q; it may import only the standard library and the engine", imp)
		}
	}
}

// TestReadmeExample keeps the example trace in README.md valid.
func TestReadmeExample(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(md), "```json\n")
	doc, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```json block")
	}
	tr, err := sim.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Run(tr, ""); err != nil {
		t.Fatal(err)
	}
}

// A generator's time_limit is a multiple of each job's estimate; a job
// still running at its limit is stopped then.
func TestGeneratedTimeLimit(t *testing.T) {
	doc := `{"nodes": [{"name": "n", "cpu": 2, "memory": 8}], "generate": [{"accounts": ["a"], "count": 6,
		"duration": {"dist": "fixed", "mean": 100}, "estimate": 1, "time_limit": [0.5, 0.5], "shapes": [{"cpu": 1}]}]}`
	tr, err := sim.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, tr, "")
	if r.Jobs.Finished != 6 || r.Jobs.Stopped != 6 || r.Makespan != 150 {
		t.Errorf("finished %d, stopped %d, makespan %v; want 6, 6, 150 (three rounds of 50 s)", r.Jobs.Finished, r.Jobs.Stopped, r.Makespan)
	}
}
