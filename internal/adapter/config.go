package adapter

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/inventory"
)

// Config is the adapter's YAML configuration. Every field has a useful
// zero value; Load fills the defaults and validates once.
type Config struct {
	// Board is the blackboard namespace (default "default").
	Board string `yaml:"board"`
	// MaxEntries caps the board's entries (default 100000). Past it the
	// oldest LOW, then NORMAL, then HIGH entries are evicted, as in
	// ASI:BUILD; every job keeps a durable record outside the board, and a
	// job entry evicted while its job runs is posted again on its next
	// transition. -1 means unlimited.
	MaxEntries int `yaml:"max_entries"`
	// Redis is a redis:// or unix:// URL. Empty means the embedded server.
	Redis string `yaml:"redis"`
	// Embedded is the loopback address the embedded server listens on when
	// Redis is empty (default 127.0.0.1:6380; port 0 picks a free one).
	Embedded string `yaml:"embedded"`
	// Listen is the HTTP address for /healthz, /readyz, /metrics and
	// /api/v1 (default 127.0.0.1:8377; "off" disables it).
	Listen string `yaml:"listen"`
	// OperatorToken guards the write APIs. OperatorTokenEnv names an
	// environment variable to read it from instead (default
	// COMPUTEBOARD_OPERATOR_TOKEN). Without a token, writes are refused.
	OperatorToken    string `yaml:"operator_token"`
	OperatorTokenEnv string `yaml:"operator_token_env"`
	// WorkDir holds job output (default .run/jobs next to the config).
	WorkDir string `yaml:"work_dir"`
	// Consumer names the scheduler in the broker's consumer group (default
	// "scheduler"). Every scheduler candidate of a board should use the
	// same name: a newly elected scheduler then reads the unacknowledged
	// intake of the one before it at once.
	Consumer string `yaml:"consumer"`
	// Role is what this adapter does in the pool: "agent" (runs its
	// node's jobs), "scheduler" (a scheduler candidate: intake, engine,
	// inbox API) or "both" (the default).
	Role string `yaml:"role"`

	// Templates are operator-approved commands, by name.
	Templates map[string]Template `yaml:"templates"`
	// Allowlist holds the programs a request's `command` may name as
	// argv[0]: absolute paths, or bare names resolved on PATH at load time.
	// An entry is a path, or a mapping {path, env_allow, run_as}. Empty
	// means raw commands are refused.
	Allowlist []AllowEntry `yaml:"allowlist"`

	// RunAs is the user jobs run as (a name or a numeric uid). Empty means
	// the adapter's own user, except when the adapter runs as root: then
	// jobs run as "nobody". A template, an allowlist entry or an account
	// may name its own user; the template's or entry's wins, then the
	// account's, then this one. A user with uid 0 is refused unless
	// AllowRoot is set.
	RunAs string `yaml:"run_as"`
	// AllowRoot lets run_as name root (uid 0). Off by default: a job never
	// runs as root because of a default.
	AllowRoot bool `yaml:"allow_root"`
	// Identity says where a request's module identity comes from: "trusted"
	// (the default: what the poster writes, for boards without Redis ACLs)
	// or "acl" (the intake lane and entry key, which per-module Redis ACL
	// users confine; see docs/security.md).
	Identity string `yaml:"identity"`
	// HTTP hardens the API server.
	HTTP HTTPConfig `yaml:"http"`
	// Retention is how long finished jobs keep their records, idempotency
	// entries and task directories (default 168h, 7 days).
	Retention Duration `yaml:"retention"`
	// MaxOutputMB caps each job's stdout and stderr files (default 64).
	MaxOutputMB int `yaml:"max_output_mb"`
	// Supervisor is the absolute path of the binary each local job's
	// supervisor runs (cmd/cb-supervisor). Empty: cb-supervisor next to
	// the adapter's own executable, else the adapter itself (slower; see
	// supervisorPath).
	Supervisor string `yaml:"supervisor"`
	// SupervisorPerTask runs a supervisor process per local job instead of
	// the work directory's one supervisor server (the default on Linux:
	// the same records and guarantee, without a process start per job;
	// see local.Config.SupervisorServer).
	SupervisorPerTask bool `yaml:"supervisor_per_task"`

	// Node describes this adapter's node (zero values are discovered;
	// GPUs through NVML, or declared by hand): the node of the local
	// provider.
	Node inventory.Config `yaml:"node"`
	// Providers lists the providers whose nodes this adapter's agent
	// serves, by name (see ProviderConfig): this machine (local), a Slurm
	// partition's nodes (slurm), fake nodes. Empty: this machine alone as
	// provider "local", or pool.fake_nodes as provider "fake".
	Providers []ProviderConfig `yaml:"providers"`

	Pool      PoolConfig      `yaml:"pool"`
	Scheduler SchedulerConfig `yaml:"scheduler"`
	Telemetry TelemetryConfig `yaml:"telemetry"`
	Broker    BrokerConfig    `yaml:"broker"`
	// Accounts sets fair-share shares (default: one account per module,
	// share 1).
	Accounts []AccountConfig `yaml:"accounts"`

	dir  string // directory of the config file, for relative paths
	euid int    // the adapter's effective uid (-1 until fill reads it)
}

