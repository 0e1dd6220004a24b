// Command cbbench measures computeboard's intake as a poster sees it: from
// blackboard.Store.Post of a compute.request to the moment its job is
// durable (job record, job entry, request consumed, message acked). It is
// the computeboard side of scripts/bench.sh, run against the same Redis as
// the asynq peer in bench/peers/asynq, and prints one line of key=value
// pairs.
//
// Posters: -clients goroutines share one go-redis client and call
// Store.Post, one request per call, each as its own module (poster<i>).
// Intake: one loop calling Broker.NextBatch(64) and Broker.AcceptBatch, as
// the scheduler's intake does (dispatch/intake.go). The store and the broker run
// with the adapter's defaults except the per-module admission limits
// (ModuleRate, ModuleMaxWaiting), which are off: with them a single fast
// poster is rejected (rate_limited, inbox_full) and the run measures the
// limiter, not the path. The engine and process starts are not included.
//
// Besides the rate and latencies it prints the CPU time per request of
// this process (posters and intake: go_cpu_us_per_req) and of the Redis
// server (redis_cpu_us_per_req, from INFO), less noisy than rates on a busy
// machine, and redis_bytes_per_job: Redis's used_memory after the run less
// before it, per request (every job still pending: the requests, records,
// job entries, their indexes and events). -cpuprofile writes a CPU profile;
// -keep leaves the board in Redis to inspect.
//
// With -post-only there is no intake: the posters' Store.Post alone
// (path=post-only), with its rate and CPU figures, and a check that every
// request entry and intake message is there. Its redis_cpu_us_per_req is
// the Redis work the contract's post costs before computeboard does
// anything; scripts/bench.sh prints it beside the whole path's and asynq's.
//
// With -rate 0 the posters go as fast as they can and req_per_s is the
// rate until the last job is durable; with -rate R they offer R requests/s
// together, and p50_us/p99_us are the post→accepted latency at that load.
// After the timed part it checks that every job exists (jobs:active) and
// that no intake message is left unacknowledged, and fails otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/internal/benchutil"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cbbench:", err)
		os.Exit(1)
	}
}

// intakeBatch is the adapter's batch size (internal/adapter's intakeBatch).
const intakeBatch = 64

// requestData is a minimal valid request.
const requestData = `{"command":["echo","hi"]}`

