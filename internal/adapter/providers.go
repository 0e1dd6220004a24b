package adapter

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/computeboard/computeboard/agent"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/providers/kube"
	"github.com/computeboard/computeboard/providers/local"
	"github.com/computeboard/computeboard/providers/slurm"
	"github.com/computeboard/computeboard/wire"
)

// This file builds the providers this adapter's agent serves nodes
// through, from config's providers section: one map of providers by
// name, and the nodes each gives the agent. Without a providers section
// the config stands for one provider, as it always has: "local" (this
// machine's node) or, with pool.fake_nodes, "fake".

// Provider kinds.
const (
	KindLocal = "local" // this machine: one node, the node section
	KindSlurm = "slurm" // a Slurm partition: its nodes (sinfo)
	KindFake  = "fake"  // virtual nodes where nothing runs
	KindKube  = "kube"  // a Kubernetes cluster: its schedulable nodes
)

// ProviderConfig is one entry of providers: a named source of nodes and
// the provider that runs their jobs.
type ProviderConfig struct {
	// Name names the provider: every node it gives carries the label
	// provider=<name>, its registry record says so, and a request's
	// provider field names it. Unique; a name as a request may write it.
	Name string `yaml:"name"`
	// Kind is local (at most one: this machine, shaped by the node
	// section), slurm, kube or fake.
	Kind string `yaml:"kind"`
	// Slurm configures a slurm provider.
	Slurm *SlurmProviderConfig `yaml:"slurm"`
	// Fake shapes a fake provider's nodes (as pool.fake_nodes; count
	// default 1, prefix default the provider's name).
	Fake *FakeNodesConfig `yaml:"fake"`
	// Kube configures a kube provider.
	Kube *KubeProviderConfig `yaml:"kube"`
	// Cost is the provider's price list per resource-hour, the same unit
	// for every provider: the placement "cheapest" places a job where its
	// request costs least, and cost-based preemption weighs the work an
	// eviction loses by it. Unset: free. Set it on every provider or none.
	Cost CostConfig `yaml:"cost"`
}

// SlurmProviderConfig is a slurm provider's settings (slurm.Config).
type SlurmProviderConfig struct {
	// Partition jobs are submitted to and whose nodes the pool gets
	// (default: the cluster's default partition, and every node).
	Partition string `yaml:"partition"`
	// SlurmConf is the SLURM_CONF the commands run with (default: none,
	// so /etc/slurm/slurm.conf).
	SlurmConf string `yaml:"slurm_conf"`
	// BinDir holds sbatch, squeue, sinfo, scancel, scontrol (default: PATH).
	BinDir string `yaml:"bin_dir"`
	// WorkDir holds the task directories, on a file system every node of
	// the partition shares (default: slurm-<name> next to work_dir).
	WorkDir string `yaml:"work_dir"`
	// PollInterval is how long one squeue answers every poll (default 1s).
	PollInterval Duration `yaml:"poll_interval"`
	// RefreshInterval is how often the partition's nodes are read again
	// while the adapter runs (default 60s): nodes added are served, a
	// node drained or down in Slurm goes out of scheduling, back when
	// resumed.
	RefreshInterval Duration `yaml:"refresh_interval"`
	// Transport is how Slurm is reached: cli (default: the commands, with
	// JSON output) or rest (slurmrestd with JWT: the rest section; suspend,
	// resume and requeue still run scontrol, which v0.0.38 lacks).
	Transport string `yaml:"transport"`
	// REST configures the rest transport.
	REST *SlurmRESTConfig `yaml:"rest"`
}

// Slurm transports.
const (
	SlurmCLI  = "cli"
	SlurmREST = "rest"
)

