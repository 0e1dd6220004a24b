package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/providers/local"
	"github.com/computeboard/computeboard/wire"
)

type serveFlags struct {
	config, redisURL, embedded, listen, board, consumer, node, logLevel string
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	fs.StringVar(&f.config, "config", envOr(getenv, "COMPUTEBOARD_CONFIG", ""), "YAML config file (default: built-in defaults, no templates)")
	fs.StringVar(&f.redisURL, "redis", envOr(getenv, "COMPUTEBOARD_REDIS", ""), "Redis URL (redis://, rediss://, unix://); empty = embedded blackboard")
	fs.StringVar(&f.embedded, "embedded", "", "address of the embedded blackboard (overrides the config; port 0 = any free port)")
	fs.StringVar(&f.listen, "listen", "", `HTTP address (overrides the config; "off" disables it)`)
	fs.StringVar(&f.board, "board", "", "blackboard namespace (overrides the config)")
	fs.StringVar(&f.consumer, "consumer", "", "this adapter's consumer name in the broker group (overrides the config)")
	fs.StringVar(&f.node, "node", "", "this adapter's node name (overrides the config)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("serve: unexpected argument %q", fs.Arg(0))}
	}
	logger, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return err
	}
	var cfg *Config
	if f.config != "" {
		cfg, err = LoadConfig(f.config, getenv)
	} else {
		cwd, _ := os.Getwd()
		cfg, err = ParseConfig(nil, cwd, getenv)
	}
	if err != nil {
		return err
	}
	for dst, v := range map[*string]string{&cfg.Redis: f.redisURL, &cfg.Embedded: f.embedded, &cfg.Listen: f.listen,
		&cfg.Board: f.board, &cfg.Consumer: f.consumer, &cfg.Node.Name: f.node} {
		if v != "" {
			*dst = v
		}
	}
	return serve(ctx, cfg, logger, stdout)
}

