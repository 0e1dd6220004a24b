package adapter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/agent"
	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/dispatch"
	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/wire"
)

// poolMember is this adapter as a member of the pool: its agent, its
// scheduler candidacy and, while it holds the lease, its term.
type poolMember struct {
	cfg      *Config
	rdb      redis.UniversalClient
	store    *blackboard.Store
	jobs     *jobs.Store
	registry *pool.Registry
	channel  *pool.Channel
	elector  *pool.Elector // nil: not a scheduler candidate
	agent    *agent.Agent  // nil: not an agent
	// providers are the agent's providers by name (config providers);
	// set once by buildAgent, before the agent runs.
	providers map[string]providers.Provider
	clk       clock.Clock
	log       *slog.Logger
	url       string // this adapter's HTTP API ("" = none)

	term atomic.Pointer[term] // the scheduler term this adapter runs now, if any
}

// term is one scheduler term: the broker, the scheduler and the metrics
// that live as long as the lease.
type term struct {
	epoch int64
	br    *broker.Broker
	sched *dispatch.Scheduler
	reg   *prometheus.Registry
}

// candidateID names this process as a scheduler candidate: unique per
// process, so a restarted adapter is a new candidate.
func candidateID() string {
	h, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
}

// buildAgent builds this adapter's node agent over the nodes of its
// providers (buildProviders): the machine it runs on (local provider),
// fake nodes, a Slurm partition's nodes.
func (p *poolMember) buildAgent(ctx context.Context, g *errgroup.Group, gctx context.Context) (*agent.Agent, string, error) {
	cfg := p.cfg
	var nodes []agent.Node
	var err error
	if len(cfg.Providers) > 0 && cfg.Pool.FakeNodes.Count > 0 {
		return nil, "", errors.New("pool.fake_nodes (or --fake-nodes) and providers: list fake nodes as a provider of kind fake instead")
	}
	p.providers, nodes, err = cfg.buildProviders(ctx, providerDeps{clk: p.clk, log: p.log, goRun: errgroupRun(gctx, g)})
	if err != nil {
		return nil, "", err
	}
	id := cfg.agentID(nodes)
	for i := range nodes {
		nodes[i].Record.Agent = id
	}
	var descs []string
	for _, pc := range cfg.providerList() {
		var ns []*pool.NodeRecord
		for i := range nodes {
			if nodes[i].Record.Provider == pc.Name {
				ns = append(ns, &nodes[i].Record)
			}
		}
		descs = append(descs, describeNodes(pc, ns))
	}
	ckdir := cfg.Pool.CheckpointDir
	if !slices.ContainsFunc(cfg.providerList(), func(pc ProviderConfig) bool { return pc.Kind != KindFake }) {
		ckdir = "" // nothing runs on fake nodes: no checkpoints
	}
	ag, err := agent.New(agent.Config{ID: id, Nodes: nodes, Resolve: p.agentResolve, Jobs: p.jobs,
		Channel: p.channel, Registry: p.registry, Beat: cfg.Pool.Heartbeat.D(), Clock: p.clk,
		CheckpointDir: ckdir, CheckpointInterval: cfg.Pool.CheckpointInterval.D(), RunAs: cfg.RunAs,
		Inventories: cfg.nodeInventories(p.providers), Logger: p.log.With("component", "agent")})
	return ag, strings.Join(descs, "; "), err
}

// describeNodes is the start-up line about one provider's nodes.
func describeNodes(pc ProviderConfig, ns []*pool.NodeRecord) string {
	if len(ns) == 0 {
		return fmt.Sprintf("provider %s (%s): no nodes", pc.Name, pc.Kind)
	}
	n := ns[0]
	switch pc.Kind {
	case KindFake:
		return fmt.Sprintf("%d fake nodes %s…: %.1f cores, %.1f GiB, %d GPUs each (nothing runs)",
			len(ns), n.Name, n.CPUs, float64(n.MemoryMiB)/1024, len(n.GPUs))
	case KindSlurm:
		names := make([]string, len(ns))
		for i, r := range ns {
			names[i] = r.Name
		}
		return fmt.Sprintf("provider %s (slurm): nodes %s", pc.Name, strings.Join(names, ","))
	}
	return fmt.Sprintf("node %s: %.1f cores, %.1f GiB, %d GPUs, %d NUMA domains; confined: %v",
		n.Name, n.CPUs, float64(n.MemoryMiB)/1024, len(n.GPUs), len(n.NUMA), n.Confined)
}