// SlurmRESTConfig is the rest transport's settings (slurm.RESTConfig).
type SlurmRESTConfig struct {
	// URL is slurmrestd's ("http://127.0.0.1:6820"). Required.
	URL string `yaml:"url"`
	// User is whom the token is for and whom jobs run as when a task
	// names none (default: the adapter's user).
	User string `yaml:"user"`
	// TokenFile holds the user's JWT (SLURM_JWT=… or bare), read again as
	// it nears its expiry; TokenCommand prints one ({user} in its
	// arguments is the user), run again before it expires. Neither: the
	// adapter runs scontrol token username={user} lifespan=token_lifespan.
	TokenFile    string   `yaml:"token_file"`
	TokenCommand []string `yaml:"token_command"`
	// TokenLifespan is the default command's token lifespan (default 1h).
	TokenLifespan Duration `yaml:"token_lifespan"`
}

// KubeProviderConfig is a kube provider's settings (kubeconfig,
// namespace, image, priority classes, tolerations, ...; kube.FileConfig).
type KubeProviderConfig = kube.FileConfig

// CostConfig is a price list per resource-hour.
type CostConfig struct {
	CPUCoreHour   float64 `yaml:"cpu_core_hour"`
	MemoryGiBHour float64 `yaml:"memory_gib_hour"`
	GPUHour       float64 `yaml:"gpu_hour"`
}

func (c CostConfig) price() inventory.Price {
	return inventory.Price{CoreHour: c.CPUCoreHour, GiBHour: c.MemoryGiBHour, GPUHour: c.GPUHour}
}

var providerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// fillProviders checks the providers section and fills its defaults.
// Without one, nothing changes: the node section or pool.fake_nodes
// describe this adapter's nodes (see providerList).
func (c *Config) fillProviders() error {
	if len(c.Providers) > 0 && c.Pool.FakeNodes.Count > 0 {
		return fmt.Errorf("pool.fake_nodes (or --fake-nodes) and providers: list fake nodes as a provider of kind fake instead")
	}
	seen := map[string]bool{}
	locals := 0
	fakeNames := map[string]string{} // fake node name → provider
	for i := range c.Providers {
		pc := &c.Providers[i]
		at := fmt.Sprintf("providers[%d]", i)
		if pc.Name != "" {
			at = fmt.Sprintf("providers[%d] (%s)", i, pc.Name)
		}
		switch {
		case pc.Name == "":
			return fmt.Errorf("%s: name is required", at)
		case len(pc.Name) > wire.MaxIdentLen || !providerNameRE.MatchString(pc.Name):
			return fmt.Errorf("%s: name must match %s (at most %d characters)", at, providerNameRE, wire.MaxIdentLen)
		case seen[pc.Name]:
			return fmt.Errorf("%s: the name is used twice", at)
		}
		seen[pc.Name] = true
		if pc.Cost.CPUCoreHour < 0 || pc.Cost.MemoryGiBHour < 0 || pc.Cost.GPUHour < 0 {
			return fmt.Errorf("%s: cost: prices must not be negative", at)
		}
		if pc.Slurm != nil && pc.Kind != KindSlurm {
			return fmt.Errorf("%s: a slurm section on a provider of kind %q", at, pc.Kind)
		}
		if pc.Fake != nil && pc.Kind != KindFake {
			return fmt.Errorf("%s: a fake section on a provider of kind %q", at, pc.Kind)
		}
		if pc.Kube != nil && pc.Kind != KindKube {
			return fmt.Errorf("%s: a kube section on a provider of kind %q", at, pc.Kind)
		}
		switch pc.Kind {
		case KindLocal:
			if locals++; locals > 1 {
				return fmt.Errorf("%s: a second provider of kind local (this machine is one node, under one provider)", at)
			}
		case KindSlurm:
			if pc.Slurm == nil {
				pc.Slurm = &SlurmProviderConfig{}
			}
			s := pc.Slurm
			if s.WorkDir == "" {
				s.WorkDir = filepath.Join(filepath.Dir(c.WorkDir), "slurm-"+pc.Name)
			} else if !filepath.IsAbs(s.WorkDir) {
				s.WorkDir = filepath.Join(c.dir, s.WorkDir)
			}
			if s.PollInterval < 0 || s.RefreshInterval < 0 {
				return fmt.Errorf("%s: slurm.poll_interval and slurm.refresh_interval must not be negative", at)
			}
			switch s.Transport {
			case "", SlurmCLI:
				s.Transport = SlurmCLI
				if s.REST != nil {
					return fmt.Errorf("%s: a slurm.rest section with transport cli (set slurm.transport: rest)", at)
				}
			case SlurmREST:
				if s.REST == nil || s.REST.URL == "" {
					return fmt.Errorf("%s: slurm.transport rest needs slurm.rest.url (slurmrestd's)", at)
				}
				if s.REST.TokenFile != "" && len(s.REST.TokenCommand) > 0 {
					return fmt.Errorf("%s: slurm.rest: token_file or token_command, not both", at)
				}
				if s.REST.TokenFile != "" && !filepath.IsAbs(s.REST.TokenFile) {
					s.REST.TokenFile = filepath.Join(c.dir, s.REST.TokenFile)
				}
			default:
				return fmt.Errorf("%s: slurm.transport %q: want cli or rest", at, s.Transport)
			}
			for name, p := range map[string]string{"slurm_conf": s.SlurmConf, "bin_dir": s.BinDir} {
				if p != "" && !filepath.IsAbs(p) {
					return fmt.Errorf("%s: slurm.%s %q: want an absolute path", at, name, p)
				}
			}
		case KindFake:
			if pc.Fake == nil {
				pc.Fake = &FakeNodesConfig{}
			}
			f := pc.Fake
			if f.Count == 0 {
				f.Count = 1
			}
			if f.Prefix == "" {
				f.Prefix = pc.Name
			}
			if err := fillFake(f); err != nil {
				return fmt.Errorf("%s: fake: %w", at, err)
			}
			for n := range f.Count {
				name := fakeNodeName(f.Prefix, n)
				if other, dup := fakeNames[name]; dup {
					return fmt.Errorf("%s: node %s is under provider %s too (fake.prefix)", at, name, other)
				}
				fakeNames[name] = pc.Name
			}
		case KindKube:
			if pc.Kube == nil {
				pc.Kube = &KubeProviderConfig{}
			}
			if err := pc.Kube.Check(c.dir, filepath.Join(filepath.Dir(c.WorkDir), "kube-"+pc.Name)); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		default:
			return fmt.Errorf("%s: kind %q: want local, slurm, kube or fake", at, pc.Kind)
		}
	}
	return nil
}

