package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/deathsig"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// countingConfig is a config whose `count` template appends the request id
// to a file, so a test can tell how often each request really ran.
func countingConfig(t *testing.T, board, node, countFile, extra string) string {
	t.Helper()
	body := fmt.Sprintf(`board: %s
listen: off
work_dir: jobs-%s
templates:
  count:
    command: [/bin/sh, -c, 'echo "$COMPUTEBOARD_REQUEST_ID" >> "$COUNT_FILE"']
    env: {COUNT_FILE: %q}
  slowcount:
    command: [/bin/sh, -c, 'echo "$COMPUTEBOARD_REQUEST_ID" >> "$COUNT_FILE"; sleep 0.5']
    env: {COUNT_FILE: %q}
  sleep:
    command: [sleep]
    allow_arguments: true
    argument_pattern: '[0-9]{1,4}(\.[0-9]{1,3})?'
    max_arguments: 1
node:
  name: %s
  cpu_cores: 64
scheduler:
  interval: 50ms
telemetry:
  interval: 1s
broker:
  claim_idle: 2s
  lease_timeout: 5s
  module_rate: -1
  module_max_waiting: -1
%s`, board, node, countFile, countFile, node, extra)
	return writeConfig(t, body)
}

// proc is an adapter running as a child process.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	out := &syncBuffer{}
	level := "warn"
	if l := os.Getenv("CB_TEST_LOG"); l != "" {
		level = l // debugging: CB_TEST_LOG=debug go test ./integration -run …
	}
	cmd := exec.Command(adapterBinary(t), append([]string{"serve", "--log-level", level}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := deathsig.Start(cmd); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("adapter output:\n%s", p.out.String())
		}
	})
	return p
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// postBurst posts n count requests from module, pipelined, each in one
// MULTI like a redis-py client; it returns the request ids.
func postBurst(t *testing.T, st *blackboard.Store, module, template string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	const batch = 500
	for len(ids) < n {
		var entries []*blackboard.Entry
		for range min(batch, n-len(ids)) {
			entries = append(entries, blackboard.NewEntry(blackboard.RequestTopic, module, json.RawMessage(`{"template":"`+template+`","resource_requirements":{"cpu_cores":0.1,"memory":0.01}}`)))
		}
		got, err := st.PostMany(context.Background(), entries)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// jobStatuses reads the requests' job statuses: from the durable job
// record, or from the compute.job entry for a request refused before it
// became a job (a refusal has an entry but no record).
func jobStatuses(t *testing.T, rdb redis.UniversalClient, st *blackboard.Store, ids []string) map[string]string {
	t.Helper()
	recs := make([]*redis.StringCmd, len(ids))
	ents := make([]*redis.StringCmd, len(ids))
	_, _ = rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for i, id := range ids {
			recs[i] = p.HGet(context.Background(), st.Keys().Job(wire.JobID(id)), "status")
			ents[i] = p.HGet(context.Background(), st.Keys().Entry(wire.JobID(id)), "data")
		}
		return nil
	})
	out := make(map[string]string, len(ids))
	for i := range ids {
		var jd wire.JobData
		switch {
		case recs[i].Val() != "":
			out[ids[i]] = recs[i].Val()
		case ents[i].Val() != "" && json.Unmarshal([]byte(ents[i].Val()), &jd) == nil:
			out[ids[i]] = string(jd.Status)
		default:
			out[ids[i]] = ""
		}
	}
	return out
}

func waitAllTerminal(t *testing.T, rdb redis.UniversalClient, st *blackboard.Store, ids []string, timeout time.Duration) map[string]string {
	t.Helper()
	var sts map[string]string
	last := time.Now()
	eventually(t, timeout, fmt.Sprintf("%d jobs to end", len(ids)), func() bool {
		sts = jobStatuses(t, rdb, st, ids)
		open := 0
		for _, s := range sts {
			if !wire.JobStatus(s).Terminal() {
				open++
			}
		}
		if time.Since(last) > 15*time.Second {
			t.Logf("%d of %d jobs not ended yet", open, len(ids))
			last = time.Now()
		}
		return open == 0
	})
	return sts
}

