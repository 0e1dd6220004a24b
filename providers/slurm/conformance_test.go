package slurm

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/slurmtest"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
)

// The tests run against a real single-node Slurm (internal/slurmtest).
func TestMain(m *testing.M) { slurmtest.Main(m) }

// cmds are the suite's programs, run by the job on this machine.
var cmds = providertest.Commands{
	Print: func(s string) []string { return []string{"/usr/bin/printf", "%s", s} },
	Exit:  func(code int) []string { return []string{"/bin/sh", "-c", "exit " + strconv.Itoa(code)} },
	Sleep: []string{"/bin/sleep", "600"},
	PrintEnv: func(name string) []string {
		return []string{"/bin/sh", "-c", `printf %s "$(printenv "$1")"`, "sh", name}
	},
	PrintPayload: []string{"/bin/sh", "-c", `cat "$COMPUTEBOARD_PAYLOAD"`},
	Tick:         []string{"/bin/sh", "-c", "echo start; while :; do echo tick; sleep 0.05; done"},
	TrapUSR1:     []string{"/bin/sh", "-c", "trap 'echo usr1; exit 0' USR1; echo ready; while :; do sleep 0.1; done"},
	SlowTimeout:  true,
}

// TestConformance runs the providertest suite. Its Timeout case takes
// Slurm's own time: a limit is whole minutes, and slurmctld checks limits
// every 30 s, so the job ends TIMEOUT 60–95 s after it starts; it is
// skipped under -short.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			providertest.Run(t, func(t *testing.T) providers.Provider { return newTestProviderOver(t, tr, Config{}) }, cmds)
		})
	}
}

// TestAbilities runs the ability suites over each transport.
func TestAbilities(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			newP := func(t *testing.T) providers.Provider { return newTestProviderOver(t, tr, Config{}) }
			providertest.RunSuspender(t, newP, cmds)
			providertest.RunSignaler(t, newP, cmds)
			providertest.RunRequeuer(t, newP, cmds)
			providertest.RunLister(t, newP, cmds)
			providertest.RunBatchPoll(t, func(t *testing.T) providers.Provider {
				return newTestProviderOver(t, tr, Config{PollInterval: 2 * time.Second})
			}, cmds, func(p providers.Provider) int {
				return int(p.(*Provider).tr.(*countingTransport).jobs.Load())
			})
		})
	}
}

// transports are the ways to Slurm the suites run over: the commands,
// and slurmrestd with JWT (the cluster's, tokens from scontrol token).
var transports = []string{"cli", "rest"}

// newTestProvider returns a provider on the package's cluster over the
// CLI, with a fresh WorkDir, whose squeue calls are counted.
func newTestProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	return newProviderOn(t, slurmtest.Shared(t), cfg)
}

// newTestProviderOver is newTestProvider over transport tr ("cli" or
// "rest").
func newTestProviderOver(t *testing.T, tr string, cfg Config) *Provider {
	t.Helper()
	c := slurmtest.Shared(t)
	if tr == "rest" && cfg.Transport == nil {
		r, err := NewREST(RESTConfig{URL: c.RESTURL}, "", c.Conf, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Transport = &countingTransport{Transport: r}
	}
	return newProviderOn(t, c, cfg)
}

// newProviderOn is newTestProvider on cluster c.
func newProviderOn(t *testing.T, c *slurmtest.Cluster, cfg Config) *Provider {
	t.Helper()
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	cfg.SlurmConf = c.Conf
	if cfg.Partition == "" {
		cfg.Partition = c.Partition
	}
	cfg.AllowRoot = true
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.Transport == nil {
		cfg.Transport = &countingTransport{Transport: &CLI{Run: Exec("", c.Conf, time.Minute)}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // the jobs' stderr and the daemons' logs say why
			errs, _ := filepath.Glob(filepath.Join(cfg.WorkDir, "*", fileStderr))
			for _, f := range errs {
				b, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", f, b)
			}
			t.Log(c.LogTail())
		}
	})
	return p
}

// countingTransport counts squeue calls.
type countingTransport struct {
	Transport
	jobs atomic.Int64
}

func (c *countingTransport) Jobs(ctx context.Context) ([]Job, error) {
	c.jobs.Add(1)
	return c.Transport.Jobs(ctx)
}