// Template is an operator-approved command.
type Template struct {
	Description string `yaml:"description"`
	// Command is argv; argv[0] must be an absolute path or resolvable on
	// PATH at load time.
	Command []string `yaml:"command"`
	// Image is the container image the command runs in on a container
	// backend (a kube provider; default its image); others ignore it.
	Image string `yaml:"image"`
	// AllowArguments lets a request append arguments; ArgumentPattern, if
	// set, must match every argument in full.
	AllowArguments  bool   `yaml:"allow_arguments"`
	ArgumentPattern string `yaml:"argument_pattern"`
	MaxArguments    int    `yaml:"max_arguments"`
	// Env is fixed environment; EnvAllow lists the variables a request may
	// set (opt-in by name; loader and interpreter variables such as
	// LD_PRELOAD or PYTHONPATH can never be listed, see deniedEnv).
	Env      map[string]string `yaml:"env"`
	EnvAllow []string          `yaml:"env_allow"`
	// EndOfOptions inserts "--" between the template's command and the
	// request's arguments, so that no argument is read as an option.
	EndOfOptions bool `yaml:"end_of_options"`
	// RunAs overrides the user this template's jobs run as.
	RunAs string `yaml:"run_as"`
	// Timeout caps the run time (default 1h; a request may ask for less).
	Timeout Duration `yaml:"timeout"`
	// RequeueLost runs a job again when its node is lost with it running
	// (at least once: the first run may still be going on there). Off by
	// default: such jobs end failed with reason lost.
	RequeueLost bool `yaml:"requeue_lost"`
	// NonPreemptible jobs are never evicted to make room for another
	// (scheduler.preemption).
	NonPreemptible bool `yaml:"non_preemptible"`
	// PreemptMode is how this template's jobs are evicted: cancel,
	// requeue, checkpoint (SIGUSR1, then the stop after
	// scheduler.preemption.checkpoint_grace, then requeue) or suspend
	// (paused in place and resumed on its node; requeue where the node's
	// provider cannot suspend); default
	// scheduler.preemption.default_mode.
	PreemptMode string `yaml:"preempt_mode"`

	argRE *regexp.Regexp
}

// PoolConfig tunes the pool: the scheduler lease, heartbeats, node
// health, declared node classes and fake nodes.
type PoolConfig struct {
	// LeaseTime is the scheduler lease: a standby takes over within it
	// after the scheduler dies (default 10s).
	LeaseTime Duration `yaml:"lease_time"`
	// Heartbeat is how often an agent renews its nodes (default 2s).
	Heartbeat Duration `yaml:"heartbeat"`
	// NodeUnhealthy: a node silent this long gets no new work, and its
	// assigned but unstarted jobs are placed elsewhere (default 3
	// heartbeats). After scheduler.node_timeout its running jobs end lost.
	NodeUnhealthy Duration `yaml:"node_unhealthy"`
	// AdvertiseURL is this adapter's HTTP API as the other adapters reach
	// it (default: http:// and the listen address); non-scheduler adapters
	// forward scheduler API calls there.
	AdvertiseURL string `yaml:"advertise_url"`
	// NodeClasses are node shapes the pool may have (node sections): a
	// request that fits neither a registered node nor a class is rejected
	// impossible_request; one that fits a class waits for such a node.
	NodeClasses []inventory.Config `yaml:"node_classes"`
	// FakeNodes makes this adapter's agent serve virtual nodes instead of
	// its machine (also --fake-nodes N): nothing runs; each task ends after
	// its estimated duration. For load tests, demos and benchmarks.
	FakeNodes FakeNodesConfig `yaml:"fake_nodes"`
	// CheckpointDir holds the jobs' checkpoints, one directory per job
	// (the job checkpoint protocol; see README, Preemption). A job resumes
	// on another node only when every node's adapter names the same
	// shared directory here (default: .checkpoints under work_dir, which
	// only this node sees). Relative to the config file.
	CheckpointDir string `yaml:"checkpoint_dir"`
	// CheckpointInterval is how often a job is asked to checkpoint by
	// itself, besides on SIGUSR1 (default 60s).
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
}