// waitEntriesAgree waits until every job's compute.job entry, the
// modules' view, says the terminal status its record says (sts, from
// waitAllTerminal). An end whose writer was killed before it mirrored it
// is mirrored by the scheduler within a rescan (30 s) of being 10 s old.
// An entry that is gone is not counted: a board at its capacity evicts
// the oldest entries (20,000 entries here, against the default 10,000),
// the finished jobs' among them.
func waitEntriesAgree(t *testing.T, st *blackboard.Store, ids []string, sts map[string]string) {
	t.Helper()
	last := time.Now()
	eventually(t, 90*time.Second, "every job entry to say its record's end", func() bool {
		n := 0
		var ex []string
		for _, id := range ids {
			if jd, ok := jobData(t, st, id); ok && string(jd.Status) != sts[id] {
				n++
				if len(ex) < 5 {
					ex = append(ex, fmt.Sprintf("%s: entry %s, record %s", id, jd.Status, sts[id]))
				}
			}
		}
		if n > 0 && time.Since(last) > 15*time.Second {
			t.Logf("%d job entries behind their records, such as %v", n, ex)
			last = time.Now()
		}
		return n == 0
	})
}

// intakePending counts the intake messages delivered to consumer and not
// yet acknowledged, over every intake lane of the board (whatever the lane
// scheme: it scans for the streams under the intake prefix).
func intakePending(t *testing.T, rdb redis.UniversalClient, st *blackboard.Store, consumer string) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	iter := rdb.ScanType(ctx, 0, st.Keys().Prefix()+":inbox:compute:*", 100, "stream").Iterator()
	for iter.Next(ctx) {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: iter.Val(), Group: blackboard.InboxGroup,
			Start: "-", End: "+", Count: 100000, Consumer: consumer}).Result()
		if err != nil && !strings.Contains(err.Error(), "NOGROUP") {
			t.Fatal(err)
		}
		n += int64(len(p))
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// runCounts reads how often each request id ran.
func runCounts(t *testing.T, files ...string) map[string]int {
	t.Helper()
	runs := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				runs[line]++
			}
		}
		fh.Close()
	}
	return runs
}

func checkExactlyOnce(t *testing.T, ids []string, sts map[string]string, runs map[string]int) {
	t.Helper()
	bad := 0
	for _, id := range ids {
		if sts[id] != string(wire.JobSucceeded) || runs[id] != 1 {
			bad++
			if bad <= 10 {
				t.Errorf("request %s: job %q, ran %d times; want succeeded once", id, sts[id], runs[id])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d requests did not end exactly once", bad, len(ids))
	}
}

// TestCrashDuringBurst SIGKILLs the adapter during a burst of 10,000
// requests, restarts it, and checks that every request ends exactly once and
// no process is started twice.
func TestCrashDuringBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("long: 10,000 real processes")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	countFile := filepath.Join(dir, "runs")
	cfg := countingConfig(t, board, "crash-node", countFile, "")
	p := startProc(t, "--config", cfg, "--redis", srv.URL(), "--consumer", "crash-a")
	ids := postBurst(t, st, "burster", "count", 10_000)
	eventually(t, 120*time.Second, "a few hundred runs before the crash", func() bool {
		return len(runCounts(t, countFile)) >= 300
	})
	p.kill(t)
	before := len(runCounts(t, countFile))
	// Same consumer and node name: it re-reads its own pending requests and
	// re-attaches the jobs it was running.
	startProc(t, "--config", cfg, "--redis", srv.URL(), "--consumer", "crash-a")
	sts := waitAllTerminal(t, rdb, st, ids, 10*time.Minute)
	checkExactlyOnce(t, ids, sts, runCounts(t, countFile))
	waitEntriesAgree(t, st, ids, sts)
	t.Logf("ran %d before the SIGKILL, %d in all", before, len(ids))
}

// TestTwoAdaptersShareTheGroup runs two adapter processes on one Redis,
// kills one mid-burst, and checks that every request ends exactly once.
func TestTwoAdaptersShareTheGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	fa, fb := filepath.Join(dir, "runs-a"), filepath.Join(dir, "runs-b")
	cfgA := countingConfig(t, board, "node-a", fa, "")
	cfgB := countingConfig(t, board, "node-b", fb, "")
	a := startProc(t, "--config", cfgA, "--redis", srv.URL(), "--consumer", "adapter-a")
	startProc(t, "--config", cfgB, "--redis", srv.URL(), "--consumer", "adapter-b")
	ids := postBurst(t, st, "burster", "count", 2000)
	eventually(t, 120*time.Second, "both adapters running jobs", func() bool {
		return len(runCounts(t, fa)) >= 100 && len(runCounts(t, fb)) >= 100
	})
	a.kill(t)
	// B takes over A's unacknowledged intake (after claim_idle); A comes
	// back, once B has, to settle the jobs it was running when it died.
	eventually(t, 60*time.Second, "adapter b to claim adapter a's pending intake", func() bool {
		return intakePending(t, rdb, st, "adapter-a") == 0
	})
	startProc(t, "--config", cfgA, "--redis", srv.URL(), "--consumer", "adapter-a")
	sts := waitAllTerminal(t, rdb, st, ids, 5*time.Minute)
	runs := runCounts(t, fa, fb)
	checkExactlyOnce(t, ids, sts, runs)
	waitEntriesAgree(t, st, ids, sts)
	na, nb := len(runCounts(t, fa)), len(runCounts(t, fb))
	if na == 0 || nb == 0 {
		t.Errorf("work was not shared: a ran %d, b ran %d", na, nb)
	}
	t.Logf("adapter a ran %d, adapter b ran %d", na, nb)
}

