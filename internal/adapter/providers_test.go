package adapter

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/wire"
)

func TestProvidersConfig(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`
work_dir: /srv/cb/jobs
providers:
  - name: here
    kind: local
    cost: {cpu_core_hour: 0.05, memory_gib_hour: 0.01, gpu_hour: 2.5}
  - name: hpc
    kind: slurm
    slurm: {partition: debug, slurm_conf: /etc/slurm/slurm.conf, bin_dir: /usr/bin, poll_interval: 2s}
    cost: {cpu_core_hour: 0.02}
  - name: sim
    kind: fake
    fake: {count: 2, node: {cpu_cores: 4}}
  - name: rest
    kind: slurm
    slurm:
      transport: rest
      refresh_interval: 30s
      rest: {url: "http://127.0.0.1:6820", user: cb, token_file: jwt, token_lifespan: 10m}
`), "/srv/cb", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []ProviderConfig{
		{Name: "here", Kind: KindLocal, Cost: CostConfig{CPUCoreHour: 0.05, MemoryGiBHour: 0.01, GPUHour: 2.5}},
		{Name: "hpc", Kind: KindSlurm, Cost: CostConfig{CPUCoreHour: 0.02}, Slurm: &SlurmProviderConfig{Partition: "debug",
			SlurmConf: "/etc/slurm/slurm.conf", BinDir: "/usr/bin", WorkDir: "/srv/cb/slurm-hpc", PollInterval: Duration(2e9), Transport: SlurmCLI}},
	}
	if diff := cmp.Diff(want, cfg.Providers[:2]); diff != "" {
		t.Errorf("providers (-want +got):\n%s", diff)
	}
	if f := cfg.Providers[2].Fake; f == nil || f.Count != 2 || f.Prefix != "sim" || f.Node.CPUCores != 4 || f.Node.MemoryGB != 32 {
		t.Errorf("fake provider's defaults not filled: %+v", f)
	}
	wantREST := &SlurmProviderConfig{WorkDir: "/srv/cb/slurm-rest", Transport: SlurmREST, RefreshInterval: Duration(30e9),
		REST: &SlurmRESTConfig{URL: "http://127.0.0.1:6820", User: "cb", TokenFile: "/srv/cb/jwt", TokenLifespan: Duration(600e9)}}
	if diff := cmp.Diff(wantREST, cfg.Providers[3].Slurm); diff != "" {
		t.Errorf("slurm over rest (-want +got):\n%s", diff)
	}

	// No providers section: the config stands for one provider, as before.
	for body, want := range map[string]string{"": KindLocal, "pool: {fake_nodes: {count: 3}}": KindFake} {
		cfg, err := ParseConfig([]byte(body), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if l := cfg.providerList(); len(cfg.Providers) != 0 || len(l) != 1 || l[0].Name != want || l[0].Kind != want {
			t.Errorf("%q: providers %+v, stands for %+v; want one %s provider", body, cfg.Providers, l, want)
		}
	}
}

func TestProvidersConfigRejects(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ body, want string }{
		"unknown kind":        {"providers:\n  - {name: n, kind: nomad}\n", "kind \"nomad\""},
		"no kind":             {"providers:\n  - {name: x}\n", "kind \"\""},
		"no name":             {"providers:\n  - {kind: local}\n", "name is required"},
		"bad name":            {"providers:\n  - {name: 'a b', kind: local}\n", "name must match"},
		"duplicate names":     {"providers:\n  - {name: a, kind: local}\n  - {name: a, kind: fake}\n", "used twice"},
		"negative cpu cost":   {"providers:\n  - {name: a, kind: local, cost: {cpu_core_hour: -1}}\n", "negative"},
		"negative gpu cost":   {"providers:\n  - {name: a, kind: fake, cost: {gpu_hour: -0.5}}\n", "negative"},
		"two local":           {"providers:\n  - {name: a, kind: local}\n  - {name: b, kind: local}\n", "second provider of kind local"},
		"node under two":      {"providers:\n  - {name: a, kind: fake, fake: {prefix: n}}\n  - {name: b, kind: fake, fake: {prefix: n}}\n", "node n-0001 is under provider a"},
		"slurm on local":      {"providers:\n  - {name: a, kind: local, slurm: {partition: x}}\n", "slurm section"},
		"fake on slurm":       {"providers:\n  - {name: a, kind: slurm, fake: {count: 1}}\n", "fake section"},
		"relative conf":       {"providers:\n  - {name: a, kind: slurm, slurm: {slurm_conf: slurm.conf}}\n", "absolute"},
		"unknown slurm key":   {"providers:\n  - {name: a, kind: slurm, slurm: {queue: x}}\n", "queue"},
		"rest without url":    {"providers:\n  - {name: a, kind: slurm, slurm: {transport: rest}}\n", "rest.url"},
		"rest section on cli": {"providers:\n  - {name: a, kind: slurm, slurm: {rest: {url: 'http://x:1'}}}\n", "transport cli"},
		"unknown transport":   {"providers:\n  - {name: a, kind: slurm, slurm: {transport: grpc}}\n", "want cli or rest"},
		"token file and cmd":  {"providers:\n  - {name: a, kind: slurm, slurm: {transport: rest, rest: {url: 'http://x:1', token_file: /t, token_command: [x]}}}\n", "not both"},
		"fake nodes as well":  {"pool: {fake_nodes: {count: 2}}\nproviders:\n  - {name: a, kind: local}\n", "kind fake instead"},
		"cheapest typo":       {"scheduler: {placement: cheap}\n", "placement"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.body), t.TempDir(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config:\n%s\nerr %v; want one saying %q", tc.body, err, tc.want)
			}
		})
	}
}