// supervisorPath finds the binary local tasks' supervisors run, and logs
// which, once: configured (the supervisor key), or cb-supervisor next to
// self (this executable), or else self, whose main hands
// supervise.Command to supervise.Main (cmd/adapter). That fallback works
// but starts every task several times slower: each supervisor then pays
// for the initialisation of every package the adapter links, where
// cb-supervisor links only the standard library.
func supervisorPath(configured, self string, log *slog.Logger) string {
	if configured != "" {
		log.Info("local task supervisor", "path", configured, "from", "config key supervisor")
		return configured
	}
	next := filepath.Join(filepath.Dir(self), "cb-supervisor")
	if fi, err := os.Stat(next); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		log.Info("local task supervisor", "path", next, "from", "next to the adapter")
		return next
	}
	log.Warn("local task supervisor: no cb-supervisor next to the adapter, so the adapter re-executes itself as each task's supervisor, which starts tasks several times slower; build it (make build) or name it in the supervisor key",
		"path", self, "looked_for", next)
	return self
}

func (p *poolMember) agentResolve(req wire.Request) (agent.Command, *wire.Error) {
	cmd, werr := p.cfg.Resolve(req)
	return agent.Command{Argv: cmd.Argv, Image: cmd.Image, Env: cmd.Env, User: cmd.User, Timeout: cmd.Timeout}, werr
}

func (p *poolMember) schedResolve(req wire.Request) (dispatch.Spec, *wire.Error) {
	cmd, werr := p.cfg.Resolve(req)
	return dispatch.Spec{Timeout: cmd.Timeout, RequeueLost: cmd.RequeueLost,
		NonPreemptible: cmd.NonPreemptible, PreemptMode: engine.EvictionMode(cmd.PreemptMode)}, werr
}

// runTerm is one scheduler term: while this adapter holds the lease at
// l.Epoch it runs the broker (intake), the scheduler and the telemetry
// publisher, every write fenced by the epoch.
func (p *poolMember) runTerm(ctx context.Context, l pool.Leader) error {
	cfg := p.cfg
	log := p.log.With("epoch", l.Epoch)
	fence := pool.Fence{Key: p.elector.FenceKey(), Epoch: l.Epoch}
	fjs := p.jobs.Fenced(jobs.Fence{Key: fence.Key, Epoch: fence.Epoch})
	var (
		sched *dispatch.Scheduler
		pub   *publisher
	)
	br, err := broker.New(p.rdb, p.store, broker.Config{
		Consumer:         cfg.Consumer,
		InboxCapacity:    cfg.Broker.InboxCapacity,
		LeaseTimeout:     cfg.Broker.LeaseTimeout.D(),
		ClaimIdle:        cfg.Broker.ClaimIdle.D(),
		DeliveryLimit:    cfg.Broker.DeliveryLimit,
		ModuleRate:       cfg.Broker.ModuleRate,
		ModuleBurst:      cfg.Broker.ModuleBurst,
		ModuleMaxWaiting: cfg.Broker.ModuleMaxWaiting,
		OperatorToken:    cfg.OperatorToken,
		PublicReads:      cfg.HTTP.PublicReads,
		Identity:         cfg.Identity,
		MayBill:          cfg.mayBill(),
		Jobs:             fjs,
		DLQMaxAge:        cfg.Retention.D(),
		Check:            admissionCheck(cfg, func(j engine.Job) *engine.Rejection { return sched.Admission(j) }),
		OnCancel:         func(c broker.Cancel) { sched.OnCancel(c.JobID) },
		Clock:            p.clk,
		Logger:           log,
	})
	if err != nil {
		return err
	}
	if err := br.EnsureGroups(ctx); err != nil {
		return err
	}
	var classes []engine.Node
	for _, c := range cfg.Pool.NodeClasses {
		n, err := inventory.Build(inventory.Node{}, c)
		if err != nil {
			return fmt.Errorf("pool.node_classes: %w", err)
		}
		classes = append(classes, n.Engine())
	}
	sched, err = dispatch.New(dispatch.Config{
		Policy:        engine.Policy{Selection: engine.Selection(cfg.Scheduler.FairShare), Strategy: engine.Strategy(cfg.Scheduler.Placement)},
		Accounts:      cfg.engineAccounts(),
		Resolve:       p.schedResolve,
		StorageTier:   cfg.storageTier(),
		MaxPending:    cfg.Scheduler.MaxPending,
		Interval:      cfg.Scheduler.Interval.D(),
		GangTimeout:   cfg.Scheduler.GangTimeout.D(),
		FullReplan:    cfg.Scheduler.FullReplan.D(),
		NodeUnhealthy: cfg.Pool.NodeUnhealthy.D(),
		NodeTimeout:   cfg.Scheduler.NodeTimeout.D(),
		NodeClasses:   classes,
		Seed:          cfg.Scheduler.Seed,
		Preemption:    cfg.Scheduler.Preemption.Engine(),
		PreemptGrace:  cfg.Scheduler.Preemption.CheckpointGrace.D(),
		PreemptWait:   cfg.Scheduler.Preemption.PreemptorWait.D(),
		OnEviction:    func(ev dispatch.Eviction) { pub.Evicted(ev) },
		RequestStatus: p.requestStatus,
		Clock:         p.clk,
		Logger:        log.With("component", "scheduler"),
		Notify:        func() { pub.Notify() },
		AfterFullPlan: newPlanMemory(p.clk, cfg.Scheduler.FullReplan.D(), os.Getenv("GOGC")).release,
	}, br, fjs, p.registry, p.channel, fence)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := br.RegisterMetrics(reg); err != nil {
		return err
	}
	reg.MustRegister(newPoolCollector(sched, func() int { return br.Inbox().Len() }))
	pub = newPublisher(p.store, func() dispatch.Stats { return sched.Stats(br.Inbox().Len()) }, cfg.Telemetry.Interval.D(), log.With("component", "telemetry"))
	pub.provider = sched.NodeProvider

	p.term.Store(&term{epoch: l.Epoch, br: br, sched: sched, reg: reg})
	defer p.term.Store(nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return br.Run(gctx) })
	g.Go(func() error { return sched.Run(gctx) })
	g.Go(func() error { return pub.Run(gctx) })
	err = g.Wait()
	if errors.Is(err, jobs.ErrFenced) || errors.Is(err, pool.ErrFenced) {
		return nil // deposed: campaign again
	}
	return err
}

