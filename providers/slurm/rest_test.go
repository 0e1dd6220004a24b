package slurm

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/slurmtest"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
)

// clusterToken gets a JWT for user from the cluster (scontrol token).
func clusterToken(t *testing.T, c *slurmtest.Cluster, user string, lifespan int) string {
	t.Helper()
	out, err := c.Command(t.Context(), "scontrol", "token", "username="+user, "lifespan="+strconv.Itoa(lifespan)).CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol token: %v: %s", err, out)
	}
	tk, err := parseToken(out)
	if err != nil {
		t.Fatal(err)
	}
	return tk.value
}

// TestRESTExpiredTokenRefused: slurmrestd refuses an expired token, so
// the transport must renew its own (TestRESTTokenCommandRenews).
func TestRESTExpiredTokenRefused(t *testing.T) {
	t.Parallel()
	c := slurmtest.Shared(t)
	tok := clusterToken(t, c, "root", 1)
	time.Sleep(2500 * time.Millisecond)
	r, err := NewREST(RESTConfig{URL: c.RESTURL, User: "root"}, "", c.Conf, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	err = r.send(t.Context(), "root", tok, http.MethodGet, "/nodes", nil, nil)
	if re, ok := errors.AsType[*RESTError](err); !ok || re.Status/100 == 2 {
		t.Fatalf("an expired token: %v, want slurmrestd's refusal", err)
	}
	if err := r.send(t.Context(), "root", clusterToken(t, c, "root", 60), http.MethodGet, "/nodes", nil, nil); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
}

// TestRESTTokenCommandRenews: tokens from a command that live 4 s are
// got again before they expire, and requests keep working past the first
// token's end; a token slurmctld refuses is replaced at once.
func TestRESTTokenCommandRenews(t *testing.T) {
	t.Parallel()
	c := slurmtest.Shared(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	script := filepath.Join(dir, "token.sh")
	// Counts its runs, and prints scontrol's token for the user.
	body := "#!/bin/sh\necho run >>" + count + "\nexec scontrol token username=\"$1\" lifespan=4\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run")
	}
	r, err := NewREST(RESTConfig{URL: c.RESTURL, User: "root", TokenCommand: []string{script, "{user}"}}, "", c.Conf, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(9 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.Nodes(t.Context()); err != nil {
			t.Fatalf("after %d token runs: %v", runs(), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// 9 s of 4 s tokens renewed in their last second: 3 or 4 runs.
	if n := runs(); n < 3 || n > 4 {
		t.Errorf("the token command ran %d times over 9 s of 4 s tokens, want 3 or 4", n)
	}

	// A token slurmctld does not take (revoked, say) is dropped and got
	// again once.
	before := runs()
	r.tokens.mu.Lock()
	tk := r.tokens.cache["root"]
	tk.value = tk.value[:len(tk.value)-2] + "xx"
	tk.refreshAfter = time.Now().Add(time.Hour)
	r.tokens.cache["root"] = tk
	r.tokens.mu.Unlock()
	if _, err := r.Nodes(t.Context()); err != nil {
		t.Fatalf("with a refused cached token: %v", err)
	}
	if runs() != before+1 {
		t.Errorf("token command runs %d → %d, want one more", before, runs())
	}
}

// TestRESTTokenFile: the file is read again once its token nears its
// end, so a renewer that rewrites it is followed; a task for another user
// than the file's is refused and leaves nothing behind.
func TestRESTTokenFile(t *testing.T) {
	t.Parallel()
	c := slurmtest.Shared(t)
	file := filepath.Join(t.TempDir(), "jwt")
	first := clusterToken(t, c, "root", 3)
	if err := os.WriteFile(file, []byte("SLURM_JWT="+first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewREST(RESTConfig{URL: c.RESTURL, User: "root", TokenFile: file}, "", c.Conf, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Nodes(t.Context()); err != nil {
		t.Fatal(err)
	}
	second := clusterToken(t, c, "root", 600)
	if err := os.WriteFile(file, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond) // the first has expired
	if _, err := r.Nodes(t.Context()); err != nil {
		t.Fatalf("after the file's first token expired: %v", err)
	}
	if got := r.tokens.cache["root"].value; got != second {
		t.Errorf("the token in use is not the file's new one")
	}

	if os.Geteuid() != 0 {
		return
	}
	base, err := os.MkdirTemp("", "cbslurm-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	p := newTestProviderOver(t, "rest", Config{WorkDir: filepath.Join(base, "work"), Transport: r})
	task := providers.Task{ID: providertest.TaskID(t), Argv: cmds.Exit(0), User: "nobody"}
	if _, err := p.Start(t.Context(), task); err == nil || !strings.Contains(err.Error(), "no token for nobody") {
		t.Fatalf("a task for nobody with root's token file: %v, want no token for nobody", err)
	}
	if _, err := os.Stat(p.taskDir(task.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused task left its directory: %v", err)
	}
}

// TestRESTNeedsURL: a REST config without a usable URL is refused.
func TestRESTNeedsURL(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]RESTConfig{
		"none":       {},
		"no scheme":  {URL: "127.0.0.1:6820"},
		"file + cmd": {URL: "http://127.0.0.1:6820", TokenFile: "/x", TokenCommand: []string{"x"}},
	} {
		if _, err := New(Config{WorkDir: t.TempDir(), REST: &cfg}); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}
