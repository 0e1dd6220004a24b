package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/adapter"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the adapter runs jobs as another user only when it runs as root (CI runs as root)")
	}
}

// TestLoaderVariableIsRefused is the regression test for the LD_PRELOAD
// chain: a module wrote a shared object (as a job's stdout) and then asked
// for an allowlisted /bin/true with LD_PRELOAD naming it, which ran the
// object's code in the job (as root). The request must be refused, naming
// the variable, and the object must never run.
func TestLoaderVariableIsRefused(t *testing.T) {
	t.Parallel()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatal("a C compiler (cc) is needed to build the test's shared object: apt-get install -y gcc (make test installs it)")
	}
	dir := jobDir(t)
	marker := filepath.Join(dir, "preloaded")
	src := filepath.Join(dir, "evil.c")
	so := filepath.Join(dir, "evil.so")
	code := fmt.Sprintf(`#include <stdio.h>
__attribute__((constructor)) static void run(void) { FILE *f = fopen(%q, "w"); if (f) { fputs("ran", f); fclose(f); } }
`, marker)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	if err := os.Chmod(so, 0o755); err != nil {
		t.Fatal(err)
	}

	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := writeConfig(t, testConfig(board, ""))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	// Step one of the chain still works and publishes its output's path.
	first := postData(t, st, "attacker", `{"command":["/bin/echo","-n","payload"]}`, nil)
	if jd := waitStatus(t, st, first, wire.JobSucceeded); jd.StdoutPath == "" {
		t.Fatalf("no stdout path on the job: %+v", jd)
	}
	for _, env := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"} {
		req := postData(t, st, "attacker", fmt.Sprintf(`{"command":["/bin/true"],"environment":{%q:%q}}`, env, so), nil)
		jd := waitStatus(t, st, req, wire.JobRejected)
		if jd.ReasonCode != wire.CodeEnvNotAllowed || jd.Error == nil || !strings.Contains(jd.Error.Message, env) {
			t.Errorf("%s: rejected %s %+v; want env_not_allowed naming the variable", env, jd.ReasonCode, jd.Error)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the preloaded shared object ran")
	}
}

// TestJobCannotReadTheAdapter: a job neither inherits the adapter's
// environment (where its operator token lives) nor reads it from
// /proc/<adapter pid>/environ, nor reads the adapter's config.
func TestJobCannotReadTheAdapter(t *testing.T) {
	requireRoot(t)
	const secret = "adapter-secret-8c1f"
	// Not t.Setenv: the other tests run in parallel. The variable is
	// harmless to them, and it is what a token in the environment looks
	// like to a job.
	os.Setenv("COMPUTEBOARD_TEST_SECRET", secret)
	t.Cleanup(func() { os.Unsetenv("COMPUTEBOARD_TEST_SECRET") })

	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	snoop := "templates:\n  snoop:\n    command: [/bin/sh, -c, 'id -un; env; cat /proc/" + fmt.Sprint(os.Getpid()) + "/environ; cat CONFIG; echo done']\n"
	body := strings.Replace(testConfig(board, "operator_token: "+secret+"\n"), "templates:\n", snoop, 1)
	cfg := writeConfig(t, body)
	// The job also tries the adapter's config file (it holds the token).
	if err := os.WriteFile(cfg, []byte(strings.Replace(body, "CONFIG", cfg, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	req := postData(t, st, "snooper", `{"template":"snoop"}`, nil)
	jd := waitStatus(t, st, req, wire.JobSucceeded)
	out, err := os.ReadFile(jd.StdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), secret) {
		t.Fatalf("the job read the adapter's secret:\n%s", out)
	}
	if !strings.HasPrefix(string(out), "nobody\n") || !strings.Contains(string(out), "done") {
		t.Fatalf("the job did not run as nobody to the end:\n%s", out)
	}
	if strings.Contains(string(out), "HOME=/root") {
		t.Errorf("the job got the adapter's HOME:\n%s", out)
	}
}

// TestIntakeIsNotStarvedByOneModule is the regression test for the shared
// max_pending: one module filled it with gang members that can never start,
// and another module's request got no job.
func TestIntakeIsNotStarvedByOneModule(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := writeConfig(t, strings.Replace(testConfig(board, ""), "scheduler:\n", "scheduler:\n  max_pending: 4\n", 1))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	for i := range 12 {
		postData(t, st, "flood", fmt.Sprintf(`{"template":"hello","gang_id":"g%d","gang_size":2}`, i), nil)
	}
	quiet := postData(t, st, "quiet", `{"template":"hello"}`, nil)
	waitStatus(t, st, quiet, wire.JobSucceeded)
}

// TestAPIReadsNeedTheToken: job records (request payloads and
// environment) need the operator token; wrong methods get 405.
func TestAPIReadsNeedTheToken(t *testing.T) {
	t.Parallel()
	const token = "op-token-1"
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := writeConfig(t, testConfig(board, "operator_token: "+token+"\n"))
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, out)
	req := postData(t, st, "reader", `{"template":"hello","payload":{"secret":"p-1"}}`, nil)
	waitStatus(t, st, req, wire.JobSucceeded)

	get := func(method, path, auth string) (int, string) {
		code, b := callAPI(t, method, api+path, auth)
		return code, string(b)
	}
	path := "/api/v1/jobs/" + wire.JobID(req)
	if code, body := get("GET", path, ""); code != http.StatusUnauthorized || strings.Contains(body, "p-1") {
		t.Errorf("without a token: %d %s", code, body)
	}
	if code, body := get("GET", path, "bearer "+token); code != http.StatusOK || !strings.Contains(body, "p-1") {
		t.Errorf("with a lower-case bearer token: %d %s", code, body)
	}
	if code, _ := get("DELETE", path, "Bearer "+token); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE a job: %d, want 405", code)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := get("GET", p, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200", p, code)
		}
	}
	if code, _ := get("GET", "/debug/pprof/heap", "Bearer "+token); code != http.StatusNotFound {
		t.Errorf("profiles without http.profiling: %d, want 404", code)
	}
	var j map[string]any
	if _, body := get("GET", path, "Bearer "+token); json.Unmarshal([]byte(body), &j) != nil {
		t.Errorf("job record is not JSON: %s", body)
	}
}