// requestStatus reads the status of request entries.
func (p *poolMember) requestStatus(ctx context.Context, ids []string) ([]string, error) {
	sts, err := p.store.Statuses(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(sts))
	for i, st := range sts {
		out[i] = string(st)
	}
	return out, nil
}

// admissionCheck refuses, at intake, requests that name an unapproved
// program or that no node the pool has or may have could ever run
// (feasible: the scheduler's view of registered nodes and classes).
func admissionCheck(cfg *Config, feasible func(engine.Job) *engine.Rejection) func(wire.Request) *wire.Error {
	return func(req wire.Request) *wire.Error {
		if _, werr := cfg.Resolve(req); werr != nil {
			return werr
		}
		j := jobs.Job{Request: req}
		j.Account, j.Priority = req.Account, req.Priority
		if rej := feasible(dispatch.EngineJob(j, time.Time{}, cfg.storageTier())); rej != nil {
			field := "resource_requirements"
			if rej.Reason == engine.ReasonNoSuchNode { // no node has the labels asked for
				field = "node_selector"
				if req.Provider != "" {
					field = "provider"
				}
			}
			return &wire.Error{Code: wire.CodeImpossibleRequest, Field: field, Message: rej.Message}
		}
		return nil
	}
}

// forwarded marks a request one adapter passed to the scheduler, so a
// stale lease can never make two adapters pass it back and forth.
const forwarded = "X-Computeboard-Forwarded"

// scheduler serves h with the current term when this adapter is the
// scheduler, and otherwise forwards the request to the adapter that is.
func (p *poolMember) scheduler(h func(w http.ResponseWriter, r *http.Request, t *term)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if t := p.term.Load(); t != nil {
			h(w, r, t)
			return
		}
		l, ok, err := pool.CurrentLeader(r.Context(), p.rdb, p.store.Keys().PoolLease())
		switch {
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, apiError("unavailable", err.Error()))
			return
		case !ok:
			writeJSON(w, http.StatusServiceUnavailable, apiError("no_scheduler", "no scheduler holds the lease right now; try again shortly"))
			return
		case l.URL == "" || l.URL == p.url || r.Header.Get(forwarded) != "":
			writeJSON(w, http.StatusServiceUnavailable, apiError("no_scheduler",
				fmt.Sprintf("the scheduler (%s, epoch %d) has no HTTP API this adapter can reach", l.Holder, l.Epoch)))
			return
		}
		u, err := url.Parse(l.URL)
		if err != nil {
			writeJSON(w, http.StatusBadGateway, apiError("bad_gateway", err.Error()))
			return
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, apiError("bad_gateway", "forwarding to the scheduler at "+l.URL+": "+err.Error()))
		}
		r.Header.Set(forwarded, "1")
		w.Header().Set("X-Computeboard-Scheduler", l.URL)
		rp.ServeHTTP(w, r)
	}
}