// FakeNodesConfig shapes the fake nodes.
type FakeNodesConfig struct {
	// Count of fake nodes (default 0: serve the real machine).
	Count int `yaml:"count"`
	// Prefix of their names: <prefix>-0001, … (default "fake").
	Prefix string `yaml:"prefix"`
	// Node is each fake node's shape: cpu_cores and memory_gb (default 8
	// and 32), labels, gpus with mig instances, storage, network_mbps.
	Node inventory.Config `yaml:"node"`
	// Duration of a task that states no estimated duration (default 1s).
	Duration Duration `yaml:"duration"`
}

// SchedulerConfig tunes the engine loop.
type SchedulerConfig struct {
	// Interval between scheduling cycles (default 200ms); a cycle also runs
	// on every new job and every job end.
	Interval Duration `yaml:"interval"`
	// Seed for the engine's randomness (default 1).
	Seed uint64 `yaml:"seed"`
	// FairShare selects how accounts are interleaved: priority (one order
	// by the priority formula, where fair share is a factor; the default),
	// proportional, lottery, wfq, drr or drf.
	FairShare string `yaml:"fair_share"`
	// Placement strategy: best-fit, first-fit, worst-fit, balanced,
	// most-allocated, cheapest (providers[].cost; default best-fit). A
	// request's placement overrides it.
	Placement string `yaml:"placement"`
	// MaxPending bounds the accepted jobs waiting in the engine (default
	// 10000). Beyond it the adapter stops taking requests from the inbox,
	// the inbox fills, and the broker stops reading Redis: backpressure
	// all the way to the intake lanes, where requests wait safely.
	MaxPending int `yaml:"max_pending"`
	// NodeTimeout is how long a node may be silent (no heartbeat) before
	// its running jobs end lost (default 5m): they are not run again, as
	// the process may live on there, unless their template says
	// requeue_lost (at least once). When the node comes back, the true
	// outcome replaces lost.
	NodeTimeout Duration `yaml:"node_timeout"`
	// GangTimeout is how long a gang may wait for its missing members
	// after its first member was accepted; then its members fail with
	// gang_incomplete (default 5m).
	GangTimeout Duration `yaml:"gang_timeout"`
	// FullReplan is the longest time between two engine runs (default
	// 10s): the engine runs when its input changed (a new job, an end, a
	// cancel, a node change) and at least this often for what time alone
	// changes (ageing, deadline urgency, reservations, estimated starts).
	FullReplan Duration `yaml:"full_replan"`
	// Preemption lets a job that fits nowhere evict running jobs of lower
	// priority (off by default).
	Preemption PreemptionConfig `yaml:"preemption"`
}