func fakeNodeName(prefix string, i int) string { return fmt.Sprintf("%s-%04d", prefix, i+1) }

// providerList is the providers section, or what a config without one
// stands for: its fake nodes (provider "fake"), else this machine
// (provider "local").
func (c *Config) providerList() []ProviderConfig {
	switch {
	case len(c.Providers) > 0:
		return c.Providers
	case c.Pool.FakeNodes.Count > 0:
		f := c.Pool.FakeNodes
		return []ProviderConfig{{Name: KindFake, Kind: KindFake, Fake: &f}}
	}
	return []ProviderConfig{{Name: KindLocal, Kind: KindLocal}}
}

// providerDeps is what building providers needs from the adapter.
type providerDeps struct {
	clk clock.Clock
	log *slog.Logger
	// goRun runs a background loop for as long as the agent (the local
	// provider's pruning of task directories).
	goRun func(func(context.Context) error)
}

// buildProviders builds the registry of providers by name and the nodes
// each gives this adapter's agent: each node labelled provider=<name>,
// priced by the provider's cost, its record naming the provider. A node
// name given twice (by two providers, or twice by one) is an error.
func (c *Config) buildProviders(ctx context.Context, d providerDeps) (map[string]providers.Provider, []agent.Node, error) {
	reg := map[string]providers.Provider{}
	var nodes []agent.Node
	owner := map[string]string{} // node name → provider
	for _, pc := range c.providerList() {
		prov, recs, err := c.buildProvider(ctx, pc, d)
		if err != nil {
			return nil, nil, fmt.Errorf("provider %s: %w", pc.Name, err)
		}
		reg[pc.Name] = prov
		for _, rec := range recs {
			if other, dup := owner[rec.Name]; dup {
				return nil, nil, fmt.Errorf("provider %s: node %s is under provider %s too", pc.Name, rec.Name, other)
			}
			owner[rec.Name] = pc.Name
			rec.Provider = pc.Name
			if rec.Labels == nil {
				rec.Labels = map[string]string{}
			}
			rec.Labels[wire.ProviderLabel] = pc.Name
			rec.Price = pc.Cost.price()
			nodes = append(nodes, agent.Node{Record: rec, Provider: prov})
		}
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("providers: no nodes (a slurm partition with no usable node?)")
	}
	return reg, nodes, nil
}

