package local

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
)

// TestConformance runs the suite against the three ways of watching a
// task: through the work directory's supervisor server (as the adapter
// does), a supervisor process per task, and in-process.
func TestConformance(t *testing.T) {
	cmds := providertest.Commands{
		Print:        func(s string) []string { return helper(t, "print", s) },
		Exit:         func(code int) []string { return helper(t, "exit", strconv.Itoa(code)) },
		Sleep:        helper(t, "sleep"),
		PrintEnv:     func(name string) []string { return helper(t, "env", name) },
		PrintPayload: helper(t, "payload"),
		Env:          map[string]string{helperEnv: "1"},
	}
	t.Run("supervised", func(t *testing.T) {
		t.Parallel()
		providertest.Run(t, func(t *testing.T) providers.Provider {
			return newTestProvider(t, Config{})
		}, cmds)
	})
	t.Run("served", func(t *testing.T) {
		t.Parallel()
		providertest.Run(t, func(t *testing.T) providers.Provider {
			return newTestProvider(t, Config{SupervisorServer: true})
		}, cmds)
	})
	t.Run("in-process", func(t *testing.T) {
		t.Parallel()
		providertest.Run(t, func(t *testing.T) providers.Provider {
			return newDirectProvider(t, Config{})
		}, cmds)
	})
}

// newTestProvider returns a Provider on a fresh work dir, logging to the
// test, closed when the test ends, whose tasks run under supervisors (this
// test binary; see TestMain). Unset fields of cfg get test defaults.
func newTestProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.SupervisorPath == "" {
		cfg.SupervisorPath = testBinary(t)
	}
	return newProvider(t, cfg)
}

// newDirectProvider is newTestProvider without a supervisor: the provider
// watches its tasks in-process.
func newDirectProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	cfg.SupervisorPath = ""
	return newProvider(t, cfg)
}

func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.WorkDir == "" {
		cfg.WorkDir = workDir(t)
	}
	if os.Geteuid() == 0 && cfg.User == "" && !cfg.AllowRoot {
		cfg.User = testUser
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// testBinary is the absolute path of the test binary tasks and
// supervisors run (testExe, or this binary in a child process).
func testBinary(t testing.TB) string {
	t.Helper()
	if testExe != "" {
		return testExe
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}