// apiHandler serves health, metrics, the job records, and (on the
// scheduler, or forwarded to it) the inbox, scheduler and nodes APIs.
func apiHandler(p *poolMember, reg *prometheus.Registry) http.Handler {
	cfg := p.cfg
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := p.rdb.Ping(ctx).Err(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "redis": err.Error()})
			return
		}
		if p.agent != nil {
			if ok, why := p.agent.Health(); !ok {
				// The node took itself out of scheduling (its starts keep
				// failing); it comes back once a probe succeeds.
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "node": why})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("GET /api/v1/openapi.json", serveOpenAPI)
	mux.Handle("GET /debug/pprof/", profiles(cfg.OperatorToken, cfg.HTTP.Profiling))
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, termGatherer{p}}, promhttp.HandlerOpts{}))
	mux.Handle("/api/v1/inbox/", p.scheduler(func(w http.ResponseWriter, r *http.Request, t *term) { t.br.Handler().ServeHTTP(w, r) }))
	mux.HandleFunc("GET /api/v1/pool", func(w http.ResponseWriter, r *http.Request) {
		l, ok, err := pool.CurrentLeader(r.Context(), p.rdb, p.store.Keys().PoolLease())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, apiError("unavailable", err.Error()))
			return
		}
		out := map[string]any{"role": cfg.Role, "url": p.url, "scheduler": nil, "this_is_scheduler": p.term.Load() != nil}
		if ok {
			out["scheduler"] = l
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.Handle("GET /ui/", uiHandler())
	mux.HandleFunc("GET /api/v1/jobs", p.listJobs)
	mux.HandleFunc("GET /api/v1/preemptions", p.listPreemptions)
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		// A job record holds its request's payload and environment: the
		// token is needed, unless config makes reads public (environment
		// values are redacted then for callers without the token).
		authorized := broker.Authorized(r, cfg.OperatorToken)
		if !authorized && !cfg.HTTP.PublicReads && cfg.OperatorToken == "" {
			writeJSON(w, http.StatusForbidden, apiError("forbidden",
				"job records hold request payloads and environments: configure an operator token (or set http.public_reads)"))
			return
		}
		if !authorized && !cfg.HTTP.PublicReads {
			w.Header().Set("WWW-Authenticate", `Bearer realm="computeboard"`)
			writeJSON(w, http.StatusUnauthorized, apiError("unauthorized",
				"job records hold request payloads and environments: send Authorization: Bearer <operator token> (or set http.public_reads)"))
			return
		}
		j, err := p.jobs.Get(r.Context(), r.PathValue("id"))
		if errors.Is(err, jobs.ErrNotFound) {
			writeJSON(w, http.StatusNotFound, apiError("not_found", "no job "+r.PathValue("id")))
			return
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, apiError("internal", err.Error()))
			return
		}
		if !authorized {
			j = broker.RedactJob(j)
		}
		writeJSON(w, http.StatusOK, j)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/explain", p.scheduler(func(w http.ResponseWriter, r *http.Request, t *term) {
		e, ok := t.sched.Explain(r.PathValue("id"))
		if !ok {
			writeJSON(w, http.StatusNotFound, apiError("not_found", "job "+r.PathValue("id")+" is not pending"))
			return
		}
		writeJSON(w, http.StatusOK, e)
	}))
	mux.HandleFunc("GET /api/v1/scheduler", p.scheduler(func(w http.ResponseWriter, r *http.Request, t *term) {
		writeJSON(w, http.StatusOK, t.sched.Stats(t.br.Inbox().Len()))
	}))
	mux.HandleFunc("GET /api/v1/nodes", p.scheduler(func(w http.ResponseWriter, r *http.Request, t *term) {
		writeJSON(w, http.StatusOK, map[string]any{"nodes": t.sched.NodeViews()})
	}))
	mux.HandleFunc("GET /api/v1/fairshare", p.scheduler(func(w http.ResponseWriter, r *http.Request, t *term) {
		writeJSON(w, http.StatusOK, map[string]any{"accounts": t.sched.FairShares()})
	}))
	return mux
}