// TestProfilesNeedTheToken: with http.profiling the Go runtime's
// profiles are served to the operator token alone, public reads or not,
// and never the command line (the Redis URL's password is on it).
func TestProfilesNeedTheToken(t *testing.T) {
	t.Parallel()
	const token = "op-token-2"
	srv := redistest.Shared(t)
	_, board := redistest.New(t)
	cfg := writeConfig(t, testConfig(board, "operator_token: "+token+"\nhttp:\n  public_reads: true\n  profiling: true\n"))
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0")
	api := apiURL(t, out)
	get := func(path, auth string) (int, []byte) { return callAPI(t, "GET", api+path, auth) }
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1"} {
		if code, _ := get(p, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", p, code)
		}
		if code, _ := get(p, "Bearer wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", p, code)
		}
	}
	// A heap profile: gzip'd protocol buffers.
	if code, b := get("/debug/pprof/heap", "Bearer "+token); code != http.StatusOK || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("heap profile with the token: %d, %d bytes", code, len(b))
	}
	if code, b := get("/debug/pprof/goroutine?debug=1", "Bearer "+token); code != http.StatusOK || !strings.Contains(string(b), "goroutine profile:") {
		t.Errorf("goroutines with the token: %d %.200s", code, b)
	}
	if code, b := get("/debug/pprof/cmdline", "Bearer "+token); code != http.StatusNotFound || strings.Contains(string(b), "redis") {
		t.Errorf("command line with the token: %d %.200s, want 404", code, b)
	}
}

// callAPI sends method to url, with auth as its Authorization header
// (none when ""), and returns the status and the body.
func callAPI(t *testing.T, method, url, auth string) (int, []byte) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestRedisPasswordIsNotPrinted: the startup banner and connection errors
// never show the Redis password.
func TestRedisPasswordIsNotPrinted(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	_, board := redistest.New(t)
	cfg := writeConfig(t, testConfig(board, ""))
	// A user that does not exist: Redis refuses the login (WRONGPASS).
	url := strings.Replace(srv.URL(), "unix://", "unix://no-such-user:pw-s3cret@", 1)
	var out syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := adapter.Main(ctx, []string{"serve", "--config", cfg, "--redis", url}, func(string) string { return "" }, &out, &out)
	if code == 0 {
		t.Fatalf("the adapter started with a wrong password:\n%s", out.String())
	}
	if strings.Contains(out.String(), "pw-s3cret") {
		t.Fatalf("the password was printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "xxxxx") {
		t.Errorf("the error does not name the (redacted) URL:\n%s", out.String())
	}
}