// PreemptionConfig is scheduler.preemption: engine.PreemptionConfig in
// YAML (see engine/preempt.go for the policies and guard rails).
type PreemptionConfig struct {
	// Policy chooses the victims: off (default), priority, fair-share,
	// deadline-aware, resource-based, cost-based or hybrid.
	Policy string `yaml:"policy"`
	// PoolPolicy overrides Policy per pool (node label "pool").
	PoolPolicy map[string]string `yaml:"pool_policy"`
	// MinRuntime: a job runs at least this long before it may be evicted
	// (default 5m; 0s = no minimum).
	MinRuntime *Duration `yaml:"min_runtime"`
	// Cooldown: a job evicted less than this ago is neither evicted again
	// nor evicts (default 10m; 0s = none).
	Cooldown *Duration `yaml:"cooldown"`
	// BudgetPerHour caps evictions per pool, AccountBudgetPerHour per
	// victim account, in any rolling hour (0 = no cap).
	BudgetPerHour        int `yaml:"budget_per_hour"`
	AccountBudgetPerHour int `yaml:"account_budget_per_hour"`
	// MinPreemptorLevel: only jobs of at least this level evict (0..9;
	// e.g. 8: only CRITICAL requests).
	MinPreemptorLevel int `yaml:"min_preemptor_level"`
	// MaxVictims per preemptor (default 8); MaxPreemptors: pending jobs
	// that may try to evict per cycle (default 16).
	MaxVictims    int `yaml:"max_victims"`
	MaxPreemptors int `yaml:"max_preemptors"`
	// DefaultMode of victims whose template names none: requeue (default),
	// cancel, checkpoint or suspend (requeue where the node's provider
	// cannot suspend).
	DefaultMode string `yaml:"default_mode"`
	// HybridWeights weigh the hybrid policy's scores (default 1 each).
	HybridWeights HybridWeights `yaml:"hybrid_weights"`
	// CheckpointGrace is how long a victim evicted in checkpoint mode has
	// between SIGUSR1 and its stop (default 30s).
	CheckpointGrace Duration `yaml:"checkpoint_grace"`
	// PreemptorWait is how long a preemptor keeps the room its victims
	// free while they stop (default 60s + checkpoint_grace).
	PreemptorWait Duration `yaml:"preemptor_wait"`
}

// HybridWeights are scheduler.preemption.hybrid_weights.
type HybridWeights struct {
	Priority  float64 `yaml:"priority"`
	FairShare float64 `yaml:"fair_share"`
	Deadline  float64 `yaml:"deadline"`
	Resource  float64 `yaml:"resource"`
	Cost      float64 `yaml:"cost"`
}

// validModes are the eviction modes a template or the default may name.
var validModes = []string{"", "cancel", "requeue", "checkpoint", "suspend"}

// check validates scheduler.preemption.
func (p *PreemptionConfig) check() error {
	const at = "scheduler.preemption"
	policies := "off, priority, fair-share, deadline-aware, resource-based, cost-based or hybrid"
	if !engine.ValidPreemptPolicy(engine.PreemptPolicy(p.Policy)) {
		return fmt.Errorf("%s.policy %q: want %s", at, p.Policy, policies)
	}
	for pool, pol := range p.PoolPolicy {
		if !engine.ValidPreemptPolicy(engine.PreemptPolicy(pol)) {
			return fmt.Errorf("%s.pool_policy[%s] %q: want %s", at, pool, pol, policies)
		}
	}
	for name, d := range map[string]*Duration{"min_runtime": p.MinRuntime, "cooldown": p.Cooldown,
		"checkpoint_grace": &p.CheckpointGrace, "preemptor_wait": &p.PreemptorWait} {
		if d != nil && *d < 0 {
			return fmt.Errorf("%s.%s %v: must not be negative", at, name, d.D())
		}
	}
	for name, v := range map[string]int{"budget_per_hour": p.BudgetPerHour, "account_budget_per_hour": p.AccountBudgetPerHour,
		"max_victims": p.MaxVictims, "max_preemptors": p.MaxPreemptors} {
		if v < 0 {
			return fmt.Errorf("%s.%s %d: must not be negative", at, name, v)
		}
	}
	if p.MinPreemptorLevel < 0 || p.MinPreemptorLevel > 9 {
		return fmt.Errorf("%s.min_preemptor_level %d: want 0..9", at, p.MinPreemptorLevel)
	}
	if !slices.Contains(validModes, p.DefaultMode) {
		return fmt.Errorf("%s.default_mode %q: want cancel, requeue, checkpoint or suspend", at, p.DefaultMode)
	}
	w := p.HybridWeights
	if w.Priority < 0 || w.FairShare < 0 || w.Deadline < 0 || w.Resource < 0 || w.Cost < 0 {
		return fmt.Errorf("%s.hybrid_weights: weights must not be negative", at)
	}
	return nil
}