type options struct {
	addr, network string
	clients, n    int
	rate          float64
	timeout       time.Duration
	cpuprofile    string
	keep          bool
	postOnly      bool
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("cbbench", flag.ContinueOnError)
	fs.StringVar(&o.addr, "redis", "127.0.0.1:6379", "Redis address (host:port, or a socket path with -network unix)")
	fs.StringVar(&o.network, "network", "tcp", "tcp or unix")
	fs.IntVar(&o.clients, "clients", 10, "concurrent posters")
	fs.IntVar(&o.n, "n", 10000, "requests in all")
	fs.Float64Var(&o.rate, "rate", 0, "requests/s offered by all posters together; 0: as fast as they can")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.BoolVar(&o.keep, "keep", false, "leave the run's board in Redis (to inspect it) instead of deleting it")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the run (posters and intake) to this file")
	fs.BoolVar(&o.postOnly, "post-only", false, "posters only, no intake: what Store.Post alone costs (path=post-only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.clients < 1 || o.n < 1 {
		return errors.New("-clients and -n must be at least 1")
	}
	rdb := redis.NewClient(&redis.Options{Network: o.network, Addr: o.addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.addr, err)
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := measure(ctx, rdb, o)
	if err != nil {
		return err
	}
	n := float64(o.n)
	if o.postOnly {
		_, err = fmt.Fprintf(stdout, "side=computeboard path=post-only clients=%d n=%d rate=%g secs=%.3f req_per_s=%.0f go_cpu_us_per_req=%.1f redis_cpu_us_per_req=%.1f redis_bytes_per_req=%.0f entries=%d\n",
			o.clients, o.n, o.rate, r.elapsed.Seconds(), n/r.elapsed.Seconds(),
			float64(r.goCPU.Microseconds())/n, float64(r.redisCPU.Microseconds())/n, float64(r.memBytes)/n, r.jobs)
		return err
	}
	_, err = fmt.Fprintf(stdout, "side=computeboard path=post-to-durable-job clients=%d n=%d rate=%g secs=%.3f req_per_s=%.0f p50_us=%d p99_us=%d go_cpu_us_per_req=%.1f redis_cpu_us_per_req=%.1f redis_bytes_per_job=%.0f jobs=%d unacked=%d\n",
		o.clients, o.n, o.rate, r.elapsed.Seconds(), n/r.elapsed.Seconds(),
		r.quantile(0.50).Microseconds(), r.quantile(0.99).Microseconds(),
		float64(r.goCPU.Microseconds())/n, float64(r.redisCPU.Microseconds())/n, float64(r.memBytes)/n, r.jobs, r.unacked)
	return err
}

type result struct {
	elapsed time.Duration
	lat     []time.Duration // sorted
	jobs    int64           // job records active after the run (-post-only: request entries)
	unacked int64           // intake messages still pending after the run
	// CPU time of this process (posters and intake together) and of the
	// Redis server during the timed part: less noisy than rates on a busy
	// machine.
	goCPU, redisCPU time.Duration
	// memBytes is Redis's used_memory after the run less before it: what
	// n pending jobs (their requests, records, entries, indexes and
	// events) hold.
	memBytes int64
}

func (r result) quantile(q float64) time.Duration {
	return r.lat[int(q*float64(len(r.lat)-1))]
}

func measure(ctx context.Context, rdb *redis.Client, o options) (result, error) {
	// A fresh board per run: nothing from an earlier run is read, evicted
	// or counted.
	ns := fmt.Sprintf("cbbench-%d-%d", os.Getpid(), time.Now().UnixNano())
	discard := slog.New(slog.DiscardHandler)
	store, err := blackboard.New(rdb, blackboard.Config{Namespace: ns, MaxEntries: 100000, Clock: clock.Real{}, Logger: discard})
	if err != nil {
		return result{}, err
	}
	br, err := broker.New(rdb, store, broker.Config{Consumer: "cbbench", ModuleRate: -1, ModuleMaxWaiting: -1,
		Clock: clock.Real{}, Logger: discard})
	if err != nil {
		return result{}, err
	}
	if err := br.EnsureGroups(ctx); err != nil {
		return result{}, err
	}
	if !o.keep {
		defer benchutil.DropBoard(rdb, store.Keys())
	}

	entries := make([]*blackboard.Entry, o.n)
	index := make(map[string]int, o.n) // entry id → request number; read-only once posting starts
	for i := range entries {
		e := blackboard.NewEntry(blackboard.RequestTopic, fmt.Sprint("poster", i%o.clients), []byte(requestData))
		e.ID = blackboard.NewID()
		entries[i] = e
		index[e.ID] = i
	}
	mem0, rcpu0, err := redisUsage(ctx, rdb)
	if err != nil {
		return result{}, err
	}
	sent := make([]atomic.Int64, o.n) // unix ns just before Post
	lat := make([]time.Duration, o.n)

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	runCtx, stopRun := context.WithCancel(gctx)
	g.Go(func() error { return ignoreCancel(store.Run(runCtx)) })
	if !o.postOnly { // nothing reads the lanes
		g.Go(func() error { return ignoreCancel(br.Run(runCtx)) })
	}

	gcpu0 := processCPU()
	start := time.Now()
	var end time.Time
	var posted atomic.Int64
	g.Go(func() error { // the adapter's intake loop
		if o.postOnly {
			return nil
		}
		left := o.n
		for left > 0 {
			ds, err := br.NextBatch(gctx, intakeBatch)
			if err != nil {
				return fmt.Errorf("next batch (%d requests left): %w", left, err)
			}
			results := br.AcceptBatch(gctx, ds)
			now := time.Now()
			for i, r := range results {
				if r.Err != nil {
					return fmt.Errorf("accept %s: %w", ds[i].EntryID, r.Err)
				}
				if !r.Created || r.Job.Status != wire.JobQueued {
					return fmt.Errorf("accept %s: job %s is %s (created %v), want a new queued job", ds[i].EntryID, r.Job.JobID, r.Job.Status, r.Created)
				}
				k, ok := index[ds[i].EntryID]
				if !ok {
					return fmt.Errorf("accept: unknown request %s", ds[i].EntryID)
				}
				lat[k] = time.Duration(now.UnixNano() - sent[k].Load())
				left--
			}
		}
		end = time.Now()
		stopRun()
		return nil
	})
	for c := range o.clients {
		g.Go(func() error {
			for i := c; i < o.n; i += o.clients {
				if o.rate > 0 {
					due := start.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				sent[i].Store(time.Now().UnixNano())
				if _, err := store.Post(gctx, entries[i]); err != nil {
					return fmt.Errorf("post: %w", err)
				}
				if o.postOnly && posted.Add(1) == int64(o.n) {
					end = time.Now()
					stopRun()
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return result{}, err
	}
	r := result{elapsed: end.Sub(start), lat: lat, goCPU: processCPU() - gcpu0}
	slices.Sort(r.lat)
	bg := context.Background()
	mem1, rcpu1, err := redisUsage(bg, rdb)
	if err != nil {
		return result{}, err
	}
	r.memBytes, r.redisCPU = mem1-mem0, rcpu1-rcpu0
	lanes, err := rdb.SMembers(bg, store.Keys().InboxLanes()).Result()
	if err != nil {
		return result{}, err
	}
	if o.postOnly {
		return r, postedCheck(bg, rdb, store.Keys(), lanes, o.n, &r)
	}
	if r.jobs, err = rdb.ZCard(bg, store.Keys().JobsActive()).Result(); err != nil {
		return result{}, err
	}
	for _, l := range lanes {
		p, err := rdb.XPending(bg, store.Keys().ModuleInboxes()+l, blackboard.InboxGroup).Result()
		if err != nil {
			return result{}, fmt.Errorf("xpending %s: %w", l, err)
		}
		r.unacked += p.Count
	}
	if r.jobs != int64(o.n) || r.unacked != 0 {
		return r, fmt.Errorf("after the run: %d job records active, want %d; %d intake messages unacknowledged, want 0", r.jobs, o.n, r.unacked)
	}
	return r, nil
}

// postedCheck is measure's check for -post-only: every request entry (its
// count goes into r.jobs) and every intake message on lanes was written.
func postedCheck(ctx context.Context, rdb *redis.Client, keys blackboard.Keys, lanes []string, n int, r *result) error {
	var err error
	if r.jobs, err = rdb.ZCard(ctx, keys.Topic(blackboard.RequestTopic)).Result(); err != nil {
		return err
	}
	var msgs int64
	for _, l := range lanes {
		m, err := rdb.XLen(ctx, keys.ModuleInboxes()+l).Result()
		if err != nil {
			return fmt.Errorf("xlen %s: %w", l, err)
		}
		msgs += m
	}
	if r.jobs != int64(n) || msgs != int64(n) {
		return fmt.Errorf("after the posts: %d request entries, %d intake messages; want %d of each", r.jobs, msgs, n)
	}
	return nil
}

// redisUsage reads used_memory and the server's CPU time (user + sys)
// from INFO.
func redisUsage(ctx context.Context, rdb *redis.Client) (mem int64, cpu time.Duration, err error) {
	info, err := rdb.Info(ctx, "memory", "cpu").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis info: %w", err)
	}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			mem, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += time.Duration(f * float64(time.Second))
		}
	}
	return mem, cpu, nil
}

// processCPU is this process's CPU time so far (user + sys).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
