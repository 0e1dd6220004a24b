package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestFullWorkDirThenRestart (issue 11, defect 2): the work directory is
// full, so a task's records cannot be written; then the adapter is killed
// and restarted with room again. No job may run twice (before, a task
// whose state record failed to write ran on, and the restarted adapter
// started the job again beside it), and every job ends succeeded once.
// It needs a small tmpfs, so root; it is skipped otherwise.
func TestFullWorkDirThenRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as the work directory")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", work).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", work).Run() })
	countFile := filepath.Join(dir, "runs")
	cfg := countingConfig(t, board, "full-node", countFile, "")
	body := strings.Replace(readFile(t, cfg), "work_dir: jobs-full-node", "work_dir: "+work, 1)
	if !strings.Contains(body, work) {
		t.Fatal("work_dir not replaced in the test config")
	}
	cfg = writeConfig(t, body)

	// Fill it, all but nothing.
	filler := filepath.Join(work, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the tmpfs: %v", err)
			}
			break
		}
	}
	f.Close()

	p := startProc(t, "--config", cfg, "--redis", srv.URL(), "--consumer", "full-a")
	var ids []string
	for range 8 {
		ids = append(ids, postData(t, st, "planner", `{"template":"slowcount","resource_requirements":{"cpu_cores":1}}`, nil))
	}
	// The starts fail for want of room for their records: the jobs go
	// back to the queue, and after three the node takes itself out.
	eventually(t, 60*time.Second, "the node to take itself out of scheduling", func() bool {
		return strings.Contains(rdb.HGet(context.Background(), st.Keys().PoolNodes(), "full-node").Val(), `"unhealthy"`)
	})
	ranFull := len(runCounts(t, countFile))
	p.kill(t)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	startProc(t, "--config", cfg, "--redis", srv.URL(), "--consumer", "full-a")
	sts := waitAllTerminal(t, rdb, st, ids, 3*time.Minute)
	runs := runCounts(t, countFile)
	for _, id := range ids {
		if runs[id] > 1 {
			t.Errorf("request %s ran %d times", id, runs[id])
		}
	}
	checkExactlyOnce(t, ids, sts, runs)
	t.Logf("%d ran while the disk was full; then: %v", ranFull, summarize(sts))
}

func summarize(sts map[string]string) string {
	n := map[string]int{}
	for _, s := range sts {
		n[s]++
	}
	return fmt.Sprint(n)
}

// TestReadOnlyWorkDirDrainsTheNode (issue 11, defect 7): the work
// directory turns read-only under a running adapter. Before, every job
// assigned to the node failed at once and the node kept taking work. Now
// each failed start puts its job back in the queue, the node takes itself
// out of scheduling after three and says why, and once the directory is
// writable again a probe brings it back and every job runs, once.
// A read-only tmpfs mounted over the work directory stands for the broken
// disk (a remount of the directory itself is refused while the supervisor
// holds files open for writing), so it needs root; skipped otherwise.
func TestReadOnlyWorkDirDrainsTheNode(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a read-only tmpfs over the work directory")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	mounted := false
	t.Cleanup(func() {
		if mounted {
			_ = exec.Command("umount", "-l", work).Run()
		}
	})
	countFile := filepath.Join(dir, "runs")
	body := strings.Replace(readFile(t, countingConfig(t, board, "ro-node", countFile, "")), "work_dir: jobs-ro-node", "work_dir: "+work, 1)
	if !strings.Contains(body, work) {
		t.Fatal("work_dir not replaced in the test config")
	}
	cfg := writeConfig(t, body)
	startProc(t, "--config", cfg, "--redis", srv.URL(), "--consumer", "ro-a")
	// A first job proves the node works, then the directory turns read-only.
	ok := []string{postData(t, st, "planner", `{"template":"count","resource_requirements":{"cpu_cores":1}}`, nil)}
	if sts := waitAllTerminal(t, rdb, st, ok, 60*time.Second); sts[ok[0]] != "succeeded" {
		t.Fatalf("the first job ended %s", sts[ok[0]])
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", work).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	mounted = true
	var ids []string
	for range 8 {
		ids = append(ids, postData(t, st, "planner", `{"template":"count","resource_requirements":{"cpu_cores":1}}`, nil))
	}
	nodeRecord := func() string {
		return rdb.HGet(context.Background(), st.Keys().PoolNodes(), "ro-node").Val()
	}
	eventually(t, 60*time.Second, "the node to take itself out of scheduling", func() bool {
		return strings.Contains(nodeRecord(), `"unhealthy"`)
	})
	if rec := nodeRecord(); !strings.Contains(rec, "read-only") {
		t.Errorf("the node's record does not say why it is out: %s", rec)
	}
	// Orders already on their way may still bounce off the node (running
	// for a moment, then queued again), but none may end.
	for id, s := range jobStatuses(t, rdb, st, ids) {
		if wire.JobStatus(s).Terminal() {
			jd, _ := jobData(t, st, id)
			t.Errorf("job %s ended %q %+v while its node is out; want it waiting", id, s, jd.Error)
		}
	}
	unmountWhenFree(t, work)
	mounted = false
	sts := waitAllTerminal(t, rdb, st, ids, 2*time.Minute)
	checkExactlyOnce(t, ids, sts, runCounts(t, countFile))
}

// unmountWhenFree unmounts the file system mounted at dir. The adapter
// opens the work directory now and then (listing and pruning task
// directories), and a child forked meanwhile holds that descriptor until
// its exec, so a busy mount is retried for a while; one that stays busy
// fails the test with the processes that hold it.
func unmountWhenFree(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tries := 1; ; tries++ {
		out, err := exec.Command("umount", dir).CombinedOutput()
		if err == nil {
			if tries > 1 {
				t.Logf("umount %s: busy, freed after %d tries", dir, tries)
			}
			return
		}
		if !strings.Contains(string(out), "busy") || time.Now().After(deadline) {
			t.Fatalf("umount %s: %v: %s; held by: %s", dir, err, out, holders(dir))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holders lists the processes whose working directory or open files are
// at or under dir, from /proc.
func holders(dir string) string {
	var held []string
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		links, _ := filepath.Glob(proc + "/fd/*")
		links = append(links, proc+"/cwd")
		for _, l := range links {
			if target, err := os.Readlink(l); err == nil && under(target) {
				comm, _ := os.ReadFile(proc + "/comm")
				held = append(held, fmt.Sprintf("%s (%s) %s", strings.TrimSpace(string(comm)), l, target))
			}
		}
	}
	if len(held) == 0 {
		return "no process found"
	}
	return strings.Join(held, "; ")
}