// TestBuildProviders builds the registry of a config with two fake
// providers: every node labelled and priced by its provider, its record
// naming it.
func TestBuildProviders(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`
scheduler: {placement: cheapest}
providers:
  - {name: cheap, kind: fake, fake: {count: 2}, cost: {cpu_core_hour: 0.01}}
  - {name: dear, kind: fake, fake: {count: 1, node: {labels: {zone: b}}}, cost: {cpu_core_hour: 0.1, gpu_hour: 3}}
`), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, nodes, err := cfg.buildProviders(context.Background(), providerDeps{clk: clock.Real{}, log: slog.New(slog.DiscardHandler),
		goRun: func(func(context.Context) error) { t.Fatal("a fake provider runs nothing in the background") }})
	if err != nil {
		t.Fatal(err)
	}
	if len(reg) != 2 || reg["cheap"] == nil || reg["dear"] == nil || reg["cheap"] == reg["dear"] {
		t.Fatalf("registry %v: want the providers cheap and dear", reg)
	}
	type view struct {
		Name, Provider string
		Labels         map[string]string
		Price          inventory.Price
		Same           bool // the node's provider is the registry's
	}
	var got []view
	for _, n := range nodes {
		got = append(got, view{n.Record.Name, n.Record.Provider, n.Record.Labels, n.Record.Price, n.Provider == reg[n.Record.Provider]})
	}
	want := []view{
		{"cheap-0001", "cheap", map[string]string{wire.ProviderLabel: "cheap"}, inventory.Price{CoreHour: 0.01}, true},
		{"cheap-0002", "cheap", map[string]string{wire.ProviderLabel: "cheap"}, inventory.Price{CoreHour: 0.01}, true},
		{"dear-0001", "dear", map[string]string{wire.ProviderLabel: "dear", "zone": "b"}, inventory.Price{CoreHour: 0.1, GPUHour: 3}, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if id := cfg.agentID(nodes); id == "" {
		t.Error("no agent ID")
	}
	// The engine sees each node's price, and a Cost for cost-based
	// preemption: its capacity's price per billing unit of it, 8 cores ×
	// 0.1 over 8 + 0.25 × 32 GiB = 0.05.
	if en := nodes[2].Record.Engine(); en.Price.CoreHour != 0.1 || en.Price.GPUHour != 3 || en.Cost < 0.0499 || en.Cost > 0.0501 {
		t.Errorf("engine node: price %+v, cost %v", en.Price, en.Cost)
	}
}

// TestBuildProvidersNodeUnderTwo: a node name two providers give (here
// this machine's, named like a fake node) is refused when the registry is
// built, since a node belongs to one provider.
func TestBuildProvidersNodeUnderTwo(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`
node: {name: sim-0001, cpu_cores: 1, memory_gb: 1, gpu_discovery: off}
providers:
  - {name: here, kind: local}
  - {name: sim, kind: fake}
`), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cfg.buildProviders(t.Context(), providerDeps{clk: clock.Real{}, log: slog.New(slog.DiscardHandler),
		goRun: func(func(context.Context) error) {}})
	if err == nil || !strings.Contains(err.Error(), "node sim-0001 is under provider here too") {
		t.Fatalf("err %v; want the node refused under a second provider", err)
	}
}
