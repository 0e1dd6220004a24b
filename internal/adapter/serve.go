package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers/local"
	"github.com/computeboard/computeboard/wire"
)

type serveFlags struct {
	config, redisURL, embedded, listen, board, consumer, node, logLevel, role string
	fakeNodes                                                                 int
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
	fs.StringVar(&f.consumer, "consumer", "", "the scheduler's consumer name in the broker group (overrides the config)")
	fs.StringVar(&f.node, "node", "", "this adapter's node name (overrides the config)")
	fs.StringVar(&f.role, "role", "", "agent, scheduler or both (overrides the config; default both)")
	fs.IntVar(&f.fakeNodes, "fake-nodes", -1, "serve this many fake nodes instead of this machine (overrides pool.fake_nodes.count)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("serve: unexpected argument %q", fs.Arg(0))}
	}
	switch f.role {
	case "", RoleAgent, RoleScheduler, RoleBoth:
	default:
		return usageError{fmt.Sprintf("serve: --role %q: want agent, scheduler or both", f.role)}
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
		&cfg.Board: f.board, &cfg.Consumer: f.consumer, &cfg.Node.Name: f.node, &cfg.Role: f.role} {
		if v != "" {
			*dst = v
		}
	}
	if f.fakeNodes >= 0 {
		cfg.Pool.FakeNodes.Count = f.fakeNodes
	}
	return serve(ctx, cfg, logger, stdout)
}

// serve runs this adapter's roles until ctx is done or one fails: the
// node agent, and the scheduler candidate, which runs intake, the engine
// and the telemetry publisher for as long as it holds the lease.
func serve(ctx context.Context, cfg *Config, logger *slog.Logger, stdout io.Writer) error {
	clk := clock.Real{}
	rdb, closeRedis, where, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeRedis()
	fmt.Fprintf(stdout, "computeboard adapter: blackboard %s (board %q)\n", where, cfg.Board)
	logPersistence(ctx, cfg, rdb, logger)

	store, err := blackboard.New(rdb, blackboard.Config{Namespace: cfg.Board, Clock: clk, Logger: logger, MaxEntries: cfg.MaxEntries})
	if err != nil {
		return err
	}
	err = store.RegisterModule(ctx, blackboard.ModuleInfo{
		Name: sourceCompute, Version: Version, Description: "computeboard: shared compute pool",
		Capabilities:   blackboard.CapProducer | blackboard.CapConsumer,
		TopicsProduced: []string{wire.TopicJob, wire.TopicJobStatus, wire.TopicResourceUtilization, wire.TopicMetrics, wire.TopicPreemption},
		TopicsConsumed: []string{blackboard.RequestTopic},
	})
	if err != nil && !errors.Is(err, blackboard.ErrConflict) {
		return fmt.Errorf("register module: %w", err)
	}
	// One job store for the broker's accepts, the scheduler's (fenced) and
	// the agents' transitions, and the HTTP API.
	js, err := jobs.New(rdb, store, jobs.Config{Retention: cfg.Retention.D(), Clock: clk, Logger: logger})
	if err != nil {
		return err
	}
	p := &poolMember{cfg: cfg, rdb: rdb, store: store, jobs: js, clk: clk, log: logger,
		registry: pool.NewRegistry(rdb, store.Keys()), channel: pool.NewChannel(rdb, store.Keys())}
	// After a Redis restart nothing new is assigned until every node has
	// re-asserted its jobs, or for at most this long (a silent node gets no
	// new work after it anyway).
	fixedRun, err := pool.ServerRun(ctx, rdb)
	if err != nil {
		logger.Warn("this Redis user may not run INFO: a Redis restart that lost writes goes unseen, and nodes do not re-assert their jobs after it (grant +info; see README, Delivery guarantees)", "err", err)
	}
	p.registry.SetRound(cfg.Pool.NodeUnhealthy.D(), fixedRun)
	p.channel.SetRound(cfg.Pool.NodeUnhealthy.D(), fixedRun)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return store.Run(gctx) })
	if cfg.runsAgent() {
		ag, desc, err := p.buildAgent(ctx, g, gctx)
		if err != nil {
			return err
		}
		p.agent = ag
		g.Go(func() error { return ag.Run(gctx) })
		fmt.Fprintf(stdout, "computeboard adapter: agent of %s\n", desc)
	}
	if cfg.Listen != "off" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("http: %w", err)
		}
		p.url = cfg.Pool.AdvertiseURL
		if p.url == "" {
			p.url = "http://" + ln.Addr().String()
		}
		fmt.Fprintf(stdout, "computeboard adapter: HTTP API on http://%s (/healthz /readyz /metrics /api/v1)\n", ln.Addr())
		srv := newHTTPServer(cfg, apiHandler(p, reg))
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
	if cfg.runsScheduler() {
		el, err := pool.NewElector(rdb, store.Keys(), pool.ElectorConfig{ID: candidateID(), URL: p.url,
			TTL: cfg.Pool.LeaseTime.D(), Clock: clk, Logger: logger.With("component", "elector")})
		if err != nil {
			return err
		}
		p.elector = el
		g.Go(func() error { return el.Run(gctx, p.runTerm) })
		fmt.Fprintf(stdout, "computeboard adapter: scheduler candidate (lease %v)\n", cfg.Pool.LeaseTime.D())
	}
	fmt.Fprintf(stdout, "computeboard adapter: serving (role %s; %d templates)\n", cfg.Role, len(cfg.Templates))
	logger.Info("serving", "board", cfg.Board, "role", cfg.Role)
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

// logPersistence says once, in plain words, what the Redis server's
// persistence settings mean for the guarantees (issue 11: a host crash
// with appendfsync everysec can roll job records back).
func logPersistence(ctx context.Context, cfg *Config, rdb redis.UniversalClient, log *slog.Logger) {
	if cfg.Redis == "" {
		log.Info("blackboard persistence: the embedded blackboard keeps everything in memory; stopping the adapter loses the board")
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	p, err := blackboard.ReadPersistence(pctx, rdb)
	switch {
	case err != nil:
		log.Info("blackboard persistence: cannot read the Redis server's settings; the delivery guarantees depend on them (see README, Delivery guarantees)", "err", err)
	case p.Safe:
		log.Info("blackboard persistence: " + p.Guarantee)
	default:
		log.Warn("blackboard persistence: " + p.Guarantee)
	}
}
