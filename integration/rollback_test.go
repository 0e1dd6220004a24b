package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestRedisRollbackRunsNothingTwice (issue 11, defect 1): Redis loses the
// last second of acknowledged writes (an AOF with appendfsync everysec on a
// host crash), simulated as the issue asks: copy the AOF, let Redis serve
// on for a second, kill it and restart it from the copy. A burst posted
// just before the copy is accepted and started in that second, on two
// adapters; the restored Redis has those requests back as never accepted.
// Before reconciliation existed, they ran a second time, on either node.
// Now every node re-asserts what it ran before anything new is assigned:
// every request that Redis still holds ends succeeded having run once, and
// nothing ran that no record accounts for.
//
// In "agent restarts", node-a's adapter is also killed (kill -9) at the
// moment Redis goes down, and comes back after it: what it ran in the lost
// second it knows only from its task directories (the node's start log),
// not from memory. Before it read them, those jobs ran again, or failed
// start_failed on their own task directory although they had succeeded.
func TestRedisRollbackRunsNothingTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	t.Parallel()
	for _, mode := range []string{"agents live", "agent restarts"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			rollback(t, mode == "agent restarts")
		})
	}
}

func rollback(t *testing.T, restartA bool) {
	srv := redistest.StartT(t, redistest.Options{AOF: true, TCP: true})
	rdb := srv.Client(t)
	board := redistest.Namespace(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	countFile := filepath.Join(dir, "runs")
	var a *proc
	var aConfig string
	for _, n := range []string{"node-a", "node-b"} {
		// A node lost under load (the pool config's node_timeout is 4 s)
		// would end its jobs failed: lost until corrected, and a round
		// timed out (node_unhealthy, 1.5 s there) before a starved agent
		// even beats is the documented window of a node that does not
		// answer: neither is what this test is about.
		cfg := readFile(t, poolConfig(t, board, dir, n, agentNode(n, "")))
		cfg = strings.Replace(cfg, "node_timeout: 4s", "node_timeout: 2m", 1)
		cfg = strings.Replace(cfg, "node_unhealthy: 1500ms", "node_unhealthy: 6s", 1)
		path := writeConfig(t, cfg)
		p := startProc(t, "--config", path, "--redis", srv.URL(), "--role", "both")
		if n == "node-a" {
			a, aConfig = p, path
		}
	}

	var (
		mu  sync.Mutex
		ids []string
	)
	add := func(id ...string) { mu.Lock(); ids = append(ids, id...); mu.Unlock() }
	posted := func() int { mu.Lock(); defer mu.Unlock(); return len(ids) }
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // a module posting steadily, retrying through the outage
		defer close(done)
		for {
			e := blackboard.NewEntry(blackboard.RequestTopic, "steady", json.RawMessage(`{"template":"count","resource_requirements":{"cpu_cores":0.5}}`))
			e.ID = blackboard.NewID()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := st.Post(ctx, e)
				cancel()
				if err == nil || strings.Contains(err.Error(), "conflict") {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			add(e.ID)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	eventually(t, 60*time.Second, "both nodes running jobs", func() bool {
		return len(runCounts(t, countFile)) >= 40
	})

	// A backlog that the lost second accepts and starts.
	add(postRequests(t, st, "burst", repeat(`{"template":"count","resource_requirements":{"cpu_cores":0.5}}`, 150))...)
	snap, err := srv.CopyAOF()
	if err != nil {
		t.Fatal(err)
	}
	runsAtCopy := len(runCounts(t, countFile))
	// A second, or on a loaded machine as long as it takes (up to 10 s)
	// for runs to happen in the window that will be lost: a run with none
	// would not test re-assertion at all.
	lostFrom := time.Now()
	for time.Since(lostFrom) < time.Second ||
		len(runCounts(t, countFile))-runsAtCopy < 10 && time.Since(lostFrom) < 10*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	if restartA {
		a.kill(t)
	}
	lostFor := time.Since(lostFrom)
	runsLost := len(runCounts(t, countFile)) - runsAtCopy
	if err := srv.RestartFrom(snap); err != nil {
		t.Fatal(err)
	}
	if restartA {
		startProc(t, "--config", aConfig, "--redis", srv.URL(), "--role", "both")
	}
	before := posted()
	eventually(t, 60*time.Second, "30 requests posted after the restart", func() bool { return posted() >= before+30 })
	close(stop)
	<-done
	mu.Lock()
	all := append([]string(nil), ids...)
	mu.Unlock()

	// A request posted in the lost second is gone with it (its poster was
	// told otherwise: that is the Redis setting's guarantee, not ours);
	// every other one must end.
	var held []string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		held = held[:0]
		sts := jobStatuses(t, rdb, st, all)
		var open []string
		for _, id := range all {
			if rdb.Exists(context.Background(), st.Keys().Entry(id), st.Keys().Job(wire.JobID(id))).Val() == 0 {
				continue
			}
			held = append(held, id)
			if !wire.JobStatus(sts[id]).Terminal() {
				open = append(open, id)
			}
		}
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, id := range open[:min(len(open), 5)] {
				h := rdb.HGetAll(context.Background(), st.Keys().Job(wire.JobID(id))).Val()
				delete(h, "request")
				delete(h, "request_data")
				t.Logf("open: %s status %q record %v", id, sts[id], h)
			}
			t.Fatalf("%d of %d requests Redis holds did not end within 3 minutes", len(open), len(held))
		}
		time.Sleep(200 * time.Millisecond)
	}
	sts := jobStatuses(t, rdb, st, all)
	runs := runCounts(t, countFile)
	isHeld := map[string]bool{}
	for _, id := range held {
		isHeld[id] = true
	}
	bad := 0
	for _, id := range all {
		switch {
		case runs[id] > 1:
			bad++
			t.Errorf("request %s (job %s) ran %d times (job %q)", id, wire.JobID(id), runs[id], sts[id])
		case isHeld[id] && (sts[id] != string(wire.JobSucceeded) || runs[id] != 1):
			bad++
			why := rdb.HGet(context.Background(), st.Keys().Job(wire.JobID(id)), "error").Val()
			t.Errorf("request %s (job %s): job %q (%s), ran %d times; want succeeded once", id, wire.JobID(id), sts[id], why, runs[id])
		case !isHeld[id] && runs[id] != 0:
			bad++
			t.Errorf("request %s ran but no record or entry accounts for it", id)
		}
		if bad >= 10 {
			break
		}
	}
	t.Logf("%d requests, %d still held by Redis after the rollback; %d runs happened in the lost %v", len(all), len(held), runsLost,
		lostFor.Round(100*time.Millisecond))
	if runsLost == 0 {
		t.Log("nothing started in the lost second: this run did not exercise re-assertion")
	}
}
