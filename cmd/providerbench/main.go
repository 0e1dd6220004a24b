// Command providerbench measures computeboard over a backend provider
// against the backend's own submission, in the same run, on the same
// cluster. The backend is Slurm: it starts a real single-node Slurm
// (internal/slurmtest: slurmctld, slurmd, slurmrestd with JWT; needs root
// and the Slurm packages) and an `adapter serve` (-adapter) on the Redis
// given by -redis whose only provider is that cluster's partition, once
// per transport (-transports: cli, rest). Every job is the same trivial
// program: a shell that appends "<id> <CLOCK_REALTIME ns>" to a stamp file
// as it starts, so both sides are timed by the job's own start.
//
// One line of key=value pairs per figure:
//
//   - side=sbatch part=throughput: -n `sbatch` calls in a loop, one after
//     the other (--uid=nobody, --export=NONE, --nodelist, --cpus-per-task
//     and --mem as the provider passes them); submit_per_s is -n over the
//     loop's time, started_per_s -n over the time from the first call to
//     the last job's start stamp.
//   - side=computeboard part=throughput transport=T: -n compute.request
//     entries posted through blackboard.Store.Post by -posters modules at
//     once; started_per_s is -n over the time from the first post to the
//     last job's start stamp, with ratio (to sbatch's started_per_s),
//     overhead_ms_per_job (1000/started_per_s minus sbatch's) and
//     overhead_pct (that over sbatch's time per job).
//   - side=sbatch part=latency: -latency-n jobs one at a time, from just
//     before sbatch runs to the job's start stamp (p50, p99).
//   - side=computeboard part=latency transport=T: the same from just
//     before Store.Post, with overhead_p50_ms (minus sbatch's p50) and
//     ratio_p50.
//
// Jobs run as nobody on both sides (the adapter runs as root, its tasks
// as run_as' default). The node declares -slots CPUs (default 256, more
// than -n): every job can start at once, so both sides measure getting
// jobs started, not how soon a slot is free again (Slurm frees it when
// the job ends; the pool's scheduler when the agent has seen the end,
// within the provider's poll interval).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/benchutil"
	"github.com/computeboard/computeboard/internal/slurmtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "providerbench:", err)
		os.Exit(1)
	}
}

