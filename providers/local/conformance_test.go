package local

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providers.Provider {
		return newTestProvider(t, Config{})
	}, providertest.Commands{
		Print:        func(s string) []string { return helper(t, "print", s) },
		Exit:         func(code int) []string { return helper(t, "exit", strconv.Itoa(code)) },
		Sleep:        helper(t, "sleep"),
		PrintEnv:     func(name string) []string { return helper(t, "env", name) },
		PrintPayload: helper(t, "payload"),
		Env:          map[string]string{helperEnv: "1"},
	})
}

// newTestProvider returns a Provider on a fresh work dir, logging to the
// test, closed when the test ends. Unset fields of cfg get test defaults.
func newTestProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
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