// buildProvider builds one provider and the records of its nodes.
func (c *Config) buildProvider(ctx context.Context, pc ProviderConfig, d providerDeps) (providers.Provider, []pool.NodeRecord, error) {
	switch pc.Kind {
	case KindFake:
		// FAKE nodes: nothing runs (see providers/fake).
		fn := pc.Fake
		prov := fake.New(pc.Name, d.clk, fn.Duration.D())
		var recs []pool.NodeRecord
		for i := range fn.Count {
			shape := fn.Node
			shape.Name = fakeNodeName(fn.Prefix, i)
			shape.Labels = maps.Clone(fn.Node.Labels)
			n, err := inventory.Build(inventory.Node{}, shape)
			if err != nil {
				return nil, nil, err
			}
			recs = append(recs, pool.NodeRecord{Node: n, Fake: true})
		}
		return prov, recs, nil
	case KindSlurm:
		s := pc.Slurm
		var rest *slurm.RESTConfig
		if s.Transport == SlurmREST {
			rest = &slurm.RESTConfig{URL: s.REST.URL, User: s.REST.User, TokenFile: s.REST.TokenFile,
				TokenCommand: s.REST.TokenCommand, TokenLifespan: s.REST.TokenLifespan.D()}
		}
		prov, err := slurm.New(slurm.Config{Name: pc.Name, Partition: s.Partition, BinDir: s.BinDir, SlurmConf: s.SlurmConf,
			WorkDir: s.WorkDir, Env: baseEnv(), User: c.RunAs, AllowRoot: c.AllowRoot, PollInterval: s.PollInterval.D(),
			REST: rest, Logger: d.log.With("component", "slurm")})
		if err != nil {
			return nil, nil, err
		}
		inv, err := prov.Nodes(ctx)
		if err != nil {
			return nil, nil, err
		}
		recs := make([]pool.NodeRecord, len(inv))
		for i, n := range inv {
			recs[i] = pool.NodeRecord{Node: n}
		}
		return prov, recs, nil
	case KindKube:
		// Each task a Job; the provider's informers run as long as the agent.
		kc, err := pc.Kube.Config(pc.Name)
		if err != nil {
			return nil, nil, err
		}
		kc.Env, kc.AllowRoot, kc.KeepDirs, kc.Logger = baseEnv(), c.AllowRoot, c.Retention.D(), d.log.With("component", "kube")
		kc.Labels = map[string]string{kube.LabelPrefix + "board": c.Board}
		if len(validation.IsValidLabelValue(c.Board)) > 0 {
			kc.Labels = nil // the board's name is no label value
		}
		prov, err := kube.New(kc)
		if err != nil {
			return nil, nil, err
		}
		inv, err := prov.Nodes(ctx)
		if err != nil {
			return nil, nil, err
		}
		d.goRun(prov.Run)
		recs := make([]pool.NodeRecord, len(inv))
		for i, n := range inv {
			recs[i] = pool.NodeRecord{Node: n}
		}
		return prov, recs, nil
	default: // KindLocal
		n, err := inventory.Local(ctx, c.Node, inventory.Options{Logger: d.log.With("component", "inventory")})
		if err != nil {
			return nil, nil, err
		}
		// Each local task runs under a supervisor that records its outcome
		// even if the adapter dies meanwhile.
		self, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("find own executable for the task supervisor: %w", err)
		}
		exe := supervisorPath(c.Supervisor, self, d.log)
		// Jobs run as c.RunAs (a task's template, allowlist entry or
		// account may name another user); as root the default is "nobody".
		prov, err := local.New(local.Config{Name: pc.Name, WorkDir: c.WorkDir, Logger: d.log, Clock: d.clk, Env: baseEnv(), SupervisorPath: exe,
			SupervisorServer: !c.SupervisorPerTask, User: c.RunAs, AllowRoot: c.AllowRoot, MaxOutputBytes: int64(c.MaxOutputMB) << 20})
		if err != nil {
			return nil, nil, err
		}
		d.goRun(func(ctx context.Context) error {
			return pruneTaskDirs(ctx, prov, d.clk, c.Retention.D(), d.log.With("component", "retention"))
		})
		return prov, []pool.NodeRecord{{Node: n, Confined: prov.Confinement().Names()}}, nil
	}
}