// TestRedisRestartDuringIntake restarts an AOF Redis while requests are
// being posted and consumed; nothing acknowledged is lost.
func TestRedisRestartDuringIntake(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	t.Parallel()
	srv := redistest.StartT(t, redistest.Options{AOF: true, TCP: true})
	rdb := srv.Client(t)
	board := redistest.Namespace(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	countFile := filepath.Join(dir, "runs")
	cfg := countingConfig(t, board, "aof-node", countFile, "")
	startProc(t, "--config", cfg, "--redis", srv.URL())
	var (
		mu  sync.Mutex
		ids []string
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a module posting steadily, retrying through the outage
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e := blackboard.NewEntry(blackboard.RequestTopic, "steady", json.RawMessage(`{"template":"count","resource_requirements":{"cpu_cores":0.1,"memory":0.01}}`))
			e.ID = blackboard.NewID()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := st.Post(ctx, e)
				cancel()
				if err == nil || strings.Contains(err.Error(), "conflict") {
					break
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			mu.Lock()
			ids = append(ids, e.ID)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	eventually(t, 60*time.Second, "some runs", func() bool { return len(runCounts(t, countFile)) >= 50 })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	posted := func() int { mu.Lock(); defer mu.Unlock(); return len(ids) }
	before := posted()
	eventually(t, 60*time.Second, "20 requests posted after the restart", func() bool { return posted() >= before+20 })
	close(stop)
	<-done
	mu.Lock()
	all := append([]string(nil), ids...)
	mu.Unlock()
	sts := waitAllTerminal(t, rdb, st, all, 3*time.Minute)
	checkExactlyOnce(t, all, sts, runCounts(t, countFile))
	t.Logf("%d requests across the restart", len(all))
}

// TestDeadAdapterWorkIsTakenOver kills an adapter that holds queued and
// running jobs and never brings it back: another adapter adopts its queued
// jobs once its heartbeat stops, and ends its running jobs as lost after
// node_timeout (their processes may live on there, so they never run twice).
func TestDeadAdapterWorkIsTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	dir := jobDir(t)
	fa, fb := filepath.Join(dir, "runs-a"), filepath.Join(dir, "runs-b")
	extra := "scheduler:\n  interval: 50ms\n  node_timeout: 3s\n"
	mk := func(node, file string) string {
		c := countingConfig(t, board, node, file, "")
		body := strings.Replace(readFile(t, c), "scheduler:\n  interval: 50ms\n", extra, 1)
		body = strings.Replace(body, "cpu_cores: 64", "cpu_cores: 1", 1)
		return writeConfig(t, body)
	}
	a := startProc(t, "--config", mk("node-a", fa), "--redis", srv.URL(), "--consumer", "dead-a")
	var ids []string
	for range 12 {
		// cpu_cores 1 on a one-core node: A runs them one at a time.
		ids = append(ids, postData(t, st, "planner", `{"template":"slowcount","resource_requirements":{"cpu_cores":1}}`, nil))
	}
	eventually(t, 60*time.Second, "A to accept every request and run some", func() bool {
		sts := jobStatuses(t, rdb, st, ids)
		queued := 0
		for _, s := range sts {
			if s == string(wire.JobQueued) {
				queued++
			}
		}
		return len(runCounts(t, fa)) >= 2 && queued >= 5 && sts[ids[len(ids)-1]] != ""
	})
	a.kill(t)
	startProc(t, "--config", mk("node-b", fb), "--redis", srv.URL(), "--consumer", "alive-b")
	sts := waitAllTerminal(t, rdb, st, ids, 2*time.Minute)
	runs := runCounts(t, fa, fb)
	lost := 0
	for _, id := range ids {
		switch {
		case runs[id] > 1:
			t.Errorf("request %s ran %d times", id, runs[id])
		case sts[id] == string(wire.JobSucceeded) && runs[id] == 1:
		case sts[id] == string(wire.JobFailed):
			lost++ // was running on A when it died
		default:
			t.Errorf("request %s: job %q, ran %d times", id, sts[id], runs[id])
		}
	}
	if lost > 1 {
		t.Errorf("%d jobs lost; only the one running on A when it died may be", lost)
	}
	if nb := len(runCounts(t, fb)); nb < 5 {
		t.Errorf("B ran only %d of A's queued jobs", nb)
	}
}