// termGatherer gathers the current term's metrics (none when this adapter
// is not the scheduler).
type termGatherer struct{ p *poolMember }

func (g termGatherer) Gather() ([]*dto.MetricFamily, error) {
	if t := g.p.term.Load(); t != nil {
		return t.reg.Gather()
	}
	return nil, nil
}

// poolCollector exports the scheduler's figures to Prometheus.
type poolCollector struct {
	sched  *dispatch.Scheduler
	depth  func() int
	util   *prometheus.Desc
	jobs   *prometheus.Desc
	nodes  *prometheus.Desc
	future *prometheus.Desc
	// The scheduler's own figures (dispatch.Stats.Metrics).
	cycles, partial, placements, lastCycle, events, epoch *prometheus.Desc
	preemptions, lostWork                                 *prometheus.Desc
	nodeLost                                              *prometheus.Desc
}

func newPoolCollector(s *dispatch.Scheduler, depth func() int) *poolCollector {
	return &poolCollector{sched: s, depth: depth,
		util:  prometheus.NewDesc("computeboard_pool_utilization_ratio", "Allocated fraction of the pool by resource.", []string{"resource"}, nil),
		jobs:  prometheus.NewDesc("computeboard_jobs", "Jobs by state (pending, running) and counters (completed, failed, cancelled) since this scheduler term began.", []string{"state"}, nil),
		nodes: prometheus.NewDesc("computeboard_pool_nodes", "Registered nodes by health.", []string{"health"}, nil),
		future: prometheus.NewDesc("computeboard_future_timestamps_total",
			"Requests whose entry timestamp was after their acceptance (a poster's clock ahead, or milliseconds sent as seconds); their wait is counted from acceptance.", nil, nil),
		cycles: prometheus.NewDesc("computeboard_scheduler_cycles_total", "Engine runs (plans) in this scheduler term.", nil, nil),
		partial: prometheus.NewDesc("computeboard_scheduler_partial_plans_total",
			"Engine runs, of computeboard_scheduler_cycles_total, over the heads of the accounts' queues only (after ends or new jobs; checked to decide what a plan over every pending job would), in this scheduler term.", nil, nil),
		placements: prometheus.NewDesc("computeboard_scheduler_placements_total", "Assignments written in this scheduler term.", nil, nil),
		lastCycle:  prometheus.NewDesc("computeboard_scheduler_last_cycle_seconds", "How long the last engine run took.", nil, nil),
		events: prometheus.NewDesc("computeboard_scheduler_events_total",
			"Jobs requeued, lost, reassigned, and placements the ledger refused, in this scheduler term.", []string{"event"}, nil),
		epoch: prometheus.NewDesc("computeboard_scheduler_epoch", "The fencing epoch of this scheduler's term.", nil, nil),
		preemptions: prometheus.NewDesc("computeboard_scheduler_preemptions_total",
			"Running jobs evicted to make room for more urgent ones (scheduler.preemption), in this scheduler term.", nil, nil),
		lostWork: prometheus.NewDesc("computeboard_scheduler_preemption_lost_work_seconds_total",
			"Run time of the evicted jobs thrown away by their evictions (since their starts), in this scheduler term.", nil, nil),
		nodeLost: prometheus.NewDesc("computeboard_scheduler_node_lost_work_seconds_total",
			"Work lost with lost nodes, since each job's last verified checkpoint or its start, in this scheduler term: run seconds (resource=time), core-seconds (cpu), GPU-seconds (gpu).",
			[]string{"resource"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.util
	ch <- c.jobs
	ch <- c.nodes
	ch <- c.future
	for _, d := range []*prometheus.Desc{c.cycles, c.partial, c.placements, c.lastCycle, c.events, c.epoch, c.preemptions, c.lostWork, c.nodeLost} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.future, prometheus.CounterValue, float64(c.sched.FutureStamps()))
	s := c.sched.Stats(c.depth())
	for k, v := range s.Utilization {
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, v, k)
	}
	for k, v := range map[string]int{"pending": s.Jobs.PendingJobs, "running": s.Jobs.RunningJobs,
		"completed": s.Jobs.CompletedJobs, "failed": s.Jobs.FailedJobs, "cancelled": s.Jobs.CancelledJobs} {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(v), k)
	}
	ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(s.Healthy), "healthy")
	ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(s.Nodes-s.Healthy), "unhealthy")
	m := s.Metrics
	ch <- prometheus.MustNewConstMetric(c.cycles, prometheus.CounterValue, m["scheduler_cycles"])
	ch <- prometheus.MustNewConstMetric(c.partial, prometheus.CounterValue, m["scheduler_partial_plans"])
	ch <- prometheus.MustNewConstMetric(c.placements, prometheus.CounterValue, m["scheduler_placements"])
	ch <- prometheus.MustNewConstMetric(c.lastCycle, prometheus.GaugeValue, m["scheduler_last_cycle_ms"]/1000)
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, m["scheduler_epoch"])
	ch <- prometheus.MustNewConstMetric(c.preemptions, prometheus.CounterValue, m["scheduler_preemptions"])
	ch <- prometheus.MustNewConstMetric(c.lostWork, prometheus.CounterValue, m["scheduler_preemption_lost_work_s"])
	for res, k := range map[string]string{"time": "scheduler_node_lost_work_s", "cpu": "scheduler_node_lost_cpu_s", "gpu": "scheduler_node_lost_gpu_s"} {
		ch <- prometheus.MustNewConstMetric(c.nodeLost, prometheus.CounterValue, m[k], res)
	}
	for ev, k := range map[string]string{"requeued": "scheduler_requeued_jobs", "lost": "scheduler_lost_jobs",
		"reassigned": "scheduler_reassigned", "ledger_refused": "scheduler_ledger_refusals"} {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, m[k], ev)
	}
}

