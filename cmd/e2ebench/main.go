// Command e2ebench measures a real adapter end to end (issue 10's honest
// benchmarks): it starts `adapter serve` as a child process against the
// Redis given by -redis, each part on a fresh board with its own adapter,
// posts compute.request entries through blackboard.Store.Post as modules
// do, and watches what comes back. Each figure is printed next to a
// baseline measured in the same run, one line of key=value pairs per part:
//
//   - part=throughput: -n trivial jobs (/bin/true, through a template)
//     posted by -posters modules at once; jobs_per_s is -n over the time
//     from the first post until the last compute.job.finished event says
//     succeeded. Each job asks for 1/-concurrency of the node's CPUs, so the
//     adapter runs -concurrency of them at a time; the baseline
//     (side=forkexec) is os/exec of /bin/true, -concurrency at a time, -n
//     in all, in this program. Next to them, the CPU each job cost: the
//     adapter's utime+stime, its waited-for children's (the tasks'
//     supervisors and, through them, the jobs: /proc/<pid>/stat's cutime
//     and cstime) and Redis's (INFO cpu), against this program's children's
//     per fork/exec (getrusage).
//   - part=latency: -latency-n jobs one at a time. The job is this binary
//     in stamp mode (`e2ebench stamp <socket>`, a template with fixed
//     arguments): it sends CLOCK_REALTIME nanoseconds at the start of its
//     main and right before it exits to a unix datagram socket this program
//     listens on, named by its COMPUTEBOARD_REQUEST_ID. post→started is
//     the start stamp minus the time just before Store.Post; exit→succeeded
//     is the time a blocking XREAD of the events stream returned the job's
//     compute.job.finished event (status succeeded) minus the exit stamp.
//     The splits come from the job record (accepted_at, started_at,
//     finished_at, written by the adapter on the same machine's clock). The
//     baseline exec→started is the same stamp program started by os/exec
//     here, one at a time: the time just before os/exec's Run to its
//     start stamp.
//   - part=idle and part=pending: a fresh adapter whose node is filled by
//     one long job (this binary in hold mode, asking for all the node's
//     CPUs); part=idle samples the adapter's utime+stime (/proc/<pid>/stat)
//     over -secs with no job pending; then -pending requests asking for one
//     CPU each (possible on the node, never free) are posted, and once every
//     one is accepted (P:jobs:active) and -secs of CPU are sampled, and
//     then every pending job's record holds its first explanation (the
//     scheduler publishes 50 a second; at most -explain-wait),
//     part=pending reports that CPU, and the growth (from before the
//     requests to after the wait) of Redis's used_memory, of the
//     adapter's VmRSS (/proc/<pid>/status) and of its Go heap
//     (go_memstats_heap_alloc_bytes on /metrics) per pending job, with
//     the least and the most VmRSS of the sample (read twice a second,
//     and the most also from VmHWM, the kernel's peak, reset at the
//     sample's start through /proc/<pid>/clear_refs, so that a peak of a
//     few milliseconds, a full plan's, is not missed); a 10 s
//     sample may or may not hold one of the scheduler's 30 s rescans of
//     the active records (-secs 30 always holds one);
//     part=pending-redis shows where Redis's bytes went (MEMORY USAGE of the
//     board's keys, grouped by kind, per pending job). Its Redis baseline is
//     asynq's bytes per pending task (bench/peers/asynq -pending), run by
//     scripts/bench.sh on the same Redis; part=pending-floor is the same
//     requests posted to a board no adapter reads, less their intake
//     messages and the (capped) event stream: the bytes the poster's own
//     request entries keep, which any layout that keeps the blackboard
//     contract pays (requestFloor).
//
// -adapter names the adapter binary (go build -o DIR/adapter ./cmd/adapter;
// a cb-supervisor binary it runs tasks under, where the build has one, goes
// in the same directory).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/benchutil"
	"github.com/computeboard/computeboard/internal/proctimes"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

