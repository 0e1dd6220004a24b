package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestCrashWithReadAheadInbox (issue 11, defect 6): an adapter dies with
// thousands of requests read from the intake but not yet accepted (its
// in-memory inbox). They must all become jobs within the claim idle time
// plus 30 s of the crash, whoever picks them up:
//
//   - restart: the same adapter comes back under the same consumer name and
//     re-reads its own pending messages at once;
//   - takeover: another adapter under another consumer name becomes the
//     scheduler and claims the dead one's whole idle backlog in one go (not
//     a few hundred per reclaim interval).
//
// The backlog is made deterministic rather than raced: a one-core node is
// held by a long job and the scheduler takes at most 20 pending jobs, so
// everything else it reads stays in its inbox, unaccepted. The adapter that
// picks up is a scheduler only, so what is measured is the hand-back, not
// how fast this machine starts 3,500 processes; an agent with room (64
// cores) then runs them all, exactly once.
func TestCrashWithReadAheadInbox(t *testing.T) {
	if testing.Short() {
		t.Skip("long: 3,500 real processes")
	}
	for _, mode := range []string{"restart", "takeover"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Shared(t)
			rdb, board := redistest.New(t)
			st := storeFor(t, rdb, board)
			dir := jobDir(t)
			countFile := filepath.Join(dir, "runs")
			const claimIdle = 5 * time.Second
			cfg := func(node string, cores, maxPending int) string {
				extra := "pool:\n  lease_time: 2s\n  heartbeat: 250ms\n  node_unhealthy: 1500ms\n"
				body := countingConfig(t, board, node, countFile, extra)
				body = readFile(t, body)
				body = strings.Replace(body, "cpu_cores: 64", fmt.Sprintf("cpu_cores: %d", cores), 1)
				body = strings.Replace(body, "scheduler:\n  interval: 50ms\n",
					fmt.Sprintf("scheduler:\n  interval: 50ms\n  max_pending: %d\n", maxPending), 1)
				body = strings.Replace(body, "claim_idle: 2s", "claim_idle: "+claimIdle.String(), 1)
				return writeConfig(t, body)
			}
			a := startProc(t, "--config", cfg("node-a", 1, 20), "--redis", srv.URL(), "--consumer", "scheduler-a")
			hold := postData(t, st, "holder", `{"template":"sleep","arguments":["120"],"resource_requirements":{"cpu_cores":1}}`, nil)
			// It outlives the test by at most its own two minutes: in the
			// takeover case node-a never comes back to settle it.
			waitStatus(t, st, hold, wire.JobRunning)

			const n = 3500
			ids := postBurst(t, st, "burster", "count", n)
			eventually(t, 60*time.Second, "3,000 requests read but not accepted", func() bool {
				return intakePending(t, rdb, st, "scheduler-a") >= 3000
			})
			unaccepted := intakePending(t, rdb, st, "scheduler-a")
			a.kill(t)
			crashed := time.Now()

			consumer := "scheduler-a" // restart: the same name
			if mode == "takeover" {
				consumer = "scheduler-b"
			}
			startProc(t, "--config", cfg("node-a", 1, 10000), "--redis", srv.URL(), "--consumer", consumer, "--role", "scheduler")
			bound := claimIdle + 30*time.Second
			last := time.Now()
			eventually(t, bound, "every request to be a job", func() bool {
				n := accepted(t, rdb, st, ids)
				if time.Since(last) > 5*time.Second {
					last = time.Now()
					t.Logf("%v after the crash: %d of %d are jobs; %d pending under the dead consumer",
						time.Since(crashed).Round(time.Second), n, len(ids), intakePending(t, rdb, st, "scheduler-a"))
				}
				return n == len(ids)
			})
			took := time.Since(crashed)
			if left := intakePending(t, rdb, st, "scheduler-a"); left != 0 {
				t.Errorf("%d requests still pending under the dead consumer", left)
			}
			startProc(t, "--config", cfg("node-b", 64, 10000), "--redis", srv.URL(), "--role", "agent")
			sts := waitAllTerminal(t, rdb, st, ids, 5*time.Minute)
			checkExactlyOnce(t, ids, sts, runCounts(t, countFile))
			t.Logf("%s: %d requests were read but unaccepted at the crash; all %d were jobs %v after it (bound %v)",
				mode, unaccepted, n, took.Round(100*time.Millisecond), bound)
		})
	}
}

// accepted counts the requests that have a job record.
func accepted(t *testing.T, rdb redis.UniversalClient, st *blackboard.Store, ids []string) int {
	t.Helper()
	cmds := make([]*redis.IntCmd, len(ids))
	_, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Exists(context.Background(), st.Keys().Job(wire.JobID(id)))
		}
		return nil
	})
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n
}