// Engine returns the engine's PreemptionConfig.
func (p *PreemptionConfig) Engine() engine.PreemptionConfig {
	out := engine.PreemptionConfig{
		Policy:               engine.PreemptPolicy(p.Policy),
		BudgetPerHour:        p.BudgetPerHour,
		AccountBudgetPerHour: p.AccountBudgetPerHour,
		MinPreemptorLevel:    p.MinPreemptorLevel,
		MaxVictims:           p.MaxVictims,
		MaxPreemptors:        p.MaxPreemptors,
		DefaultMode:          engine.EvictionMode(p.DefaultMode),
		Weights: engine.HybridWeights{Priority: p.HybridWeights.Priority, FairShare: p.HybridWeights.FairShare,
			Deadline: p.HybridWeights.Deadline, Resource: p.HybridWeights.Resource, Cost: p.HybridWeights.Cost},
	}
	if len(p.PoolPolicy) > 0 {
		out.PoolPolicy = map[string]engine.PreemptPolicy{}
		for k, v := range p.PoolPolicy {
			out.PoolPolicy[k] = engine.PreemptPolicy(v)
		}
	}
	// Unset: the engine's default (0); set to 0s: none (the engine's -1).
	dur := func(d *Duration) time.Duration {
		switch {
		case d == nil:
			return 0
		case *d == 0:
			return -1
		}
		return d.D()
	}
	out.MinRuntime, out.Cooldown = dur(p.MinRuntime), dur(p.Cooldown)
	return out
}

// TelemetryConfig tunes the metrics publisher.
type TelemetryConfig struct {
	// Interval is the longest gap between metrics entries (default 10s);
	// changes are published sooner.
	Interval Duration `yaml:"interval"`
}

// BrokerConfig tunes the inbox.
type BrokerConfig struct {
	InboxCapacity    int      `yaml:"inbox_capacity"`
	LeaseTimeout     Duration `yaml:"lease_timeout"`
	ClaimIdle        Duration `yaml:"claim_idle"`
	DeliveryLimit    int      `yaml:"delivery_limit"`
	ModuleRate       float64  `yaml:"module_rate"`
	ModuleBurst      int      `yaml:"module_burst"`
	ModuleMaxWaiting int      `yaml:"module_max_waiting"`
}

// AccountConfig is one fair-share account.
type AccountConfig struct {
	Name   string  `yaml:"name"`
	Parent string  `yaml:"parent"`
	Shares float64 `yaml:"shares"`
	// Quota caps what the account's subtree may hold at once; Guaranteed
	// is what it gets ahead of everyone else. Zero fields mean no limit or
	// no guarantee in that resource.
	Quota      AmountConfig `yaml:"quota"`
	Guaranteed AmountConfig `yaml:"guaranteed"`
	// Modules may bill this account besides the module of the same name
	// ("*": every module). By default a module may bill only the account
	// named after it (enforced with identity acl, or when any account lists
	// modules).
	Modules []string `yaml:"modules"`
	// RunAs is the user this account's jobs run as, unless their template
	// or allowlist entry names one.
	RunAs string `yaml:"run_as"`
}

// AllowEntry is one allowlisted program.
type AllowEntry struct {
	Path string `yaml:"path"`
	// EnvAllow lists the variables a request for this program may set.
	EnvAllow []string `yaml:"env_allow"`
	// RunAs overrides the user this program's jobs run as.
	RunAs string `yaml:"run_as"`
}

// UnmarshalYAML reads a bare path or a mapping.
func (a *AllowEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&a.Path)
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: an allowlist entry is a path or a mapping {path, env_allow, run_as}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i].Value; k {
		case "path", "env_allow", "run_as":
		default: // Node.Decode does not inherit the decoder's KnownFields
			return fmt.Errorf("line %d: field %s not found in type adapter.AllowEntry", n.Content[i].Line, k)
		}
	}
	type plain AllowEntry
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*a = AllowEntry(p)
	return nil
}