// nodeInventories are the agent's inventories to read again while it
// runs: each slurm provider's partition (PartitionNodes) and each kube
// provider's cluster (ClusterNodes: cordoned, not Ready or untolerated
// tainted nodes out), their nodes labelled and priced as buildProviders
// does, those the backend cannot use now unhealthy with its reason.
func (c *Config) nodeInventories(reg map[string]providers.Provider) map[string]agent.Inventory {
	invs := map[string]agent.Inventory{}
	for _, pc := range c.providerList() {
		switch prov := reg[pc.Name].(type) {
		case *slurm.Provider:
			if pc.Kind == KindSlurm {
				invs[pc.Name] = offeredInventory(pc, prov, pc.Slurm.RefreshInterval.D(), prov.PartitionNodes)
			}
		case *kube.Provider:
			if pc.Kind == KindKube {
				invs[pc.Name] = offeredInventory(pc, prov, pc.Kube.RefreshInterval, prov.ClusterNodes)
			}
		}
	}
	return invs
}

// offeredInventory is the agent's inventory of provider pc (prov), read
// every every from list.
func offeredInventory(pc ProviderConfig, prov providers.Provider, every time.Duration, list func(context.Context) ([]inventory.Offered, error)) agent.Inventory {
	return agent.Inventory{Every: every, List: func(ctx context.Context) ([]agent.Node, error) {
		all, err := list(ctx)
		if err != nil {
			return nil, err
		}
		nodes := make([]agent.Node, len(all))
		for i, n := range all {
			rec := pool.NodeRecord{Node: n.Node, Provider: pc.Name, Unhealthy: n.Out}
			rec.Labels[wire.ProviderLabel] = pc.Name
			rec.Price = pc.Cost.price()
			nodes[i] = agent.Node{Record: rec, Provider: prov}
		}
		return nodes, nil
	}}
}

// agentID names this adapter's agent (its consumer name on the node
// streams, stable across restarts): as before for a config without
// providers (the local node's name, or fake-<prefix>); else the local
// node's name when it has one, else the node section's name or the host's.
func (c *Config) agentID(nodes []agent.Node) string {
	if len(c.Providers) == 0 {
		if c.Pool.FakeNodes.Count > 0 {
			return "fake-" + c.Pool.FakeNodes.Prefix
		}
		return nodes[0].Record.Name // this machine's node
	}
	for _, pc := range c.Providers {
		if pc.Kind != KindLocal {
			continue
		}
		if i := slices.IndexFunc(nodes, func(n agent.Node) bool { return n.Record.Provider == pc.Name }); i >= 0 {
			return nodes[i].Record.Name
		}
	}
	if c.Node.Name != "" {
		return c.Node.Name
	}
	h, _ := os.Hostname()
	return h
}

// errgroupRun adapts an errgroup to providerDeps.goRun.
func errgroupRun(ctx context.Context, g *errgroup.Group) func(func(context.Context) error) {
	return func(f func(context.Context) error) { g.Go(func() error { return f(ctx) }) }
}
