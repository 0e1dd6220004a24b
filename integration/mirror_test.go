package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// TestLostMirrorReachesTheModules: a writer (here a scheduler whose
// adapter is then SIGKILLed) ends a job's record and dies before it
// mirrors the end onto the job entry. Before, nothing ever did: the
// entry said queued for good and no compute.job.finished came, so a
// module waiting on its job as wire-format.md §5 says waited forever,
// while the record said cancelled. Now the next scheduler mirrors it when
// its term begins.
func TestLostMirrorReachesTheModules(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a real adapter, killed and started again")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	ctx := context.Background()
	// One node of 2 cores: the first job takes it, the second waits.
	cfg := poolConfig(t, board, dir, "solo", agentNode("solo", ""))
	p := startProc(t, "--config", cfg, "--redis", srv.URL(), "--role", "both")
	whole := `{"template":"%s","resource_requirements":{"cpu_cores":2,"memory":0.05}}`
	ids := postRequests(t, st, "waiter", []string{strings.Replace(whole, "%s", "slower", 1)})
	eventually(t, 30*time.Second, "the first job running", func() bool {
		return jobStatuses(t, rdb, st, ids)[ids[0]] == string(wire.JobRunning)
	})
	ids = append(ids, postRequests(t, st, "waiter", []string{strings.Replace(whole, "%s", "count", 1)})...)
	eventually(t, 30*time.Second, "the second job queued behind it", func() bool {
		jd, _ := jobData(t, st, ids[1])
		return jd.Status == wire.JobQueued
	})
	p.kill(t)

	// The dead writer's end: the record's compare-and-set, made 20 s ago
	// by its clock (older than the scheduler's grace for a live writer's
	// mirror), and no mirror.
	dead, err := jobs.New(rdb, st, jobs.Config{Clock: clock.NewFake(time.Now().Add(-20 * time.Second)),
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	waiting := wire.JobID(ids[1])
	if _, _, err := dead.Change(ctx, waiting, wire.JobQueued, wire.JobCancelled, jobs.Update{
		Error: &wire.JobError{Code: "cancelled", Message: "cancelled by an operator"}}); err != nil {
		t.Fatal(err)
	}
	if jd, _ := jobData(t, st, ids[1]); jd.Status != wire.JobQueued {
		t.Fatalf("job entry before the restart: %s; want queued still", jd.Status)
	}

	startProc(t, "--config", cfg, "--redis", srv.URL(), "--role", "both")
	jd := waitStatus(t, st, ids[1], wire.JobCancelled)
	if jd.Error == nil || jd.Error.Message != "cancelled by an operator" {
		t.Errorf("job entry after the repair: %+v; want the record's error", jd.Error)
	}
	eventually(t, 10*time.Second, "compute.job.finished of the cancelled job", func() bool {
		return finishedEvents(t, st, waiting) == 1
	})
}
