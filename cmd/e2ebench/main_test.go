package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
)

func TestMain(m *testing.M) {
	// The latency and pending parts run this test binary as their jobs.
	// It ends with syscall.Exit, not os.Exit: built with -race, os.Exit
	// sleeps a second first (GORACE's atexit_sleep_ms), after the exit stamp.
	if len(os.Args) > 1 && (os.Args[1] == stampMode || os.Args[1] == holdMode) {
		syscall.Exit(stampMain(os.Args[1:]))
	}
	redistest.Main(m)
}

// TestRun runs every part small against a real adapter (built here) and a
// real redis-server, and checks that each prints its line: every job
// succeeded, stamped its start and exit, and the pending jobs were all
// accepted (run fails otherwise). It asserts nothing about the figures.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real adapter, which runs real processes: not with -short")
	}
	start := time.Now()
	bin := buildAdapter(t)
	t.Logf("adapter built in %v", time.Since(start).Round(time.Millisecond))
	sock := redistest.Shared(t).SocketPath()
	var out strings.Builder
	args := []string{"-adapter", bin, "-network", "unix", "-redis", sock,
		"-n", "20", "-posters", "2", "-concurrency", "4", "-latency-n", "5", "-pending", "100", "-secs", "0.5"}
	err := run(t.Context(), args, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"side=forkexec part=throughput n=20 concurrency=4 ",
		"side=computeboard part=throughput n=20 posters=2 concurrency=4 ",
		"side=computeboard part=throughput_slots concurrency=4 busy_share=",
		"side=forkexec part=latency n=5 ",
		"side=computeboard part=latency n=5 ",
		"side=computeboard part=idle pending=0 ",
		"side=computeboard part=pending pending=100 ",
		"side=computeboard part=pending-redis pending=100 ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	// The resident set's range over the sample holds the reading taken
	// right after it.
	if _, rest, ok := strings.Cut(out.String(), "side=computeboard part=pending pending=100 "); ok {
		kv := map[string]float64{}
		for _, f := range strings.Fields(strings.SplitN(rest, "\n", 2)[0]) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k], _ = strconv.ParseFloat(v, 64)
			}
		}
		if lo, at, hi := kv["rss_min_bytes_per_job"], kv["rss_bytes_per_job"], kv["rss_max_bytes_per_job"]; !(lo <= at && at <= hi) {
			t.Errorf("RSS per job: min %v, at the end %v, max %v; want min ≤ end ≤ max", lo, at, hi)
		}
	}
	// Each split of the latency part comes as p50 and p99, p50 ≤ p99.
	if _, rest, ok := strings.Cut(out.String(), "side=computeboard part=latency "); ok {
		kv := map[string]string{}
		for _, f := range strings.Fields(strings.SplitN(rest, "\n", 2)[0]) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		for _, split := range []string{"post_to_accepted", "accepted_to_running", "running_to_started", "exit_to_recorded", "recorded_to_observed"} {
			p50, err50 := strconv.Atoi(kv[split+"_p50_us"])
			p99, err99 := strconv.Atoi(kv[split+"_p99_us"])
			if err50 != nil || err99 != nil || p50 > p99 {
				t.Errorf("%s: p50 %q, p99 %q; want both, p50 ≤ p99", split, kv[split+"_p50_us"], kv[split+"_p99_us"])
			}
		}
	} else {
		t.Error("no latency line")
	}
	// The node runs at most concurrency jobs at once, so they cannot
	// have been running for more than all of its slots' time.
	if _, rest, ok := strings.Cut(out.String(), "part=throughput_slots concurrency=4 busy_share="); ok {
		share, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil || share <= 0 || share > 1 {
			t.Errorf("busy_share %q; want a share in (0, 1]", strings.Fields(rest)[0])
		}
	}
}

// buildAdapter builds cmd/adapter, and cmd/cb-supervisor where the
// repository has it (the adapter finds it next to itself), into a
// temporary directory.
func buildAdapter(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	pkgs := []string{"adapter"}
	if _, err := os.Stat(filepath.Join(root, "cmd", "cb-supervisor")); err == nil {
		pkgs = append(pkgs, "cb-supervisor")
	}
	for _, p := range pkgs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, p), "./cmd/"+p)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", p, err, out)
		}
	}
	return filepath.Join(dir, "adapter")
}
