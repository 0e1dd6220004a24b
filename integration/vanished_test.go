package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestVanishedRecordsFreeTheirCores (issue 11, defect 4): the records of
// jobs running on a real adapter vanish from Redis (as with data loss).
// Before, the agent retried recording their ends for ever ("record job
// end … not found" several times a second per job) and their cores stayed
// reserved, so nothing else ran on the node again. Now each is settled
// once its task ends: the node's whole capacity is free for the next
// jobs, and the failure is not logged over and over.
func TestVanishedRecordsFreeTheirCores(t *testing.T) {
	if testing.Short() {
		t.Skip("long: real jobs of a few seconds")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	ctx := context.Background()
	// One node of 2 cores; each job takes both.
	cfg := poolConfig(t, board, dir, "solo", agentNode("solo", ""))
	p := startProc(t, "--config", cfg, "--redis", srv.URL(), "--role", "both")
	eventually(t, 15*time.Second, "the node registered", func() bool {
		return rdb.HLen(ctx, st.Keys().PoolNodes()).Val() == 1
	})
	whole := `{"template":"%s","resource_requirements":{"cpu_cores":2,"memory":0.05}}`
	first := postRequests(t, st, "lossy", []string{strings.Replace(whole, "%s", "slow", 1)})
	eventually(t, 30*time.Second, "the first job running, its task started", func() bool {
		return jobStatuses(t, rdb, st, first)[first[0]] == string(wire.JobRunning) &&
			rdb.HGet(ctx, st.Keys().Job(wire.JobID(first[0])), "handle").Val() != ""
	})
	// Redis loses the record while the task runs (6 s).
	if err := rdb.Del(ctx, st.Keys().Job(wire.JobID(first[0]))).Err(); err != nil {
		t.Fatal(err)
	}
	// The next jobs need the whole node: they run only if the vanished
	// job's cores are given back when its task ends.
	next := postRequests(t, st, "lossy", repeat(strings.Replace(whole, "%s", "count", 1), 2))
	sts := waitAllTerminal(t, rdb, st, next, 60*time.Second)
	for _, id := range next {
		if sts[id] != string(wire.JobSucceeded) {
			jd, _ := jobData(t, st, id)
			t.Fatalf("a job after the vanished one ended %q %+v, want succeeded (the node's cores never came back?)", sts[id], jd.Error)
		}
	}
	if ok := rdb.Exists(ctx, st.Keys().Job(wire.JobID(first[0]))).Val(); ok != 0 {
		t.Errorf("the vanished record came back without a rollback")
	}
	// Give a retry loop time to show itself, then count.
	time.Sleep(2 * time.Second)
	if n := strings.Count(p.out.String(), "record job end"); n > 2 {
		t.Errorf("the adapter logged %d failed attempts to record the vanished job's end; want it settled, not retried", n)
	}
}
