package kube

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/kubetest"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
)

// The tests run against a real control plane with kwok's fake nodes
// (internal/kubetest).
func TestMain(m *testing.M) { kubetest.Main(m) }

// cmds are the suite's programs, as kwok "runs" them (kubetest's Prog
// constants): kwok runs no containers, so nothing prints and the suite
// checks states and exit codes only (NoOutput).
var cmds = providertest.Commands{
	Print:        func(s string) []string { return []string{"/bin/echo", s} },
	Exit:         func(code int) []string { return []string{kubetest.ProgExit, strconv.Itoa(code)} },
	Sleep:        []string{kubetest.ProgSleep},
	PrintEnv:     func(name string) []string { return []string{"/usr/bin/printenv", name} },
	PrintPayload: []string{"/bin/cat", PayloadPath},
	NoOutput:     true,
}

// TestConformance runs the providertest suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, func(t *testing.T) providers.Provider { return newTestProvider(t, Config{AllowCommands: true}) }, cmds)
}

// TestAbilities runs the suites of the abilities the provider claims:
// Lister, and batch polls (every Poll reads the informers' caches, so
// polling many tasks costs the API nothing).
func TestAbilities(t *testing.T) {
	t.Parallel()
	providertest.RunLister(t, func(t *testing.T) providers.Provider { return newTestProvider(t, Config{AllowCommands: true}) }, cmds)
	var reads sync.Map // *Provider → *atomic.Int64
	providertest.RunBatchPoll(t, func(t *testing.T) providers.Provider {
		p, n := newCountingProvider(t, Config{AllowCommands: true})
		reads.Store(p, n)
		return p
	}, cmds, func(p providers.Provider) int {
		n, _ := reads.Load(p)
		return int(n.(*atomic.Int64).Load())
	})
}

// newTestProvider returns a provider on the package's cluster, in a
// namespace of its own, with a fresh WorkDir, its informers running and
// synced.
func newTestProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, _ := newCountingProvider(t, cfg)
	return p
}

// newCountingProvider is newTestProvider, and the count of its reads of
// Jobs and Pods (GET and LIST, not watches).
func newCountingProvider(t *testing.T, cfg Config) (*Provider, *atomic.Int64) {
	t.Helper()
	c := kubetest.Shared(t)
	if cfg.Namespace == "" {
		cfg.Namespace = c.Namespace(t)
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	calls := new(atomic.Int64)
	if cfg.REST == nil {
		cfg.REST = c.RESTConfig()
		cfg.REST.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return countReads{rt: rt, n: calls}
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runProvider(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTail())
		}
	})
	return p, calls
}

// runProvider runs p's informers until the test ends and waits until
// they have synced.
func runProvider(t *testing.T, p *Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-p.synced:
	case <-time.After(30 * time.Second):
		t.Fatal("informers not synced after 30s")
	}
}

// countReads counts GET and LIST requests for Jobs and Pods.
type countReads struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Query().Get("watch") != "true" &&
		(strings.Contains(r.URL.Path, "/jobs") || strings.Contains(r.URL.Path, "/pods")) {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}
