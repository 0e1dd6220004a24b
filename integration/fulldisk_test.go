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
