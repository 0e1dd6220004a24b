package adapter

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSupervisorPath: the supervisor key wins; else cb-supervisor next to
// the adapter; else the adapter itself, with a warning that says so.
func TestSupervisorPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	self := filepath.Join(dir, "adapter")
	next := filepath.Join(dir, "cb-supervisor")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	if got := supervisorPath("", self, log); got != self {
		t.Errorf("without cb-supervisor: %q, want the adapter itself", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "slower") {
		t.Errorf("the fallback is not logged as slower: %s", logs.String())
	}
	if err := os.WriteFile(next, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := supervisorPath("", self, log); got != next {
		t.Errorf("with cb-supervisor next to the adapter: %q, want %q", got, next)
	}
	if got := supervisorPath("/opt/cb/cb-supervisor", self, log); got != "/opt/cb/cb-supervisor" {
		t.Errorf("configured: %q, want the configured path", got)
	}
}