// serve runs every component until ctx is done or one fails.
func serve(ctx context.Context, cfg *Config, logger *slog.Logger, stdout io.Writer) error {
	clk := clock.Real{}
	rdb, closeRedis, where, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeRedis()
	fmt.Fprintf(stdout, "computeboard adapter: blackboard %s (board %q)\n", where, cfg.Board)

	store, err := blackboard.New(rdb, blackboard.Config{Namespace: cfg.Board, Clock: clk, Logger: logger, MaxEntries: cfg.MaxEntries})
	if err != nil {
		return err
	}
	err = store.RegisterModule(ctx, blackboard.ModuleInfo{
		Name: sourceCompute, Version: Version, Description: "computeboard: shared compute pool",
		Capabilities:   blackboard.CapProducer | blackboard.CapConsumer,
		TopicsProduced: []string{wire.TopicJob, wire.TopicJobStatus, wire.TopicResourceUtilization, wire.TopicMetrics},
		TopicsConsumed: []string{blackboard.RequestTopic},
	})
	if err != nil && !errors.Is(err, blackboard.ErrConflict) {
		return fmt.Errorf("register module: %w", err)
	}

	node, err := localNode(ctx, cfg)
	if err != nil {
		return err
	}
	// Each local task runs under a supervisor (this binary, re-executed)
	// that records its outcome even if the adapter dies meanwhile.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable for the task supervisor: %w", err)
	}
	// Jobs run as cfg.RunAs (a task's template, allowlist entry or account
	// may name another user); as root the default is "nobody", never root.
	maxOut := int64(cfg.MaxOutputMB) << 20
	prov, err := local.New(local.Config{WorkDir: cfg.WorkDir, Logger: logger, Clock: clk, Env: baseEnv(), SupervisorPath: exe,
		User: cfg.RunAs, AllowRoot: cfg.AllowRoot, MaxOutputBytes: maxOut})
	if err != nil {
		return err
	}

	var (
		disp *dispatcher
		pub  *publisher
		br   *broker.Broker
	)
	// One job store for the broker's accepts, the dispatcher's transitions,
	// the checkpoint and the HTTP API.
	js, err := jobs.New(rdb, store, jobs.Config{Retention: cfg.Retention.D(), Clock: clk, Logger: logger})
	if err != nil {
		return err
	}
	br, err = broker.New(rdb, store, broker.Config{
		Jobs:             js,
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
		DLQMaxAge:        cfg.Retention.D(),
		Check:            admissionCheck(cfg, node),
		OnCancel:         func(c broker.Cancel) { disp.OnCancel(c) },
		Clock:            clk,
		Logger:           logger,
	})
	if err != nil {
		return err
	}
	if err := br.EnsureGroups(ctx); err != nil {
		return err
	}
	pres := &presence{rdb: rdb, adapters: store.Keys().Adapters(), owners: store.Keys().JobsOwner(), node: node.Name,
		consumer: cfg.Consumer, clock: clk, every: min(5*time.Second, cfg.Scheduler.NodeTimeout.D()/3), staleness: min(30*time.Second, cfg.Scheduler.NodeTimeout.D()), log: logger.With("component", "presence")}
	if err := pres.Beat(ctx); err != nil {
		return err
	}
	disp = newDispatcher(cfg, br, js, prov, "local", node, clk, logger.With("component", "dispatcher"), func() { pub.Notify() }, pres)
	disp.requestStatus = func(ctx context.Context, ids []string) ([]string, error) {
		cmds := make([]*redis.StringCmd, len(ids))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HGet(ctx, store.Keys().Entry(id), "status")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read request statuses: %w", err)
		}
		out := make([]string, len(ids))
		for i, c := range cmds {
			out[i] = c.Val()
		}
		return out, nil
	}
	inboxDepth := func() int { return br.Inbox().Len() }
	pub = newPublisher(store, func() PoolStats { return disp.Stats(inboxDepth()) }, cfg.Telemetry.Interval.D(), logger.With("component", "telemetry"))
	ckpt := &checkpointer{jobs: js, node: node.Name, disp: disp,
		every: 10 * time.Second, log: logger.With("component", "checkpoint")}
	if err := ckpt.Load(ctx); err != nil {
		return err
	}
	if err := disp.Recover(ctx); err != nil {
		return fmt.Errorf("recover jobs: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := br.RegisterMetrics(reg); err != nil {
		return err
	}
	reg.MustRegister(newPoolCollector(disp, inboxDepth))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return store.Run(gctx) })
	g.Go(func() error { return br.Run(gctx) })
	g.Go(func() error { return disp.Intake(gctx) })
	g.Go(func() error { return disp.Run(gctx) })
	g.Go(func() error { return pub.Run(gctx) })
	g.Go(func() error { return ckpt.Run(gctx) })
	g.Go(func() error { return pres.Run(gctx) })
	g.Go(func() error {
		return pruneTaskDirs(gctx, prov, clk, cfg.Retention.D(), logger.With("component", "retention"))
	})
	if cfg.Listen != "off" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("http: %w", err)
		}
		fmt.Fprintf(stdout, "computeboard adapter: HTTP API on http://%s (/healthz /readyz /metrics /api/v1)\n", ln.Addr())
		srv := newHTTPServer(cfg, apiHandler(rdb, br, js, disp, reg, cfg))
		g.Go(func() error {
			if err := srv.Serve(newLimitListener(ln, cfg.HTTP.MaxConnections)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	fmt.Fprintf(stdout, "computeboard adapter: serving (node %s: %.1f cores, %.1f GiB; %d templates)\n",
		node.Name, float64(node.Capacity[engine.DimCPU])/1000, float64(node.Capacity[engine.DimMemory])/1024, len(cfg.Templates))
	logger.Info("serving", "board", cfg.Board, "consumer", cfg.Consumer, "node", node.Name)
	err = g.Wait()
	logger.Info("stopped")
	return err
}

// connect dials Redis, or starts the embedded blackboard.
func connect(ctx context.Context, cfg *Config) (redis.UniversalClient, func(), string, error) {
	if cfg.Redis == "" {
		emb, err := startEmbedded(cfg.Embedded)
		if err != nil {
			return nil, nil, "", err
		}
		c := redis.NewClient(&redis.Options{Addr: emb.Addr(), PoolSize: 32})
		return c, func() { _ = c.Close(); emb.Close() },
			fmt.Sprintf("embedded at redis://%s (in memory; connect modules here)", emb.Addr()), nil
	}
	c, err := dial(cfg.Redis)
	if err != nil {
		return nil, nil, "", err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, nil, "", fmt.Errorf("redis %s: %w", redactURL(cfg.Redis), err)
	}
	return c, func() { _ = c.Close() }, redactURL(cfg.Redis), nil
}

// dial builds a client from a URL: redis://, rediss:// or unix:// for one
// server, or a Redis Cluster when the URL names more nodes with addr=
// query parameters (redis://host1:6379?addr=host2:6379&addr=host3:6379).
// Every key of a board shares one hash tag, so its scripts stay legal on a
// cluster.
func dial(url string) (redis.UniversalClient, error) {
	if strings.Contains(url, "addr=") {
		opt, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("--redis %q: %w", redactURL(url), err)
		}
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis %q: %w", redactURL(url), err)
	}
	return redis.NewClient(opt), nil
}

// localNode sizes this machine as an engine node.
func localNode(ctx context.Context, cfg *Config) (engine.Node, error) {
	capa, err := local.Discover(ctx)
	if err != nil {
		return engine.Node{}, err
	}
	name := cfg.Node.Name
	if name == "" {
		name = capa.Hostname
		cfg.Node.Name = name
	}
	cores := cfg.Node.CPUCores
	if cores == 0 {
		cores = float64(capa.CPUs)
	}
	memGB := cfg.Node.MemoryGB
	if memGB == 0 {
		memGB = float64(capa.MemoryTotal) / (1 << 30)
	}
	var c engine.Resources
	c[engine.DimCPU] = int64(math.Round(cores * 1000))
	c[engine.DimMemory] = int64(memGB * 1024)
	c[engine.DimNetwork] = int64(cfg.Node.NetworkMbps)
	if cfg.Node.StorageGB > 0 {
		dim, ok := engine.TierDim(cfg.Node.storageTier())
		if !ok {
			return engine.Node{}, fmt.Errorf("node.storage_tier %q: want nvme, ssd or hdd", cfg.Node.StorageTier)
		}
		c[dim] = int64(cfg.Node.StorageGB)
	}
	return engine.Node{Name: name, Labels: cfg.Node.Labels, Capacity: c}, nil
}

// admissionCheck refuses, at intake, requests that name an unapproved
// program or that no node could ever run.
func admissionCheck(cfg *Config, node engine.Node) func(wire.Request) *wire.Error {
	return func(req wire.Request) *wire.Error {
		if _, werr := cfg.Resolve(req); werr != nil {
			return werr
		}
		j := jobs.Job{Request: req}
		j.Account, j.Priority = req.Account, req.Priority
		if rej := engine.Feasible([]engine.Node{node}, engineJob(j, time.Time{}, cfg)); rej != nil {
			return &wire.Error{Code: wire.CodeImpossibleRequest, Field: "resource_requirements", Message: rej.Message}
		}
		return nil
	}
}

// baseEnv is the environment every job starts from: enough to find
// programs, nothing from the adapter's own environment (the provider sets
// HOME to the task's work directory, and USER and LOGNAME).
func baseEnv() map[string]string {
	return map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
}

// pruneTaskDirs removes finished tasks' directories older than retention,
// hourly (and once at start).
func pruneTaskDirs(ctx context.Context, prov *local.Provider, clk clock.Clock, retention time.Duration, log *slog.Logger) error {
	for {
		n, err := prov.Prune(ctx, clk.Now().Add(-retention))
		if err != nil && ctx.Err() == nil {
			log.Warn("prune task directories", "err", err)
		} else if n > 0 {
			log.Info("pruned task directories", "removed", n, "older_than", retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Hour):
		}
	}
}

// apiHandler serves health, metrics, the inbox API and the jobs API.
func apiHandler(rdb redis.UniversalClient, br *broker.Broker, js *jobs.Store, disp *dispatcher, reg *prometheus.Registry, cfg *Config) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "redis": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/api/v1/inbox/", br.Handler())
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
		j, err := js.Get(r.Context(), r.PathValue("id"))
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
	mux.HandleFunc("GET /api/v1/jobs/{id}/explain", func(w http.ResponseWriter, r *http.Request) {
		e, ok := disp.Explanations()[r.PathValue("id")]
		if !ok {
			writeJSON(w, http.StatusNotFound, apiError("not_found", "job "+r.PathValue("id")+" is not pending on this adapter"))
			return
		}
		writeJSON(w, http.StatusOK, ExplanationJSON(e))
	})
	mux.HandleFunc("GET /api/v1/scheduler", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, disp.Stats(br.Inbox().Len()))
	})
	return mux
}