type options struct {
	adapter       string
	addr, network string
	n, posters    int
	latencyN      int
	slots         int
	transports    []string
	timeout       time.Duration
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("providerbench", flag.ContinueOnError)
	fs.StringVar(&o.adapter, "adapter", "", "the adapter binary (required)")
	fs.StringVar(&o.addr, "redis", "127.0.0.1:6379", "Redis address (host:port, or a socket path with -network unix)")
	fs.StringVar(&o.network, "network", "tcp", "tcp or unix")
	fs.IntVar(&o.n, "n", 200, "jobs of the throughput part, per side")
	fs.IntVar(&o.posters, "posters", 4, "concurrent posters, each its own module")
	fs.IntVar(&o.latencyN, "latency-n", 30, "jobs of the latency part, one at a time, per side")
	fs.IntVar(&o.slots, "slots", 256, "CPUs the Slurm node declares: each job takes one")
	trs := fs.String("transports", "cli,rest", "the Slurm provider's transports to measure, comma-separated")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.adapter == "" {
		return errors.New("-adapter is required (go build -o DIR/adapter ./cmd/adapter)")
	}
	if o.n < 1 || o.posters < 1 || o.latencyN < 1 || o.slots < 1 {
		return errors.New("-n, -posters, -latency-n and -slots must be positive")
	}
	for t := range strings.SplitSeq(*trs, ",") {
		switch t = strings.TrimSpace(t); t {
		case "cli", "rest":
			o.transports = append(o.transports, t)
		case "":
		default:
			return fmt.Errorf("-transports: %q: want cli or rest", t)
		}
	}
	if abs, err := filepath.Abs(o.adapter); err == nil {
		o.adapter = abs
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Network: o.network, Addr: o.addr, PoolSize: 16})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.addr, err)
	}
	c, err := slurmtest.Start(slurmtest.Options{CPUs: o.slots, MemoryMiB: 64 * o.slots, REST: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	dir, err := os.MkdirTemp("", "providerbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	st, err := newStamps(dir)
	if err != nil {
		return err
	}
	b := &bench{o: o, rdb: rdb, c: c, dir: dir, stamps: st}

	direct, err := b.sbatchThroughput(ctx, stdout)
	if err != nil {
		return fmt.Errorf("sbatch throughput: %w", err)
	}
	directLat, err := b.sbatchLatency(ctx, stdout)
	if err != nil {
		return fmt.Errorf("sbatch latency: %w", err)
	}
	for _, tr := range o.transports {
		if err := b.computeboard(ctx, stdout, tr, direct, directLat); err != nil {
			return fmt.Errorf("computeboard over %s: %w", tr, err)
		}
	}
	return nil
}

type bench struct {
	o      options
	rdb    *redis.Client
	c      *slurmtest.Cluster
	dir    string
	stamps *stamps
}

// jobShell is every job: it appends its ID ($1, or the request's entry ID)
// and the time it started to the stamp file.
func (b *bench) jobShell() string {
	return `echo "${1:-$COMPUTEBOARD_REQUEST_ID} $(date +%s%N)" >>` + b.stamps.path
}

// sbatch submits one job with ID id as the provider would.
func (b *bench) sbatch(ctx context.Context, id string) error {
	cmd := b.c.Command(ctx, "sbatch", "--parsable", "--export=NONE", "--uid=nobody", "--partition="+b.c.Partition,
		"--nodelist="+b.c.Node, "--cpus-per-task=1", "--mem=64M", "--output=/dev/null", "--error=/dev/null", "--chdir=/tmp",
		"--job-name=pb-"+id, "--wrap", "/bin/sh -c '"+b.jobShell()+"' sh "+id)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sbatch: %v: %s", err, out)
	}
	return nil
}

// direct is sbatch's side of the throughput part.
type direct struct{ startedPerS float64 }

func (b *bench) sbatchThroughput(ctx context.Context, stdout io.Writer) (direct, error) {
	ids := make([]string, b.o.n)
	start := time.Now()
	for i := range ids {
		ids[i] = fmt.Sprintf("d%d", i)
		if err := b.sbatch(ctx, ids[i]); err != nil {
			return direct{}, err
		}
	}
	submitted := time.Since(start)
	last, err := b.stamps.waitAll(ctx, ids, nil)
	if err != nil {
		return direct{}, err
	}
	startedSecs := last.Sub(start).Seconds()
	d := direct{startedPerS: float64(b.o.n) / startedSecs}
	fmt.Fprintf(stdout, "side=sbatch part=throughput n=%d slots=%d submit_secs=%.3f submit_per_s=%.1f started_secs=%.3f started_per_s=%.1f\n",
		b.o.n, b.o.slots, submitted.Seconds(), float64(b.o.n)/submitted.Seconds(), startedSecs, d.startedPerS)
	return d, nil
}

func (b *bench) sbatchLatency(ctx context.Context, stdout io.Writer) (time.Duration, error) {
	lats := make([]time.Duration, 0, b.o.latencyN)
	for i := range b.o.latencyN {
		id := fmt.Sprintf("l%d", i)
		t0 := time.Now()
		if err := b.sbatch(ctx, id); err != nil {
			return 0, err
		}
		at, err := b.stamps.waitAll(ctx, []string{id}, nil)
		if err != nil {
			return 0, err
		}
		lats = append(lats, at.Sub(t0))
	}
	p50, p99 := benchutil.Percentile(lats, 50), benchutil.Percentile(lats, 99)
	fmt.Fprintf(stdout, "side=sbatch part=latency n=%d submit_to_started_p50_ms=%.1f submit_to_started_p99_ms=%.1f\n",
		b.o.latencyN, benchutil.Millis(p50), benchutil.Millis(p99))
	return p50, nil
}

// computeboard runs both parts through an adapter whose provider is the
// cluster over transport tr.
func (b *bench) computeboard(ctx context.Context, stdout io.Writer, tr string, d direct, directP50 time.Duration) error {
	board, store, err := benchutil.NewBoard(b.rdb, "providerbench-"+tr)
	if err != nil {
		return err
	}
	defer benchutil.DropBoard(b.rdb, store.Keys())
	ad, err := b.startAdapter(ctx, tr, board)
	if err != nil {
		return err
	}
	defer ad.Stop()
	data, _ := json.Marshal(map[string]any{"template": "stamp",
		"resource_requirements": map[string]any{"cpu_cores": 1, "memory": 0.0625}})

	// Throughput: every request posted at once by the posters.
	start := time.Now()
	ids, err := benchutil.PostSpread(ctx, store, b.o.n, b.o.posters, data)
	if err != nil {
		return err
	}
	posted := time.Since(start)
	last, err := b.stamps.waitAll(ctx, ids, ad)
	if err != nil {
		return err
	}
	secs := last.Sub(start).Seconds()
	perS := float64(b.o.n) / secs
	fmt.Fprintf(stdout, "side=computeboard part=throughput transport=%s n=%d slots=%d posters=%d post_secs=%.3f started_secs=%.3f started_per_s=%.1f sbatch_started_per_s=%.1f ratio=%.3f overhead_ms_per_job=%.1f overhead_pct=%.1f\n",
		tr, b.o.n, b.o.slots, b.o.posters, posted.Seconds(), secs, perS, d.startedPerS, perS/d.startedPerS, 1000/perS-1000/d.startedPerS,
		100*(d.startedPerS/perS-1))

	// Latency: one at a time.
	lats := make([]time.Duration, 0, b.o.latencyN)
	for range b.o.latencyN {
		t0 := time.Now()
		id, err := store.Post(ctx, blackboard.NewEntry(blackboard.RequestTopic, "latency", data))
		if err != nil {
			return err
		}
		at, err := b.stamps.waitAll(ctx, []string{id}, ad)
		if err != nil {
			return err
		}
		lats = append(lats, at.Sub(t0))
	}
	p50, p99 := benchutil.Percentile(lats, 50), benchutil.Percentile(lats, 99)
	fmt.Fprintf(stdout, "side=computeboard part=latency transport=%s n=%d post_to_started_p50_ms=%.1f post_to_started_p99_ms=%.1f sbatch_p50_ms=%.1f overhead_p50_ms=%.1f ratio_p50=%.3f\n",
		tr, b.o.latencyN, benchutil.Millis(p50), benchutil.Millis(p99), benchutil.Millis(directP50), benchutil.Millis(p50-directP50), float64(p50)/float64(directP50))
	return nil
}

// ---- the stamp file ----

// stamps is the file every job appends "<id> <ns>" to as it starts.
type stamps struct {
	path string
	mu   sync.Mutex
	off  int64
	seen map[string]time.Time // guarded by mu
}

func newStamps(dir string) (*stamps, error) {
	s := &stamps{path: filepath.Join(dir, "stamps"), seen: map[string]time.Time{}}
	// Jobs run as nobody.
	if err := os.WriteFile(s.path, nil, 0o666); err != nil {
		return nil, err
	}
	return s, os.Chmod(s.path, 0o666)
}

// read takes in the lines appended since the last read.
func (s *stamps) read() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(s.off, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil { // a line being written is read next time
			return nil
		}
		s.off += int64(len(line))
		id, ns, ok := strings.Cut(strings.TrimSpace(line), " ")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if !ok || perr != nil {
			return fmt.Errorf("stamp file: bad line %q", line)
		}
		s.seen[id] = time.Unix(0, n)
	}
}

