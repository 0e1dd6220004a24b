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
	// Consumer names this adapter in the broker's consumer group (default
	// hostname-pid).
	Consumer string `yaml:"consumer"`

	// Templates are operator-approved commands, by name.
	Templates map[string]Template `yaml:"templates"`
	// Allowlist holds the absolute paths a request's `command` may name as
	// argv[0]. Empty means raw commands are refused.
	Allowlist []string `yaml:"allowlist"`

	Node      NodeConfig      `yaml:"node"`
	Scheduler SchedulerConfig `yaml:"scheduler"`
	Telemetry TelemetryConfig `yaml:"telemetry"`
	Broker    BrokerConfig    `yaml:"broker"`
	// Accounts sets fair-share shares (default: one account per module,
	// share 1).
	Accounts []AccountConfig `yaml:"accounts"`

	dir string // directory of the config file, for relative paths
}

// Template is an operator-approved command.
type Template struct {
	Description string `yaml:"description"`
	// Command is argv; argv[0] must be an absolute path or resolvable on
	// PATH at load time.
	Command []string `yaml:"command"`
	// AllowArguments lets a request append arguments; ArgumentPattern, if
	// set, must match every argument in full.
	AllowArguments  bool   `yaml:"allow_arguments"`
	ArgumentPattern string `yaml:"argument_pattern"`
	MaxArguments    int    `yaml:"max_arguments"`
	// Env is fixed environment; EnvAllow lists the variables a request may
	// set.
	Env      map[string]string `yaml:"env"`
	EnvAllow []string          `yaml:"env_allow"`
	// Timeout caps the run time (default 1h; a request may ask for less).
	Timeout Duration `yaml:"timeout"`

	argRE *regexp.Regexp
}

// NodeConfig sizes the local node. Zero values are discovered.
type NodeConfig struct {
	// Name is the node's name (default: the hostname). Two adapters on one
	// machine need distinct names.
	Name     string            `yaml:"name"`
	CPUCores float64           `yaml:"cpu_cores"`
	MemoryGB float64           `yaml:"memory_gb"`
	Labels   map[string]string `yaml:"labels"`
	// StorageGB of scratch space offered to jobs, on StorageTier (default
	// 0: requests for storage are impossible here; tier default "ssd").
	StorageGB   float64 `yaml:"storage_gb"`
	StorageTier string  `yaml:"storage_tier"`
	// NetworkMbps offered to jobs (default 0: bandwidth requests are
	// impossible here).
	NetworkMbps float64 `yaml:"network_mbps"`
}

func (n NodeConfig) storageTier() string {
	if n.StorageTier == "" {
		return "ssd"
	}
	return n.StorageTier
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
	// most-allocated (default best-fit).
	Placement string `yaml:"placement"`
	// MaxPending bounds the accepted jobs waiting in the engine (default
	// 10000). Beyond it the adapter stops taking requests from the inbox,
	// the inbox fills, and the broker stops reading Redis: backpressure
	// all the way to the intake lanes, where requests wait safely.
	MaxPending int `yaml:"max_pending"`
	// NodeTimeout is how long another adapter's node may be silent (no
	// heartbeat) before its running jobs are ended as lost (default 5m).
	// Its queued jobs are adopted after 30 s of silence (or NodeTimeout if
	// shorter). Heartbeats go out every 5 s (or NodeTimeout/3).
	NodeTimeout Duration `yaml:"node_timeout"`
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
	cfg.dir = dir
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
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(c.dir, ".run", "jobs")
	} else if !filepath.IsAbs(c.WorkDir) {
		c.WorkDir = filepath.Join(c.dir, c.WorkDir)
	}
	if c.Consumer == "" {
		h, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d", h, os.Getpid())
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
	case "", "best-fit", "first-fit", "worst-fit", "balanced", "most-allocated":
	default:
		return fmt.Errorf("scheduler.placement %q: want best-fit, first-fit, worst-fit, balanced or most-allocated", c.Scheduler.Placement)
	}
	if c.Scheduler.NodeTimeout == 0 {
		c.Scheduler.NodeTimeout = Duration(5 * time.Minute)
	}
	if c.Scheduler.MaxPending == 0 {
		c.Scheduler.MaxPending = 10000
	}
	if c.Scheduler.Seed == 0 {
		c.Scheduler.Seed = 1
	}
	if c.Telemetry.Interval == 0 {
		c.Telemetry.Interval = Duration(10 * time.Second)
	}
	for i, p := range c.Allowlist {
		r, err := resolveCommand(p)
		if err != nil {
			return fmt.Errorf("allowlist[%d]: %w", i, err)
		}
		c.Allowlist[i] = r
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
		if t.Timeout == 0 {
			t.Timeout = Duration(time.Hour)
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

// allowed reports whether argv0 is on the allowlist.
func (c *Config) allowed(argv0 string) bool {
	if !filepath.IsAbs(argv0) {
		if r, err := exec.LookPath(argv0); err == nil {
			argv0 = r
		}
	}
	return slices.Contains(c.Allowlist, filepath.Clean(argv0))
}