// HTTPConfig hardens the HTTP API.
type HTTPConfig struct {
	// PublicReads lets anyone read job records and dead letters (request
	// payloads and environment included). Off by default: those reads need
	// the operator token, like writes. /healthz, /readyz and /metrics are
	// always open.
	PublicReads bool `yaml:"public_reads"`
	// Profiling serves the Go runtime's profiles (CPU, heap, allocations,
	// goroutines, execution trace) at /debug/pprof/, to the operator
	// token only, never to public reads; off by default. The command
	// line (which may hold a Redis password) is not served.
	Profiling bool `yaml:"profiling"`
	// MaxConnections caps concurrent connections (default 256).
	MaxConnections int `yaml:"max_connections"`
	// ReadTimeout, WriteTimeout and IdleTimeout bound each connection
	// (defaults 10s, 30s, 60s).
	ReadTimeout  Duration `yaml:"read_timeout"`
	WriteTimeout Duration `yaml:"write_timeout"`
	IdleTimeout  Duration `yaml:"idle_timeout"`
}

// AmountConfig is an amount of resources in the request's units.
type AmountConfig struct {
	CPUCores float64 `yaml:"cpu_cores"`
	MemoryGB float64 `yaml:"memory_gb"`
	GPUs     int     `yaml:"gpus"`
}

// resources converts an amount to the engine's units.
func (a AmountConfig) resources() engine.Resources {
	var r engine.Resources
	r[engine.DimCPU] = int64(math.Round(a.CPUCores * 1000))
	r[engine.DimMemory] = int64(math.Round(a.MemoryGB * 1024))
	r[engine.DimGPU] = int64(a.GPUs)
	return r
}

// engineAccounts is the fair-share tree for the engine.
func (c *Config) engineAccounts() []engine.Account {
	var out []engine.Account
	for _, a := range c.Accounts {
		out = append(out, engine.Account{Name: a.Name, Parent: a.Parent, Shares: a.Shares,
			Quota: a.Quota.resources(), Guaranteed: a.Guaranteed.resources()})
	}
	return out
}