func main() {
	// A job of the latency and pending parts is this binary in stamp or
	// hold mode: nothing may run before the start stamp.
	if len(os.Args) > 1 && (os.Args[1] == stampMode || os.Args[1] == holdMode) {
		os.Exit(stampMain(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2ebench:", err)
		os.Exit(1)
	}
}

type options struct {
	adapter       string
	addr, network string
	n, posters    int
	concurrency   int
	latencyN      int
	pending       int
	secs          float64
	explainWait   time.Duration
	parts         map[string]bool
	interval      time.Duration
	perTask       bool
	timeout       time.Duration
	profile       string // directory for the adapter's profiles ("": none)
	profileSecs   int
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("e2ebench", flag.ContinueOnError)
	fs.StringVar(&o.adapter, "adapter", "", "the adapter binary (required)")
	fs.StringVar(&o.addr, "redis", "127.0.0.1:6379", "Redis address (host:port, or a socket path with -network unix)")
	fs.StringVar(&o.network, "network", "tcp", "tcp or unix")
	fs.IntVar(&o.n, "n", 2000, "trivial jobs of the throughput part (and fork/execs of its baseline)")
	fs.IntVar(&o.posters, "posters", 4, "concurrent posters, each its own module")
	fs.IntVar(&o.concurrency, "concurrency", 8, "jobs the node runs at once (each asks for 1/concurrency of its CPUs), and fork/execs at once in the baseline")
	fs.IntVar(&o.latencyN, "latency-n", 200, "jobs of the latency part, one at a time")
	fs.IntVar(&o.pending, "pending", 10000, "unplaceable pending jobs of the pending part")
	fs.Float64Var(&o.secs, "secs", 10, "seconds of each CPU sample (idle, pending)")
	fs.DurationVar(&o.explainWait, "explain-wait", 6*time.Minute, "pending part: how long to wait, after the CPU sample, for every pending job's first explanation before reading memory")
	parts := fs.String("parts", "throughput,latency,pending", "parts to run, comma-separated")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	fs.DurationVar(&o.interval, "scheduler-interval", 0, "the adapters' scheduler.interval (0: the adapter's default)")
	fs.StringVar(&o.profile, "profile", "", "throughput part: write the adapter's CPU profile (-profile-secs from the first post) and its allocations before and after into this directory (adapter-cpu.pprof, adapter-allocs-0.pprof, adapter-allocs-1.pprof: go tool pprof -diff_base); the adapters run with http.profiling")
	fs.IntVar(&o.profileSecs, "profile-secs", 5, "seconds of the adapter's CPU profile (-profile)")
	fs.BoolVar(&o.perTask, "supervisor-per-task", false, "run the adapters' jobs under a supervisor per job (supervisor_per_task), not the supervisor server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.adapter == "" {
		return errors.New("-adapter is required (go build -o DIR/adapter ./cmd/adapter)")
	}
	if o.n < 1 || o.posters < 1 || o.concurrency < 1 || o.latencyN < 1 || o.pending < 1 || o.secs <= 0 || o.profileSecs < 1 {
		return errors.New("-n, -posters, -concurrency, -latency-n, -pending, -secs and -profile-secs must be positive")
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	}
	o.parts = map[string]bool{}
	for p := range strings.SplitSeq(*parts, ",") {
		switch p = strings.TrimSpace(p); p {
		case "throughput", "latency", "pending":
			o.parts[p] = true
		case "":
		default:
			return fmt.Errorf("-parts: unknown part %q (throughput, latency, pending)", p)
		}
	}
	if abs, err := filepath.Abs(o.adapter); err == nil {
		o.adapter = abs
	}
	rdb := redis.NewClient(&redis.Options{Network: o.network, Addr: o.addr, PoolSize: 32})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	b, err := newBench(o, rdb)
	if err != nil {
		return err
	}
	defer b.close()
	g, gctx := errgroup.WithContext(ctx)
	runCtx, stopRun := context.WithCancel(gctx)
	g.Go(func() error { return b.stamps.run(runCtx) })
	g.Go(func() error {
		defer stopRun()
		if o.parts["throughput"] {
			if err := b.throughput(gctx, stdout); err != nil {
				return fmt.Errorf("throughput: %w", err)
			}
		}
		if o.parts["latency"] {
			if err := b.latency(gctx, stdout); err != nil {
				return fmt.Errorf("latency: %w", err)
			}
		}
		if o.parts["pending"] {
			if err := b.pending(gctx, stdout); err != nil {
				return fmt.Errorf("pending: %w", err)
			}
		}
		return nil
	})
	return g.Wait()
}

// bench holds what the parts share: the Redis client, a private directory
// (the stamp socket, the stamp program, adapter configs, logs and job
// output) and the stamp listener.
type bench struct {
	o      options
	rdb    *redis.Client
	dir    string // world-readable: jobs run as "nobody" when this runs as root
	stamp  string // this program, copied into dir, world-executable
	stamps *stampListener
}

func newBench(o options, rdb *redis.Client) (*bench, error) {
	dir, err := os.MkdirTemp("", "e2eb")
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, rdb: rdb, dir: dir, stamp: filepath.Join(dir, "e2ebench")}
	if err := os.Chmod(dir, 0o755); err != nil {
		b.close()
		return nil, err
	}
	if err := copyExecutable(b.stamp); err != nil {
		b.close()
		return nil, fmt.Errorf("copy this program for the stamp jobs: %w", err)
	}
	if b.stamps, err = listenStamps(filepath.Join(dir, "stamp.sock")); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	if b.stamps != nil {
		b.stamps.close()
	}
	_ = os.RemoveAll(b.dir)
}

// copyExecutable copies this program to dst, mode 0755: the test binary
// and the go build cache are not always readable by the jobs' user.
func copyExecutable(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// newBoard returns a fresh board name and a store that posts to it as
// modules do. The store's capacity is the adapter's default.
func (b *bench) newBoard(part string) (string, *blackboard.Store, error) {
	return benchutil.NewBoard(b.rdb, "e2ebench-"+part)
}

// cpuPerJob is the CPU share that lets the node (all of this machine's
// CPUs) run concurrency jobs at once, in thousandths of a core.
func (b *bench) cpuPerJob() float64 {
	return math.Max(wire.MinCPUCores, math.Floor(float64(runtime.NumCPU())*1000/float64(b.o.concurrency))/1000)
}

// jobMemoryGB is each job's memory request: small enough that memory never
// limits how many run, large enough for the stamp program under a cgroup
// memory limit.
const jobMemoryGB = 0.0625

func requestData(template string, cpu float64) []byte {
	d, _ := json.Marshal(map[string]any{"template": template,
		"resource_requirements": map[string]any{"cpu_cores": cpu, "memory": jobMemoryGB}})
	return d
}

// ---- part=throughput ----

func (b *bench) throughput(ctx context.Context, stdout io.Writer) error {
	c0, err := childrenCPU()
	if err != nil {
		return err
	}
	base, err := forkExecRate(ctx, b.o.n, b.o.concurrency)
	if err != nil {
		return fmt.Errorf("fork/exec baseline: %w", err)
	}
	c1, err := childrenCPU()
	if err != nil {
		return err
	}
	forkPerS := float64(b.o.n) / base.Seconds()
	perJob := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(b.o.n) }
	fmt.Fprintf(stdout, "side=forkexec part=throughput n=%d concurrency=%d secs=%.3f per_s=%.0f children_cpu_ms_per_exec=%.3f\n",
		b.o.n, b.o.concurrency, base.Seconds(), forkPerS, perJob(c1-c0))

	board, store, err := b.newBoard("throughput")
	if err != nil {
		return err
	}
	defer benchutil.DropBoard(b.rdb, store.Keys())
	ad, err := b.startAdapter(ctx, "throughput", board, 0)
	if err != nil {
		return err
	}
	defer ad.Stop()

	fin, werr, stopWatch := startWatch(ctx, store, b.o.n+16)
	defer stopWatch()

	data := requestData("true", b.cpuPerJob())
	cpu0, err := b.cpuUse(ctx, ad.Pid())
	if err != nil {
		return err
	}
	runs0, _ := schedulerMetric(ctx, ad, "scheduler_cycles")
	partial0, _ := schedulerMetric(ctx, ad, "scheduler_partial_plans")
	alloc0, err := goMetric(ctx, ad, "go_memstats_alloc_bytes_total")
	if err != nil {
		return err
	}
	profiled := make(chan error, 1)
	if b.o.profile != "" {
		if err := b.saveProfile(ctx, ad, "/debug/pprof/allocs", "adapter-allocs-0.pprof"); err != nil {
			return err
		}
		go func() {
			profiled <- b.saveProfile(ctx, ad, fmt.Sprintf("/debug/pprof/profile?seconds=%d", b.o.profileSecs), "adapter-cpu.pprof")
		}()
	} else {
		profiled <- nil
	}
	gc0, err := goMetric(ctx, ad, "go_gc_duration_seconds_count")
	if err != nil {
		return err
	}
	start := time.Now()
	entryIDs, err := benchutil.PostSpread(ctx, store, b.o.n, b.o.posters, data)
	if err != nil {
		return err
	}
	var end time.Time
	for done := 0; done < b.o.n; done++ {
		select {
		case ev := <-fin:
			if ev.Status != wire.JobSucceeded {
				return fmt.Errorf("job %s ended %s (%s %s); adapter log: %s", ev.JobID, ev.Status, ev.ReasonCode, ev.ErrorCode, ad.LogTail())
			}
			end = ev.observed
		case err := <-werr:
			return fmt.Errorf("watching compute.job.finished: %w", err)
		case <-ad.Exited():
			return fmt.Errorf("%d of %d jobs done: %w", done, b.o.n, ad.ExitError())
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs done: %w", done, b.o.n, ctx.Err())
		}
	}
	took := end.Sub(start)
	if b.o.profile != "" {
		if err := b.saveProfile(ctx, ad, "/debug/pprof/allocs", "adapter-allocs-1.pprof"); err != nil {
			return err
		}
	}
	cpu1, err := b.cpuUse(ctx, ad.Pid())
	if err != nil {
		return err
	}
	runs1, _ := schedulerMetric(ctx, ad, "scheduler_cycles")
	partial1, _ := schedulerMetric(ctx, ad, "scheduler_partial_plans")
	alloc1, err := goMetric(ctx, ad, "go_memstats_alloc_bytes_total")
	if err != nil {
		return err
	}
	gc1, err := goMetric(ctx, ad, "go_gc_duration_seconds_count")
	if err != nil {
		return err
	}
	if err := <-profiled; err != nil {
		return err
	}
	perS := float64(b.o.n) / took.Seconds()
	fmt.Fprintf(stdout, "side=computeboard part=throughput n=%d posters=%d concurrency=%d cpu_per_job=%g secs=%.3f jobs_per_s=%.0f forkexec_per_s=%.0f ratio=%.3f"+
		" adapter_cpu_ms_per_job=%.3f children_cpu_ms_per_job=%.3f redis_cpu_ms_per_job=%.3f forkexec_children_cpu_ms_per_exec=%.3f engine_runs_per_job=%.2f partial_plans_per_job=%.2f"+
		" adapter_alloc_kb_per_job=%.1f adapter_gcs=%d\n",
		b.o.n, b.o.posters, b.o.concurrency, b.cpuPerJob(), took.Seconds(), perS, forkPerS, perS/forkPerS,
		perJob(cpu1.adapter-cpu0.adapter), perJob(cpu1.children-cpu0.children), perJob(cpu1.redis-cpu0.redis), perJob(c1-c0),
		(runs1-runs0)/float64(b.o.n), (partial1-partial0)/float64(b.o.n),
		float64(alloc1-alloc0)/1024/float64(b.o.n), gc1-gc0)
	return b.slotSplit(ctx, stdout, store, entryIDs, took)
}

// slotSplit prints where the node's job slots went during the throughput
// part, from the job records: busy_share is the share of the slots' time
// (concurrency × the run) in which a job was recorded running (from the
// agent's queued → running to its recorded end: starting the process,
// the process, and recording its end); refill_p50_us is the wait from a
// job's end being recorded to the start of the job that takes its place
// (the concurrency-th start after it: the report, the scheduler's cycle,
// the assignment, the agent's read of it and its compare-and-set).
func (b *bench) slotSplit(ctx context.Context, stdout io.Writer, store *blackboard.Store, entryIDs []string, took time.Duration) error {
	cmds := make([]*redis.SliceCmd, len(entryIDs))
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range entryIDs {
			cmds[i] = p.HMGet(ctx, store.Keys().Job(wire.JobID(id)), "started_at", "finished_at")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("job records: %w", err)
	}
	starts, ends := make([]int64, len(cmds)), make([]int64, len(cmds))
	running := make([]time.Duration, len(cmds))
	var busy time.Duration
	for i, c := range cmds {
		v := c.Val()
		starts[i], ends[i] = benchutil.EpochNS(v[0]), benchutil.EpochNS(v[1])
		if starts[i] == 0 || ends[i] == 0 {
			return fmt.Errorf("job record %s lacks started_at or finished_at: %v", wire.JobID(entryIDs[i]), v)
		}
		running[i] = time.Duration(ends[i] - starts[i])
		busy += running[i]
	}
	slices.Sort(starts)
	slices.Sort(ends)
	slices.Sort(running)
	var refill []time.Duration
	for i := 0; i+b.o.concurrency < len(starts); i++ {
		refill = append(refill, time.Duration(starts[i+b.o.concurrency]-ends[i]))
	}
	slices.Sort(refill)
	fmt.Fprintf(stdout, "side=computeboard part=throughput_slots concurrency=%d busy_share=%.2f running_p50_us=%d refill_p50_us=%d\n",
		b.o.concurrency, busy.Seconds()/(float64(b.o.concurrency)*took.Seconds()), quantile(running, 0.5).Microseconds(), quantile(refill, 0.5).Microseconds())
	return nil
}

// cpuUse is what the adapter, its children (the supervisor server or the
// tasks' supervisors and, through them, the jobs: reaped ones and live
// ones) and the Redis server have used so far.
type cpuUse struct{ adapter, children, redis time.Duration }

func (b *bench) cpuUse(ctx context.Context, pid int) (cpuUse, error) {
	t, err := proctimes.Read(pid)
	if err != nil {
		return cpuUse{}, err
	}
	u := cpuUse{adapter: proctimes.Ticks(t[0] + t[1]), children: proctimes.Ticks(t[2]+t[3]) + proctimes.LiveChildren(pid)}
	info, err := b.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return u, err
	}
	for l := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return u, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			u.redis += time.Duration(f * float64(time.Second))
		}
	}
	return u, nil
}

