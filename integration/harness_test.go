package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/adapter"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

func TestMain(m *testing.M) {
	// In-process adapters re-execute this test binary as their tasks'
	// supervisor (there is no cb-supervisor next to it), as the real
	// binary does without one.
	if code, ok := supervise.Dispatch(os.Args[1:]); ok {
		os.Exit(code)
	}
	redistest.Main(m)
}

// repoRoot is the repository root (the parent of this package).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// python is Debian's interpreter, where apt's python3-redis lives.
func python(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			if exec.Command(path, "-c", "import redis").Run() == nil {
				return path
			}
		}
	}
	t.Fatal("python3 with redis-py not found: install it with `sudo apt-get install -y python3-redis` (or run `make test`)")
	return ""
}

// syncBuffer is a goroutine-safe output sink for an in-process adapter.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// jobDir is a temporary directory that jobs can use: run as root, the
// adapter runs jobs as "nobody", who must reach the work directory below
// it and write the files the test templates append to. The test's
// temporary root (mode 0700) becomes 0711: traversable, not listable.
func jobDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeConfig writes a test adapter config and returns its path.
func writeConfig(t testing.TB, body string) string {
	t.Helper()
	dir := jobDir(t)
	p := filepath.Join(dir, "adapter.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testConfig is a config with harmless templates for the tests.
func testConfig(board string, extra string) string {
	return fmt.Sprintf(`board: %s
listen: off
work_dir: jobs
templates:
  hello:
    command: [/bin/sh, -c, 'echo "hello from $COMPUTEBOARD_JOB_ID"']
  echo:
    command: [printf, --, '%%s\n']
    allow_arguments: true
    argument_pattern: '[A-Za-z0-9 _.,:=+-]{0,200}'
  sleep:
    command: [sleep]
    end_of_options: true
    allow_arguments: true
    argument_pattern: '[0-9]{1,4}(\.[0-9]{1,3})?'
    max_arguments: 1
  fail:
    command: [/bin/sh, -c, 'echo "about to fail" >&2; exit 3']
allowlist: [/bin/true, /bin/echo]
scheduler:
  interval: 50ms
telemetry:
  interval: 500ms
broker:
  claim_idle: 2s
  lease_timeout: 5s
%s`, board, extra)
}

// runAdapter starts `adapter serve` in-process and stops it at cleanup.
func runAdapter(t *testing.T, args ...string) (stop func(), out *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- adapter.Main(ctx, append([]string{"serve"}, args...), func(string) string { return "" }, out, out)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("adapter exited %d; output:\n%s", code, out.String())
				}
			case <-time.After(30 * time.Second):
				t.Errorf("adapter did not stop within 30s; output:\n%s", out.String())
			}
		})
	}
	t.Cleanup(stop)
	return stop, out
}

// buildAdapter compiles the adapter binary once per test run, with the
// task supervisor next to it, where the adapter finds it (as `make build`
// lays them out).
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cb-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "adapter")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/adapter", "./cmd/cb-supervisor")
	cmd.Dir = filepath.Dir(filepath.Dir(file))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func adapterBinary(t testing.TB) string {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// eventually polls cond until it returns true or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