// Duration is a time.Duration that reads "1s", "250ms" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// LoadConfig reads and validates a YAML file. Unknown keys are errors.
func LoadConfig(path string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := ParseConfig(b, filepath.Dir(abs), getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes YAML; dir resolves relative paths.
func ParseConfig(b []byte, dir string, getenv func(string) string) (*Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	cfg.dir, cfg.euid = dir, -1
	if err := cfg.fill(getenv); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func (c *Config) fill(getenv func(string) string) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if c.Board == "" {
		c.Board = "default"
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = 100000
	}
	if c.Embedded == "" {
		c.Embedded = "127.0.0.1:6380"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8377"
	}
	if c.OperatorTokenEnv == "" {
		c.OperatorTokenEnv = "COMPUTEBOARD_OPERATOR_TOKEN"
	}
	if c.OperatorToken == "" {
		c.OperatorToken = getenv(c.OperatorTokenEnv)
	}
	if c.HTTP.Profiling && c.OperatorToken == "" {
		return fmt.Errorf("http.profiling: profiles are served to the operator token only; set operator_token (or %s)", c.OperatorTokenEnv)
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(c.dir, ".run", "jobs")
	} else if !filepath.IsAbs(c.WorkDir) {
		c.WorkDir = filepath.Join(c.dir, c.WorkDir)
	}
	if c.Pool.CheckpointDir == "" {
		c.Pool.CheckpointDir = filepath.Join(c.WorkDir, ".checkpoints")
	} else if !filepath.IsAbs(c.Pool.CheckpointDir) {
		c.Pool.CheckpointDir = filepath.Join(c.dir, c.Pool.CheckpointDir)
	}
	if c.Supervisor != "" && !filepath.IsAbs(c.Supervisor) {
		return fmt.Errorf("supervisor %q: want an absolute path", c.Supervisor)
	}
	if c.Consumer == "" {
		c.Consumer = "scheduler"
	}
	switch c.Role {
	case "":
		c.Role = RoleBoth
	case RoleAgent, RoleScheduler, RoleBoth:
	default:
		return fmt.Errorf("role %q: want agent, scheduler or both", c.Role)
	}
	if err := c.fillPool(); err != nil {
		return err
	}
	if err := c.fillProviders(); err != nil {
		return err
	}
	if c.Scheduler.Interval == 0 {
		c.Scheduler.Interval = Duration(200 * time.Millisecond)
	}
	switch c.Scheduler.FairShare {
	case "", "priority", "proportional", "lottery", "wfq", "drr", "drf":
	default:
		return fmt.Errorf("scheduler.fair_share %q: want priority, proportional, lottery, wfq, drr or drf", c.Scheduler.FairShare)
	}
	switch c.Scheduler.Placement {
	case "", "best-fit", "first-fit", "worst-fit", "balanced", "most-allocated", "cheapest":
	default:
		return fmt.Errorf("scheduler.placement %q: want best-fit, first-fit, worst-fit, balanced, most-allocated or cheapest", c.Scheduler.Placement)
	}
	if c.Scheduler.NodeTimeout == 0 {
		c.Scheduler.NodeTimeout = Duration(5 * time.Minute)
	}
	if c.Scheduler.GangTimeout == 0 {
		c.Scheduler.GangTimeout = Duration(5 * time.Minute)
	}
	if c.Scheduler.FullReplan == 0 {
		c.Scheduler.FullReplan = Duration(10 * time.Second)
	}
	if c.Scheduler.MaxPending == 0 {
		c.Scheduler.MaxPending = 10000
	}
	if c.Scheduler.Seed == 0 {
		c.Scheduler.Seed = 1
	}
	if err := c.Scheduler.Preemption.check(); err != nil {
		return err
	}
	if c.Telemetry.Interval == 0 {
		c.Telemetry.Interval = Duration(10 * time.Second)
	}
	if err := c.fillSecurity(); err != nil {
		return err
	}
	for i, a := range c.Allowlist {
		r, err := resolveCommand(a.Path)
		if err != nil {
			return fmt.Errorf("allowlist[%d]: %w", i, err)
		}
		c.Allowlist[i].Path = r
		if err := checkEnvAllow(a.EnvAllow); err != nil {
			return fmt.Errorf("allowlist[%d] (%s): env_allow: %w", i, r, err)
		}
		if err := c.checkUser(a.RunAs); err != nil {
			return fmt.Errorf("allowlist[%d] (%s): run_as: %w", i, r, err)
		}
	}
	for name, t := range c.Templates {
		if len(t.Command) == 0 {
			return fmt.Errorf("template %q: command is empty", name)
		}
		r, err := resolveCommand(t.Command[0])
		if err != nil {
			return fmt.Errorf("template %q: %w", name, err)
		}
		t.Command[0] = r
		if t.ArgumentPattern != "" {
			re, err := regexp.Compile("^(?:" + t.ArgumentPattern + ")$")
			if err != nil {
				return fmt.Errorf("template %q: argument_pattern: %w", name, err)
			}
			t.argRE = re
		}
		if t.MaxArguments == 0 {
			t.MaxArguments = 64
		}
		if err := checkEnvAllow(t.EnvAllow); err != nil {
			return fmt.Errorf("template %q: env_allow: %w", name, err)
		}
		if err := c.checkUser(t.RunAs); err != nil {
			return fmt.Errorf("template %q: run_as: %w", name, err)
		}
		if t.Timeout == 0 {
			t.Timeout = Duration(time.Hour)
		}
		if !slices.Contains(validModes, t.PreemptMode) {
			return fmt.Errorf("template %q: preempt_mode %q: want cancel, requeue, checkpoint or suspend", name, t.PreemptMode)
		}
		c.Templates[name] = t
	}
	for _, a := range c.Accounts {
		if a.Name == "" {
			return errors.New("accounts: an account has no name")
		}
		if a.Shares < 0 {
			return fmt.Errorf("account %q: negative shares", a.Name)
		}
		if min(a.Quota.CPUCores, a.Quota.MemoryGB, float64(a.Quota.GPUs), a.Guaranteed.CPUCores, a.Guaranteed.MemoryGB, float64(a.Guaranteed.GPUs)) < 0 {
			return fmt.Errorf("account %q: negative quota or guarantee", a.Name)
		}
		if err := c.checkUser(a.RunAs); err != nil {
			return fmt.Errorf("account %q: run_as: %w", a.Name, err)
		}
	}
	return nil
}

func resolveCommand(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	if strings.ContainsRune(p, '/') {
		return "", fmt.Errorf("command %q: use an absolute path or a bare name on PATH", p)
	}
	r, err := exec.LookPath(p)
	if err != nil {
		return "", fmt.Errorf("command %q: %w", p, err)
	}
	return r, nil
}

// allowed returns the allowlist entry argv0 names, and the path to run.
// A bare name is looked up on PATH; a path matches an entry naming the
// same file (after symbolic links, so /bin/echo and /usr/bin/echo are one
// program on a merged-/usr system).
func (c *Config) allowed(argv0 string) (AllowEntry, string, bool) {
	p := argv0
	if !filepath.IsAbs(p) {
		if strings.ContainsRune(p, '/') {
			return AllowEntry{}, "", false // relative paths never match
		}
		r, err := exec.LookPath(p)
		if err != nil {
			return AllowEntry{}, "", false
		}
		p = r
	}
	p = filepath.Clean(p)
	for _, a := range c.Allowlist {
		if a.Path == p {
			return a, p, true
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return AllowEntry{}, "", false
	}
	for _, a := range c.Allowlist {
		if ar, err := filepath.EvalSymlinks(a.Path); err == nil && ar == real {
			return a, a.Path, true
		}
	}
	return AllowEntry{}, "", false
}

// allowlistPaths lists the allowlisted programs, for error messages.
func (c *Config) allowlistPaths() []string {
	out := make([]string, len(c.Allowlist))
	for i, a := range c.Allowlist {
		out[i] = a.Path
	}
	return out
}

// The roles of an adapter in the pool.
const (
	RoleAgent     = "agent"
	RoleScheduler = "scheduler"
	RoleBoth      = "both"
)

func (c *Config) runsAgent() bool     { return c.Role == RoleAgent || c.Role == RoleBoth }
func (c *Config) runsScheduler() bool { return c.Role == RoleScheduler || c.Role == RoleBoth }

func (c *Config) fillPool() error {
	p := &c.Pool
	if p.LeaseTime == 0 {
		p.LeaseTime = Duration(10 * time.Second)
	}
	if p.LeaseTime.D() < 300*time.Millisecond {
		return fmt.Errorf("pool.lease_time %v: want at least 300ms", p.LeaseTime.D())
	}
	if p.Heartbeat == 0 {
		p.Heartbeat = Duration(2 * time.Second)
	}
	if p.NodeUnhealthy == 0 {
		p.NodeUnhealthy = Duration(3 * p.Heartbeat.D())
	}
	if p.CheckpointInterval == 0 {
		p.CheckpointInterval = Duration(60 * time.Second)
	}
	if p.CheckpointInterval.D() < time.Second {
		return fmt.Errorf("pool.checkpoint_interval %v: want at least 1s", p.CheckpointInterval.D())
	}
	if p.NodeUnhealthy.D() <= p.Heartbeat.D() {
		return fmt.Errorf("pool.node_unhealthy %v: want more than pool.heartbeat %v", p.NodeUnhealthy.D(), p.Heartbeat.D())
	}
	if err := c.Node.Validate(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	for i := range p.NodeClasses {
		if err := p.NodeClasses[i].Validate(); err != nil {
			return fmt.Errorf("pool.node_classes[%d]: %w", i, err)
		}
	}
	f := &p.FakeNodes
	if f.Prefix == "" {
		f.Prefix = "fake"
	}
	if err := fillFake(f); err != nil {
		return fmt.Errorf("pool.fake_nodes: %w", err)
	}
	return nil
}

// fillFake checks fake nodes' shape and fills its defaults (but the
// prefix's).
func fillFake(f *FakeNodesConfig) error {
	if f.Count < 0 {
		return fmt.Errorf("count %d: want 0 or more", f.Count)
	}
	if f.Node.CPUCores == 0 {
		f.Node.CPUCores = 8
	}
	if f.Node.MemoryGB == 0 {
		f.Node.MemoryGB = 32
	}
	f.Node.GPUDiscovery = inventory.DiscoverOff
	if err := f.Node.Validate(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if f.Duration == 0 {
		f.Duration = Duration(time.Second)
	}
	return nil
}

// storageTier is the tier of storage requests that name none.
func (c *Config) storageTier() string {
	if c.Node.StorageTier != "" {
		return c.Node.StorageTier
	}
	return "ssd"
}
