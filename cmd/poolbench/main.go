// Command poolbench measures the pool's scheduler through real Redis with
// fake nodes (issue 9's bench): the scheduler (package dispatch, with its
// engine, ledger and fenced assignment writes) places queued jobs on -nodes
// fake nodes served by one fake-node agent (package agent over
// providers/fake, which runs nothing), and a job counts once its agent has
// acknowledged it: the queued → running compare-and-set with the node
// check, the provider handle stored on the record, the started report and
// the order acknowledged.
//
// Two parts, one line each:
//
//   - part=throughput: -n queued job records are made first (not timed);
//     then the scheduler is elected and the clock starts; assignments_per_s
//     is -n over the time until the last job is running.
//   - part=latency: jobs are accepted at -rate per second for -secs
//     seconds through the scheduler's intake (records made then, in
//     batches of 64 as the broker does), and p50/p99 accepted→running are
//     read from the records (accepted_at, started_at).
//
// Next to them, part=baseline is the same Redis doing the bare minimum
// of one assignment: XADD to a node stream, XREADGROUP, XACK, pipelined
// in batches like the real path (no job record, no checks).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/agent"
	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/dispatch"
	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/internal/benchutil"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "poolbench:", err)
		os.Exit(1)
	}
}

type options struct {
	addr, network string
	nodes, n      int
	workers       int
	cores         float64
	rate          float64
	secs          float64
	timeout       time.Duration
	cpuprofile    string
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("poolbench", flag.ContinueOnError)
	fs.StringVar(&o.addr, "redis", "127.0.0.1:6379", "Redis address (host:port, or a socket path with -network unix)")
	fs.StringVar(&o.network, "network", "tcp", "tcp or unix")
	fs.IntVar(&o.nodes, "nodes", 1000, "fake nodes")
	fs.IntVar(&o.n, "n", 20000, "jobs of the throughput part (and of the baseline)")
	fs.IntVar(&o.workers, "workers", 0, "orders the agent handles at once (0: the agent's default)")
	fs.Float64Var(&o.cores, "cores", 64, "cores of each fake node (each job takes one)")
	fs.Float64Var(&o.rate, "rate", 2000, "jobs/s offered in the latency part (0: skip it)")
	fs.Float64Var(&o.secs, "secs", 5, "seconds of the latency part")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the throughput part here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.cpuprofile = *cpuprofile
	if o.nodes < 1 || o.n < 1 {
		return errors.New("-nodes and -n must be at least 1")
	}
	if float64(o.nodes)*o.cores < float64(o.n) {
		return fmt.Errorf("-nodes × -cores = %g slots, fewer than -n %d jobs", float64(o.nodes)*o.cores, o.n)
	}
	rdb := redis.NewClient(&redis.Options{Network: o.network, Addr: o.addr, PoolSize: 64})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	base, err := baseline(ctx, rdb, o)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	fmt.Fprintf(stdout, "side=redis part=baseline nodes=%d n=%d secs=%.3f assignments_per_s=%.0f\n", o.nodes, o.n, base.Seconds(), float64(o.n)/base.Seconds())

	took, p50, p99, err := throughput(ctx, rdb, o)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	fmt.Fprintf(stdout, "side=computeboard part=throughput nodes=%d n=%d secs=%.3f assignments_per_s=%.0f ratio_to_baseline=%.2f start_to_running_p50_ms=%.1f start_to_running_p99_ms=%.1f\n",
		o.nodes, o.n, took.Seconds(), float64(o.n)/took.Seconds(), base.Seconds()/took.Seconds(), ms(p50), ms(p99))

	if o.rate > 0 {
		n, p50, p99, err := latency(ctx, rdb, o)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		fmt.Fprintf(stdout, "side=computeboard part=latency nodes=%d rate=%g n=%d p50_ms=%.1f p99_ms=%.1f\n", o.nodes, o.rate, n, ms(p50), ms(p99))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func board() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "poolbench-" + hex.EncodeToString(b[:])
}

// pool is one board with a fake-node agent and a scheduler.
type benchPool struct {
	rdb   *redis.Client
	keys  blackboard.Keys
	store *blackboard.Store
	jobs  *jobs.Store
	ch    *pool.Channel
	reg   *pool.Registry
	agent *agent.Agent
	log   *slog.Logger
}

func newPool(rdb *redis.Client, o options) (*benchPool, error) {
	clk := clock.Real{}
	var out io.Writer = io.Discard
	if os.Getenv("POOLBENCH_LOG") != "" {
		out = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := blackboard.New(rdb, blackboard.Config{Namespace: board(), Clock: clk, Logger: log, MaxEntries: -1})
	if err != nil {
		return nil, err
	}
	js, err := jobs.New(rdb, st, jobs.Config{Clock: clk, Logger: log})
	if err != nil {
		return nil, err
	}
	p := &benchPool{rdb: rdb, keys: st.Keys(), store: st, jobs: js, ch: pool.NewChannel(rdb, st.Keys()), reg: pool.NewRegistry(rdb, st.Keys()), log: log}
	// FAKE nodes (providers/fake): nothing runs; a task "runs" an hour.
	prov := fake.New("fake", clk, time.Hour)
	var nodes []agent.Node
	for i := range o.nodes {
		n, err := inventory.Build(inventory.Node{}, inventory.Config{Name: fmt.Sprintf("fake-%04d", i+1), CPUCores: o.cores, MemoryGB: 256, GPUDiscovery: inventory.DiscoverOff})
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, agent.Node{Record: pool.NodeRecord{Node: n, Agent: "bench", Provider: "fake", Fake: true}, Provider: prov})
	}
	p.agent, err = agent.New(agent.Config{ID: "bench", Nodes: nodes, Jobs: js, Workers: o.workers, Channel: p.ch, Registry: p.reg, Clock: clk, Logger: log,
		Resolve: func(wire.Request) (agent.Command, *wire.Error) {
			return agent.Command{Argv: []string{"/bin/true"}}, nil
		}})
	return p, err
}

// specs makes n accept specs (their request entries posted).
func (p *benchPool) specs(ctx context.Context, n int) ([]jobs.AcceptSpec, error) {
	var out []jobs.AcceptSpec
	for len(out) < n {
		var es []*blackboard.Entry
		for range min(500, n-len(out)) {
			es = append(es, blackboard.NewEntry(blackboard.RequestTopic, "bench", json.RawMessage(`{"command":["/bin/true"]}`)))
		}
		ids, err := p.store.PostMany(ctx, es)
		if err != nil {
			return nil, err
		}
		for i, id := range ids {
			req := wire.Request{Version: wire.SchemaVersion, Command: []string{"/bin/true"}, Account: "bench", IdempotencyKey: id,
				Resources: wire.Resources{CPUCores: 1, MemoryGB: 0.1}}
			out = append(out, jobs.AcceptSpec{JobID: wire.JobID(id), EntryID: id, Module: "bench", Request: req, Submitted: es[i].Timestamp})
		}
	}
	return out, nil
}

// accept makes the records of specs (as the broker's AcceptBatch does:
// record, job entry).
func (p *benchPool) accept(ctx context.Context, specs []jobs.AcceptSpec) ([]jobs.Job, error) {
	var out []jobs.Job
	for i := 0; i < len(specs); i += 64 {
		batch := specs[i:min(i+64, len(specs))]
		for k, r := range p.jobs.AcceptBatch(ctx, batch) {
			if r.Err != nil || !r.Created {
				return nil, fmt.Errorf("accept: %+v", r)
			}
			if err := p.jobs.PublishAccepted(ctx, batch[k], r.Job); err != nil {
				return nil, err
			}
			out = append(out, r.Job)
		}
	}
	return out, nil
}

func (p *benchPool) scheduler(ctx context.Context, in dispatch.Intake) (*dispatch.Scheduler, error) {
	el, err := pool.NewElector(p.rdb, p.keys, pool.ElectorConfig{ID: "bench", TTL: time.Minute})
	if err != nil {
		return nil, err
	}
	l, ok, err := el.TryAcquire(ctx)
	if err != nil || !ok {
		return nil, fmt.Errorf("elect: %v %v", ok, err)
	}
	fence := pool.Fence{Key: el.FenceKey(), Epoch: l.Epoch}
	return dispatch.New(dispatch.Config{
		Policy:     engine.Policy{Strategy: engine.FirstFit},
		Resolve:    func(wire.Request) (dispatch.Spec, *wire.Error) { return dispatch.Spec{}, nil },
		MaxPending: 100000, Interval: 20 * time.Millisecond, Logger: p.log,
	}, in, p.jobs.Fenced(jobs.Fence{Key: fence.Key, Epoch: fence.Epoch}), p.reg, p.ch, fence)
}

// idle is an intake with nothing to give.
type idle struct{}

func (idle) NextBatchAdmitted(ctx context.Context, _ int, _ func(string) bool) ([]*broker.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (idle) AcceptBatch(context.Context, []*broker.Delivery) []broker.AcceptResult { return nil }

// waitRunning waits until the agent has started want jobs and
// acknowledged their orders.
func waitRunning(ctx context.Context, a *agent.Agent, want int) error {
	for a.Stats().Acknowledged < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs running and acknowledged: %w", a.Stats().Acknowledged, want, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// latencies reads accepted→running of jobs from their records (or, with
// since > 0, since→running: since in epoch seconds).
func (p *benchPool) latencies(ctx context.Context, ids []string, since float64) ([]time.Duration, error) {
	out := make([]time.Duration, 0, len(ids))
	for i := 0; i < len(ids); i += 1000 {
		cmds := make([]*redis.SliceCmd, 0, 1000)
		_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, id := range ids[i:min(i+1000, len(ids))] {
				cmds = append(cmds, pl.HMGet(ctx, p.keys.Job(id), "accepted_at", "started_at"))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, c := range cmds {
			v := c.Val()
			a, _ := strconv.ParseFloat(fmt.Sprint(v[0]), 64)
			if since > 0 {
				a = since
			}
			s, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if err != nil {
				return nil, fmt.Errorf("a job without started_at: %v", v)
			}
			out = append(out, time.Duration((s-a)*float64(time.Second)))
		}
	}
	slices.Sort(out)
	return out, nil
}

func quantile(l []time.Duration, q float64) time.Duration { return l[int(q*float64(len(l)-1))] }

func throughput(ctx context.Context, rdb *redis.Client, o options) (time.Duration, time.Duration, time.Duration, error) {
	p, err := newPool(rdb, o)
	if err != nil {
		return 0, 0, 0, err
	}
	defer benchutil.DropBoard(rdb, p.keys)
	specs, err := p.specs(ctx, o.n)
	if err != nil {
		return 0, 0, 0, err
	}
	recs, err := p.accept(ctx, specs)
	if err != nil {
		return 0, 0, 0, err
	}
	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go func() { _ = p.agent.Run(actx) }()
	// The nodes are registered before the scheduler starts.
	for {
		if n, _ := rdb.HLen(ctx, p.keys.PoolNodes()).Result(); int(n) == o.nodes {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s, err := p.scheduler(ctx, idle{})
	if err != nil {
		return 0, 0, 0, err
	}
	sctx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return 0, 0, 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, 0, err
		}
		defer pprof.StopCPUProfile()
	}
	begin := time.Now()
	go func() { _ = s.Run(sctx) }()
	if err := waitRunning(ctx, p.agent, o.n); err != nil {
		return 0, 0, 0, err
	}
	took := time.Since(begin)
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.JobID
	}
	// From the scheduler's start (the records were made before it).
	lat, err := p.latencies(ctx, ids, float64(begin.UnixNano())/1e9)
	if err != nil {
		return 0, 0, 0, err
	}
	return took, quantile(lat, 0.5), quantile(lat, 0.99), nil
}

// pacedIntake makes records at a rate and hands them to the scheduler.
type pacedIntake struct {
	p     *benchPool
	specs []jobs.AcceptSpec
	next  atomic.Int64
	start time.Time
	rate  float64
}

func (in *pacedIntake) NextBatchAdmitted(ctx context.Context, n int, _ func(string) bool) ([]*broker.Delivery, error) {
	for {
		i := int(in.next.Load())
		if i >= len(in.specs) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		due := int(time.Since(in.start).Seconds() * in.rate)
		if due > i {
			j := min(due, i+n, len(in.specs))
			in.next.Store(int64(j))
			ds := make([]*broker.Delivery, 0, j-i)
			for _, s := range in.specs[i:j] {
				ds = append(ds, &broker.Delivery{EntryID: s.EntryID, JobID: s.JobID})
			}
			return ds, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (in *pacedIntake) AcceptBatch(ctx context.Context, ds []*broker.Delivery) []broker.AcceptResult {
	byID := make(map[string]jobs.AcceptSpec, len(ds))
	for _, s := range in.specs {
		byID[s.EntryID] = s
	}
	specs := make([]jobs.AcceptSpec, len(ds))
	for i, d := range ds {
		specs[i] = byID[d.EntryID]
	}
	recs, err := in.p.accept(ctx, specs)
	out := make([]broker.AcceptResult, len(ds))
	for i := range out {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i] = broker.AcceptResult{Job: recs[i], Created: true}
	}
	return out
}

func latency(ctx context.Context, rdb *redis.Client, o options) (int, time.Duration, time.Duration, error) {
	p, err := newPool(rdb, o)
	if err != nil {
		return 0, 0, 0, err
	}
	defer benchutil.DropBoard(rdb, p.keys)
	n := int(o.rate * o.secs)
	if float64(o.nodes)*o.cores < float64(n) {
		return 0, 0, 0, fmt.Errorf("-rate × -secs = %d jobs, more than %g slots", n, float64(o.nodes)*o.cores)
	}
	specs, err := p.specs(ctx, n)
	if err != nil {
		return 0, 0, 0, err
	}
	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go func() { _ = p.agent.Run(actx) }()
	for {
		if c, _ := rdb.HLen(ctx, p.keys.PoolNodes()).Result(); int(c) == o.nodes {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	in := &pacedIntake{p: p, specs: specs, rate: o.rate, start: time.Now()}
	s, err := p.scheduler(ctx, in)
	if err != nil {
		return 0, 0, 0, err
	}
	sctx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	go func() { _ = s.Run(sctx) }()
	if err := waitRunning(ctx, p.agent, n); err != nil {
		return 0, 0, 0, err
	}
	ids := make([]string, n)
	for i, sp := range specs {
		ids[i] = sp.JobID
	}
	lat, err := p.latencies(ctx, ids, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	return n, quantile(lat, 0.5), quantile(lat, 0.99), nil
}

// baseline: the bare Redis work of one assignment (XADD to a node's
// stream; the agent's XREADGROUP over every node stream; XACK), pipelined
// in batches of 512 like the real path.
func baseline(ctx context.Context, rdb *redis.Client, o options) (time.Duration, error) {
	k := blackboard.NewKeys(board())
	defer benchutil.DropBoard(rdb, k)
	streams := make([]string, 0, 2*o.nodes)
	for i := range o.nodes {
		s := k.NodeAssign(fmt.Sprintf("fake-%04d", i+1))
		if err := rdb.XGroupCreateMkStream(ctx, s, "agent", "0").Err(); err != nil {
			return 0, err
		}
		streams = append(streams, s)
	}
	for range o.nodes {
		streams = append(streams, ">")
	}
	begin := time.Now()
	done := make(chan error, 1)
	go func() {
		got := 0
		for got < o.n {
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "agent", Consumer: "bench", Streams: streams, Count: 512, Block: time.Second}).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				done <- err
				return
			}
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, s := range res {
					for _, m := range s.Messages {
						p.XAck(ctx, s.Stream, "agent", m.ID)
						got++
					}
				}
				return nil
			})
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < o.n; i += 512 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+512, o.n); j++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: streams[j%o.nodes], Values: []any{"kind", "start", "job", strconv.Itoa(j)}})
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	if err := <-done; err != nil {
		return 0, err
	}
	return time.Since(begin), nil
}