func apiError(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// poolCollector exports the dispatcher's figures to Prometheus.
type poolCollector struct {
	disp   *dispatcher
	depth  func() int
	util   *prometheus.Desc
	jobs   *prometheus.Desc
	future *prometheus.Desc
}

func newPoolCollector(d *dispatcher, depth func() int) *poolCollector {
	return &poolCollector{disp: d, depth: depth,
		util: prometheus.NewDesc("computeboard_pool_utilization_ratio", "Allocated fraction of the pool by resource.", []string{"resource"}, nil),
		jobs: prometheus.NewDesc("computeboard_jobs", "Jobs by state (pending, running) and counters (completed, failed, cancelled) since start.", []string{"state"}, nil),
		future: prometheus.NewDesc("computeboard_future_timestamps_total",
			"Requests whose entry timestamp was after their acceptance (a poster's clock ahead, or milliseconds sent as seconds); their wait is counted from acceptance.", nil, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.util
	ch <- c.jobs
	ch <- c.future
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.future, prometheus.CounterValue, float64(c.disp.futureStamps.Load()))
	s := c.disp.Stats(c.depth())
	for k, v := range s.Utilization {
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, v, k)
	}
	for k, v := range map[string]int{"pending": s.Jobs.PendingJobs, "running": s.Jobs.RunningJobs,
		"completed": s.Jobs.CompletedJobs, "failed": s.Jobs.FailedJobs, "cancelled": s.Jobs.CancelledJobs} {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(v), k)
	}
}