// waitAll waits until every id has stamped and returns the last stamp;
// ad, when set, is the adapter whose exit ends the wait.
func (s *stamps) waitAll(ctx context.Context, ids []string, ad *benchutil.Adapter) (time.Time, error) {
	var exited <-chan struct{}
	if ad != nil {
		exited = ad.Exited()
	}
	for {
		if err := s.read(); err != nil {
			return time.Time{}, err
		}
		s.mu.Lock()
		var last time.Time
		missing := 0
		for _, id := range ids {
			at, ok := s.seen[id]
			if !ok {
				missing++
			} else if at.After(last) {
				last = at
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			msg := ""
			if ad != nil {
				msg = "; adapter log: " + ad.LogTail()
			}
			return time.Time{}, fmt.Errorf("%d of %d jobs not started: %w%s", missing, len(ids), ctx.Err(), msg)
		case <-exited:
			return time.Time{}, ad.ExitError()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ---- the adapter ----

// startAdapter starts an adapter whose only provider is the cluster over
// transport tr, and waits until it is the scheduler and sees its node.
func (b *bench) startAdapter(ctx context.Context, tr, board string) (*benchutil.Adapter, error) {
	dir := filepath.Join(b.dir, tr)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	redisURL := benchutil.RedisURL(b.o.network, b.o.addr)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "board: %q\nredis: %q\nlisten: 127.0.0.1:0\nwork_dir: %q\n", board, redisURL, filepath.Join(dir, "jobs"))
	fmt.Fprintf(&cfg, "templates:\n  stamp: {command: [/bin/sh, -c, %q]}\n", b.jobShell())
	fmt.Fprintf(&cfg, "broker:\n  module_rate: -1\n  module_max_waiting: -1\n")
	fmt.Fprintf(&cfg, "providers:\n  - name: hpc\n    kind: slurm\n    slurm:\n      partition: %s\n      slurm_conf: %s\n      work_dir: %s\n      transport: %s\n",
		b.c.Partition, b.c.Conf, filepath.Join(dir, "slurm"), tr)
	if tr == "rest" {
		fmt.Fprintf(&cfg, "      rest: {url: %q}\n", b.c.RESTURL)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return nil, err
	}
	return benchutil.StartAdapter(ctx, b.o.adapter, cfgPath, filepath.Join(dir, "adapter.log"), func(nodes string) bool {
		return strings.Contains(nodes, `"`+b.c.Node+`"`)
	})
}