var _ providers.Provider = (*fake.Provider)(nil)

// releaseAfterPending is the depth of queue from which a full plan's
// memory goes back to the OS and the collector keeps less headroom
// (planMemory).
const releaseAfterPending = 1000

// deepGCPercent is the collector's target (GOGC) while the queue is deep:
// the heap may grow by half its live size between collections, not by all
// of it.
const deepGCPercent = 50

// planMemory keeps the adapter's memory per pending job small while the
// queue is deep (releaseAfterPending jobs or more at a full plan).
//
// A full plan's memory goes back to the OS (free: a collection, then the
// free pages released), at most once every every (the scheduler's
// full_replan): plans that come more often (a deadline or a gang in the
// queue makes every cycle a full plan) would make it a collection per
// cycle. Such a plan allocates about 770 B per pending job
// (TestFullPlanMemory), beside the scheduler's 525 B. The cost is a
// collection of the live heap every full_replan (a few milliseconds over
// 10,000 jobs), on the scheduler's goroutine, the only one that calls
// release.
//
// Between plans, the collector lets the heap grow to twice its live size
// (GOGC=100) before it collects, and the resident set follows: with 10,000
// pending jobs the adapter's peak was 2,268-2,474 B per job
// (cmd/e2ebench's pending part), against 1,717-1,877 B at GOGC=50 in the
// same runs, for the same CPU (1.6-2.6% of a core either way). So while
// the queue is deep, gcPercent sets deepGCPercent, and puts back what was
// there when it is shallow again. gcPercent is nil when the operator set
// GOGC: their choice stands.
type planMemory struct {
	clk       clock.Clock
	every     time.Duration
	free      func()
	gcPercent func(int) int // debug.SetGCPercent; nil: leave the collector alone
	last      time.Time
	deep      bool // deepGCPercent is set
	prev      int  // the target before it
}

func (m *planMemory) release(pending int) {
	deep := pending >= releaseAfterPending
	if m.gcPercent != nil && deep != m.deep {
		if deep {
			m.prev = m.gcPercent(deepGCPercent)
		} else {
			m.gcPercent(m.prev)
		}
		m.deep = deep
	}
	if !deep {
		return
	}
	now := m.clk.Now()
	if !m.last.IsZero() && now.Sub(m.last) < m.every {
		return
	}
	m.last = now
	m.free()
}

// newPlanMemory is the adapter's planMemory: the collector's target is
// left alone when the environment sets GOGC.
func newPlanMemory(clk clock.Clock, every time.Duration, gogc string) *planMemory {
	m := &planMemory{clk: clk, every: every, free: debug.FreeOSMemory, gcPercent: debug.SetGCPercent}
	if gogc != "" {
		m.gcPercent = nil
	}
	return m
}