// childrenCPU is the CPU time of this program's waited-for children.
func childrenCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// forkExecRate runs /bin/true n times, concurrency at a time, and returns
// how long it took.
func forkExecRate(ctx context.Context, n, concurrency int) (time.Duration, error) {
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range concurrency {
		g.Go(func() error {
			for next.Add(1) <= int64(n) {
				if err := exec.CommandContext(gctx, "/bin/true").Run(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := g.Wait()
	return time.Since(start), err
}

// finishEvent is a compute.job.finished event and when this program read it.
type finishEvent struct {
	jobs.JobFinishedEvent
	observed time.Time
}

// startWatch runs watchFinished until stop is called, which waits for it
// to end. The watcher's error comes on werr.
func startWatch(ctx context.Context, store *blackboard.Store, buf int) (fin <-chan finishEvent, werr <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan finishEvent, buf)
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- watchFinished(ctx, store, out)
	}()
	return out, errc, func() { cancel(); <-done }
}

// watchFinished sends every compute.job.finished event of the board to
// out, stamped with the time the blocking XREAD that brought it returned
// (so the observation is not on a poll tick). It starts at the board's
// first event: each part has a fresh board.
func watchFinished(ctx context.Context, store *blackboard.Store, out chan<- finishEvent) error {
	cursor := "0"
	for {
		evs, next, err := store.Events(ctx, cursor, jobs.EventJobFinished, 1000, time.Second)
		now := time.Now()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		cursor = next
		for _, ev := range evs {
			f := finishEvent{observed: now}
			if err := json.Unmarshal(ev.Payload, &f.JobFinishedEvent); err != nil {
				return fmt.Errorf("event %s: %w", ev.StreamID, err)
			}
			select {
			case out <- f:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// ---- part=latency ----

func (b *bench) latency(ctx context.Context, stdout io.Writer) error {
	n := b.o.latencyN
	// The baseline: the stamp program, started here one at a time.
	base := make([]time.Duration, n)
	for i := range base {
		id := blackboard.NewID()
		cmd := exec.CommandContext(ctx, b.stamp, stampMode, b.stamps.path)
		cmd.Env = []string{"COMPUTEBOARD_REQUEST_ID=" + id}
		t0 := time.Now().UnixNano()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("stamp baseline: %w", err)
		}
		st, err := b.stamps.wait(ctx, id, true)
		if err != nil {
			return fmt.Errorf("stamp baseline: %w", err)
		}
		base[i] = time.Duration(st.start - t0)
	}
	slices.Sort(base)
	fmt.Fprintf(stdout, "side=forkexec part=latency n=%d exec_to_started_p50_us=%d exec_to_started_p99_us=%d\n",
		n, quantile(base, 0.50).Microseconds(), quantile(base, 0.99).Microseconds())

	board, store, err := b.newBoard("latency")
	if err != nil {
		return err
	}
	defer benchutil.DropBoard(b.rdb, store.Keys())
	ad, err := b.startAdapter(ctx, "latency", board, 0)
	if err != nil {
		return err
	}
	defer ad.Stop()
	fin, werr, stopWatch := startWatch(ctx, store, 16)
	defer stopWatch()

	var postToStarted, exitToSucceeded, postToAccepted, acceptedToRunning, runningToStarted, exitToRecorded, recordedToObserved []time.Duration
	data := requestData("stamp", b.cpuPerJob())
	for range n {
		e := blackboard.NewEntry(blackboard.RequestTopic, "latency", data)
		e.ID = blackboard.NewID()
		jobID := wire.JobID(e.ID)
		posted := time.Now()
		if _, err := store.Post(ctx, e); err != nil {
			return fmt.Errorf("post: %w", err)
		}
		var ev finishEvent
		for ev.JobID != jobID {
			select {
			case ev = <-fin:
			case err := <-werr:
				return fmt.Errorf("watching compute.job.finished: %w", err)
			case <-ad.Exited():
				return ad.ExitError()
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if ev.Status != wire.JobSucceeded {
			return fmt.Errorf("job %s ended %s (%s %s); adapter log: %s", ev.JobID, ev.Status, ev.ReasonCode, ev.ErrorCode, ad.LogTail())
		}
		st, err := b.stamps.wait(ctx, e.ID, true)
		if err != nil {
			return err
		}
		rec, err := b.rdb.HMGet(ctx, store.Keys().Job(jobID), "accepted_at", "started_at", "finished_at").Result()
		if err != nil {
			return fmt.Errorf("job record %s: %w", jobID, err)
		}
		accepted, started, finished := benchutil.EpochNS(rec[0]), benchutil.EpochNS(rec[1]), benchutil.EpochNS(rec[2])
		if accepted == 0 || started == 0 || finished == 0 {
			return fmt.Errorf("job record %s lacks accepted_at, started_at or finished_at: %v", jobID, rec)
		}
		p := posted.UnixNano()
		postToStarted = append(postToStarted, time.Duration(st.start-p))
		exitToSucceeded = append(exitToSucceeded, time.Duration(ev.observed.UnixNano()-st.exit))
		postToAccepted = append(postToAccepted, time.Duration(accepted-p))
		acceptedToRunning = append(acceptedToRunning, time.Duration(started-accepted))
		runningToStarted = append(runningToStarted, time.Duration(st.start-started))
		exitToRecorded = append(exitToRecorded, time.Duration(finished-st.exit))
		recordedToObserved = append(recordedToObserved, time.Duration(ev.observed.UnixNano()-finished))
	}
	for _, d := range [][]time.Duration{postToStarted, exitToSucceeded, postToAccepted, acceptedToRunning, runningToStarted, exitToRecorded, recordedToObserved} {
		slices.Sort(d)
	}
	us := func(d []time.Duration, q float64) int64 { return quantile(d, q).Microseconds() }
	fmt.Fprintf(stdout, "side=computeboard part=latency n=%d post_to_started_p50_us=%d post_to_started_p99_us=%d exit_to_succeeded_p50_us=%d exit_to_succeeded_p99_us=%d forkexec_exec_to_started_p50_us=%d forkexec_exec_to_started_p99_us=%d"+
		" post_to_accepted_p50_us=%d accepted_to_running_p50_us=%d running_to_started_p50_us=%d exit_to_recorded_p50_us=%d recorded_to_observed_p50_us=%d"+
		" post_to_accepted_p99_us=%d accepted_to_running_p99_us=%d running_to_started_p99_us=%d exit_to_recorded_p99_us=%d recorded_to_observed_p99_us=%d\n",
		n, us(postToStarted, 0.5), us(postToStarted, 0.99), us(exitToSucceeded, 0.5), us(exitToSucceeded, 0.99),
		us(base, 0.5), us(base, 0.99),
		us(postToAccepted, 0.5), us(acceptedToRunning, 0.5), us(runningToStarted, 0.5), us(exitToRecorded, 0.5), us(recordedToObserved, 0.5),
		us(postToAccepted, 0.99), us(acceptedToRunning, 0.99), us(runningToStarted, 0.99), us(exitToRecorded, 0.99), us(recordedToObserved, 0.99))
	return nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

// ---- part=idle and part=pending ----

func (b *bench) pending(ctx context.Context, stdout io.Writer) error {
	board, store, err := b.newBoard("pending")
	if err != nil {
		return err
	}
	defer benchutil.DropBoard(b.rdb, store.Keys())
	ad, err := b.startAdapter(ctx, "pending", board, b.o.pending+1000)
	if err != nil {
		return err
	}
	defer ad.Stop()

	// Fill the node: one job holding all its CPUs, until it is killed
	// below (or, should this program die, for no longer than -timeout).
	cpus := float64(runtime.NumCPU())
	hold := blackboard.NewEntry(blackboard.RequestTopic, "filler", requestData("hold", cpus))
	hold.ID = blackboard.NewID()
	if _, err := store.Post(ctx, hold); err != nil {
		return fmt.Errorf("post the filler: %w", err)
	}
	st, err := b.stamps.wait(ctx, hold.ID, false)
	if err != nil {
		return fmt.Errorf("the filler did not start: %w; adapter log: %s", err, ad.LogTail())
	}
	// Stop the adapter first (so the pending jobs never start), then the
	// filler, which this program started through it.
	defer func() {
		ad.Stop()
		if st.pid > 0 && syscall.Kill(st.pid, syscall.SIGKILL) == nil {
			// Until its supervisor has reaped it and so is done with the
			// task directory, which close removes.
			for range 250 {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", st.pid)); err != nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	active := func() (int64, error) { return b.rdb.ZCard(ctx, store.Keys().JobsActive()).Result() }
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}

	idle, err := cpuPercent(ctx, ad.Pid(), b.o.secs)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "side=computeboard part=idle pending=0 secs=%g cpu_pct=%.2f\n", b.o.secs, idle)
	mem0, err := b.measureMemory(ctx, ad)
	if err != nil {
		return err
	}

	data := requestData("true", 1)
	ids, err := benchutil.PostSpread(ctx, store, b.o.pending, b.o.posters, data)
	if err != nil {
		return err
	}
	want := int64(b.o.pending) + 1 // and the filler
	for {
		n, err := active()
		if err != nil {
			return err
		}
		if n == want {
			break
		}
		select {
		case <-ad.Exited():
			return fmt.Errorf("%d of %d jobs accepted: %w", n-1, b.o.pending, ad.ExitError())
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs accepted: %w", n-1, b.o.pending, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	busy, rss, err := cpuAndRSS(ctx, ad.Pid(), b.o.secs)
	if err != nil {
		return err
	}
	// Memory is read once every pending job has its first explanation on
	// its record and job entry, as it has in a queue that has waited a
	// while: the scheduler publishes 50 a second, so 10,000 take over 3
	// minutes, and a reading right after the CPU sample would leave most
	// of them out.
	explained, waited, err := b.waitExplained(ctx, store.Keys(), ids, ad)
	if err != nil {
		return err
	}
	mem1, err := b.measureMemory(ctx, ad)
	if err != nil {
		return err
	}
	if n, err := active(); err != nil || n != want {
		return fmt.Errorf("after the sample: %d jobs active, want %d (%v)", n, want, err)
	}
	per := func(a, b int64) float64 { return float64(b-a) / float64(want-1) }
	fmt.Fprintf(stdout, "side=computeboard part=pending pending=%d secs=%g cpu_pct=%.2f idle_cpu_pct=%.2f redis_bytes_per_job=%.0f rss_bytes_per_job=%.0f heap_bytes_per_job=%.0f rss_min_bytes_per_job=%.0f rss_max_bytes_per_job=%.0f explained=%d explain_wait_s=%.0f\n",
		b.o.pending, b.o.secs, busy, idle, per(mem0.redis, mem1.redis), per(mem0.rss, mem1.rss), per(mem0.heap, mem1.heap),
		per(mem0.rss, min(rss.lo, mem1.rss)), per(mem0.rss, max(rss.hi, mem1.rss)), explained, waited.Seconds())
	kinds, err := keyKinds(ctx, b.rdb, store.Keys())
	if err != nil {
		return err
	}
	var sb strings.Builder
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range kinds {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&sb, " %s=%.0f", k, float64(kinds[k])/float64(want-1))
	}
	fmt.Fprintf(stdout, "side=computeboard part=pending-redis pending=%d bytes_per_job_by_key:%s\n", b.o.pending, sb.String())
	floor, err := b.requestFloor(ctx, data)
	if err != nil {
		return fmt.Errorf("pending-floor: %w", err)
	}
	fmt.Fprintf(stdout, "side=computeboard part=pending-floor pending=%d request_bytes_per_job=%.0f\n", b.o.pending, floor)
	return nil
}

// waitExplained waits until the record of every job of the requests ids
// holds an explanation, in its HASH or in the key beside it that holds a
// long one (checked every 2 s, one pipeline), for at
// most -explain-wait; it returns how many do and how long it waited. The
// adapter exiting meanwhile is an error.
func (b *bench) waitExplained(ctx context.Context, k blackboard.Keys, ids []string, ad *benchutil.Adapter) (int, time.Duration, error) {
	start := time.Now()
	for {
		inHash := make([]*redis.BoolCmd, len(ids))
		beside := make([]*redis.IntCmd, len(ids))
		if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				inHash[i] = p.HExists(ctx, k.Job(wire.JobID(id)), "explanation")
				beside[i] = p.Exists(ctx, k.JobField(wire.JobID(id), "explanation"))
			}
			return nil
		}); err != nil {
			return 0, 0, fmt.Errorf("explanations: %w", err)
		}
		n := 0
		for i := range ids {
			if inHash[i].Val() || beside[i].Val() == 1 {
				n++
			}
		}
		waited := time.Since(start)
		if n == len(ids) || waited >= b.o.explainWait {
			return n, waited, nil
		}
		select {
		case <-ad.Exited():
			return 0, 0, fmt.Errorf("%d of %d jobs explained: %w", n, len(ids), ad.ExitError())
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// requestFloor is the pending part's same-run floor: Redis's bytes per
// request of -pending requests with the same data posted to a fresh board
// that no adapter reads, with their intake messages then deleted (the
// adapter deletes each when it accepts the request) and the event stream
// too (its length is capped, so it is not a cost per request). What is
// left is what the blackboard contract has the poster write and keep for
// as long as its job is pending (the request entry's HASH and its index
// members), before computeboard writes anything; with Redis's default
// hash-max-listpack-value (64) a request whose data is longer than that
// is kept as a hash table.
func (b *bench) requestFloor(ctx context.Context, data []byte) (float64, error) {
	_, store, err := b.newBoard("floor")
	if err != nil {
		return 0, err
	}
	defer benchutil.DropBoard(b.rdb, store.Keys())
	m0, err := usedMemory(ctx, b.rdb)
	if err != nil {
		return 0, err
	}
	if _, err := benchutil.PostSpread(ctx, store, b.o.pending, b.o.posters, data); err != nil {
		return 0, err
	}
	var lanes []string
	iter := b.rdb.Scan(ctx, 0, store.Keys().Prefix()+":inbox:*", 1000).Iterator()
	for iter.Next(ctx) {
		lanes = append(lanes, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	if len(lanes) == 0 {
		return 0, errors.New("no intake lane found after posting")
	}
	// DEL, not UNLINK: the memory must be freed before it is read.
	if err := b.rdb.Del(ctx, append(lanes, store.Keys().Events())...).Err(); err != nil {
		return 0, err
	}
	m1, err := usedMemory(ctx, b.rdb)
	if err != nil {
		return 0, err
	}
	return float64(m1-m0) / float64(b.o.pending), nil
}

type memory struct{ redis, rss, heap int64 }

func (b *bench) measureMemory(ctx context.Context, ad *benchutil.Adapter) (memory, error) {
	var m memory
	var err error
	if m.redis, err = usedMemory(ctx, b.rdb); err != nil {
		return m, err
	}
	if m.rss, err = vmRSS(ad.Pid()); err != nil {
		return m, err
	}
	m.heap, err = heapAlloc(ctx, ad)
	return m, err
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}

// vmRSS is the resident set of process pid, in bytes.
func vmRSS(pid int) (int64, error) { return vmStatus(pid, "VmRSS") }

// vmStatus is field (VmRSS, VmHWM) of process pid's /proc status, in bytes.
func vmStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// cpuPercent samples process pid's CPU time over secs seconds, as a
// percentage of one core.
func cpuPercent(ctx context.Context, pid int, secs float64) (float64, error) {
	t0, err := proctimes.Read(pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := sleep(ctx, time.Duration(secs*float64(time.Second))); err != nil {
		return 0, err
	}
	t1, err := proctimes.Read(pid)
	if err != nil {
		return 0, err
	}
	used := proctimes.Ticks(t1[0] + t1[1] - t0[0] - t0[1])
	return 100 * used.Seconds() / time.Since(start).Seconds(), nil
}

// rssRange is the least and the most resident set seen over a sample.
type rssRange struct{ lo, hi int64 }

// cpuAndRSS is cpuPercent, with the process's resident set read twice a
// second meanwhile: with work in flight (garbage not yet collected, or
// freed pages not yet returned) one reading is a point in a swing, so the
// range is printed beside it. Its top is the kernel's peak over the
// sample (VmHWM) where it could be reset at the start.
func cpuAndRSS(ctx context.Context, pid int, secs float64) (float64, rssRange, error) {
	r := rssRange{lo: math.MaxInt64}
	// "5" resets the peak resident set (VmHWM) to the current one (Linux
	// 4.0 and later; the process is this user's): read after the sample,
	// it is the sample's peak, however short.
	peak := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // ends with done
		defer close(sampled)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := vmRSS(pid); err == nil {
				r.lo, r.hi = min(r.lo, v), max(r.hi, v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	pct, err := cpuPercent(ctx, pid, secs)
	close(done)
	<-sampled
	if hwm, herr := vmStatus(pid, "VmHWM"); peak && herr == nil {
		r.hi = max(r.hi, hwm)
	}
	return pct, r, err
}

// keyKinds sums MEMORY USAGE of the board's keys by kind: the key's name
// after the board's prefix, up to its first id (entry, job, jobs:idem,
// inbox:compute:m, events, topic:compute.request, …).
func keyKinds(ctx context.Context, rdb *redis.Client, k blackboard.Keys) (map[string]int64, error) {
	out := map[string]int64{}
	iter := rdb.Scan(ctx, 0, k.Prefix()+":*", 1000).Iterator()
	var batch []string
	flush := func() error {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(batch))
		for i, key := range batch {
			cmds[i] = pipe.MemoryUsage(ctx, key)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, key := range batch {
			out[keyKind(strings.TrimPrefix(key, k.Prefix()+":"))] += cmds[i].Val()
		}
		batch = batch[:0]
		return nil
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// keyKind names a key (without the board's prefix) by its kind: entry
// (the entries' HASHes: requests and compute.job entries), job (records),
// jobs:idem, jobs:active, events, all, prio, source, topic:<topic>, inbox
// (intake lanes and their registry), or other.
func keyKind(rest string) string {
	for _, p := range []string{"entry:", "job:", "jobs:idem", "jobs:active", "events", "all", "prio:", "source:", "inbox:"} {
		if strings.HasPrefix(rest, p) {
			return strings.TrimSuffix(p, ":")
		}
	}
	if strings.HasPrefix(rest, "topic:") {
		return rest
	}
	return "other"
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ---- the adapter ----

// nodeName is the node every adapter of the benchmark serves (each on its
// own board).
const nodeName = "e2ebench"

// startAdapter writes a config for board and starts an adapter serving
// this machine as one node, and waits until it is the scheduler and its
// node is registered. maxPending 0 keeps the default.
func (b *bench) startAdapter(ctx context.Context, part, board string, maxPending int) (*benchutil.Adapter, error) {
	dir := filepath.Join(b.dir, part)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	redisURL := benchutil.RedisURL(b.o.network, b.o.addr)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "board: %q\nredis: %q\nlisten: 127.0.0.1:0\nwork_dir: %q\n", board, redisURL, filepath.Join(dir, "jobs"))
	if b.o.perTask {
		fmt.Fprintf(&cfg, "supervisor_per_task: true\n")
	}
	if b.o.profile != "" {
		fmt.Fprintf(&cfg, "operator_token: %s\nhttp:\n  profiling: true\n", profileToken)
	}
	fmt.Fprintf(&cfg, "node:\n  name: %s\n  cpu_cores: %d\n", nodeName, runtime.NumCPU())
	fmt.Fprintf(&cfg, "templates:\n")
	fmt.Fprintf(&cfg, "  \"true\": {command: [/bin/true]}\n")
	fmt.Fprintf(&cfg, "  stamp: {command: [%q, %s, %q]}\n", b.stamp, stampMode, b.stamps.path)
	fmt.Fprintf(&cfg, "  hold: {command: [%q, %s, %q, %q]}\n", b.stamp, holdMode, b.stamps.path, strconv.Itoa(int(b.o.timeout.Seconds())))
	// The per-module admission limits are off (as in cmd/cbbench): with
	// them one fast poster is refused (rate_limited, inbox_full), and the
	// run measures the limiter, not the path.
	fmt.Fprintf(&cfg, "broker:\n  module_rate: -1\n  module_max_waiting: -1\n")
	fmt.Fprintf(&cfg, "scheduler:\n")
	if maxPending > 0 {
		fmt.Fprintf(&cfg, "  max_pending: %d\n", maxPending)
	}
	if b.o.interval > 0 {
		fmt.Fprintf(&cfg, "  interval: %s\n", b.o.interval)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return nil, err
	}
	return benchutil.StartAdapter(ctx, b.o.adapter, cfgPath, filepath.Join(dir, "adapter.log"), func(nodes string) bool {
		return strings.Contains(nodes, `"`+nodeName+`"`)
	})
}

// schedulerMetric reads one of the scheduler's own figures (the metrics
// of GET /api/v1/scheduler), e.g. scheduler_cycles: its engine runs.
func schedulerMetric(ctx context.Context, ad *benchutil.Adapter, name string) (float64, error) {
	body, err := ad.Get(ctx, "/api/v1/scheduler")
	if err != nil {
		return 0, err
	}
	var v struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return 0, err
	}
	return v.Metrics[name], nil
}

// profileToken is the operator token of the adapters -profile starts.
const profileToken = "e2ebench-profile"

// saveProfile writes the adapter's profile at path into -profile's
// directory as name.
func (b *bench) saveProfile(ctx context.Context, ad *benchutil.Adapter, path, name string) error {
	body, err := ad.GetWith(ctx, path, profileToken)
	if err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	return os.WriteFile(filepath.Join(b.o.profile, name), []byte(body), 0o644)
}

// heapAlloc reads go_memstats_heap_alloc_bytes from the adapter's /metrics.
func heapAlloc(ctx context.Context, ad *benchutil.Adapter) (int64, error) {
	return goMetric(ctx, ad, "go_memstats_heap_alloc_bytes")
}

// goMetric reads the Go runtime's metric name (a gauge or counter
// without labels) from the adapter's /metrics.
func goMetric(ctx context.Context, ad *benchutil.Adapter, name string) (int64, error) {
	body, err := ad.Get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// ---- stamps ----

const (
	stampMode = "stamp" // e2ebench stamp <socket>: start and exit stamps
	holdMode  = "hold"  // e2ebench hold <socket> <secs>: a start stamp, then sleep
)

// stampMain is the job side: it sends "S <request id> <unix ns> <pid>" as
// the first thing it does and, in stamp mode, "E <request id> <unix ns>"
// right before it exits. The request id is COMPUTEBOARD_REQUEST_ID, which
// the adapter sets for every job.
func stampMain(args []string) int {
	start := time.Now().UnixNano()
	if len(args) < 2 || (args[0] == holdMode && len(args) != 3) {
		fmt.Fprintln(os.Stderr, "usage: e2ebench stamp <socket> | e2ebench hold <socket> <secs>")
		return 2
	}
	c, err := net.Dial("unixgram", args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2ebench stamp:", err)
		return 1
	}
	defer c.Close()
	id := os.Getenv("COMPUTEBOARD_REQUEST_ID")
	if _, err := fmt.Fprintf(c, "S %s %d %d", id, start, os.Getpid()); err != nil {
		fmt.Fprintln(os.Stderr, "e2ebench stamp:", err)
		return 1
	}
	if args[0] == holdMode {
		secs, _ := strconv.Atoi(args[2])
		time.Sleep(time.Duration(secs) * time.Second)
		return 0
	}
	if _, err := fmt.Fprintf(c, "E %s %d", id, time.Now().UnixNano()); err != nil {
		fmt.Fprintln(os.Stderr, "e2ebench stamp:", err)
		return 1
	}
	return 0
}

// stamp is what one job sent.
type stamp struct {
	start, exit int64 // unix ns; 0 until received
	pid         int
}

// stampListener receives the jobs' stamps on a unix datagram socket that
// any user may write to (the jobs may run as another user).
type stampListener struct {
	path string
	conn *net.UnixConn

	mu    sync.Mutex
	got   map[string]*stamp // by request id; guarded by mu
	wake  chan struct{}     // capacity 1: a stamp arrived
	cerr  error             // the read loop's end; guarded by mu
	close func()
}

func listenStamps(path string) (*stampListener, error) {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o777); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetReadBuffer(1 << 20)
	l := &stampListener{path: path, conn: conn, got: map[string]*stamp{}, wake: make(chan struct{}, 1)}
	l.close = sync.OnceFunc(func() { conn.Close() })
	return l, nil
}

// run reads stamps until ctx is done.
func (l *stampListener) run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, l.close)
	defer stop()
	buf := make([]byte, 512)
	for {
		n, err := l.conn.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.mu.Lock()
			l.cerr = err
			l.mu.Unlock()
			l.notify()
			return fmt.Errorf("stamp socket: %w", err)
		}
		f := strings.Fields(string(buf[:n]))
		if len(f) < 3 {
			continue
		}
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		l.mu.Lock()
		s := l.got[f[1]]
		if s == nil {
			s = &stamp{}
			l.got[f[1]] = s
		}
		switch f[0] {
		case "S":
			s.start = ns
			if len(f) > 3 {
				s.pid, _ = strconv.Atoi(f[3])
			}
		case "E":
			s.exit = ns
		}
		l.mu.Unlock()
		l.notify()
	}
}

func (l *stampListener) notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// wait returns request id's stamps once its start stamp (and, with exit,
// its exit stamp) arrived, and forgets them. It gives up after a minute.
func (l *stampListener) wait(ctx context.Context, id string, exit bool) (stamp, error) {
	timeout := time.After(time.Minute)
	for {
		l.mu.Lock()
		s, cerr := l.got[id], l.cerr
		if s != nil && s.start != 0 && (!exit || s.exit != 0) {
			delete(l.got, id)
			l.mu.Unlock()
			return *s, nil
		}
		l.mu.Unlock()
		if cerr != nil {
			return stamp{}, cerr
		}
		select {
		case <-l.wake: // one waiter at a time: the parts wait in turn
		case <-timeout:
			return stamp{}, fmt.Errorf("no stamp from request %s after a minute", id)
		case <-ctx.Done():
			return stamp{}, ctx.Err()
		}
	}
}
