package slurmtest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestSubmit runs a job on the shared cluster and a second, dedicated one
// at the same time: instances do not meet.
func TestSubmit(t *testing.T) {
	clusters := map[string]*Cluster{"shared": Shared(t), "dedicated": StartT(t, Options{CPUs: 2})}
	for name, c := range clusters {
		t.Run(name, func(t *testing.T) {
			out, err := c.Command(t.Context(), "sbatch", "--parsable", "--wait", "-o", "/dev/null", "--wrap", "true").CombinedOutput()
			if err != nil {
				t.Fatalf("sbatch --wait: %v: %s\n%s", err, out, c.LogTail())
			}
			if id := strings.TrimSpace(string(out)); id == "" {
				t.Fatalf("sbatch printed no job ID")
			}
		})
	}
}

// TestREST: the shared cluster's slurmrestd answers a request carrying a
// token from scontrol token, and refuses one without.
func TestREST(t *testing.T) {
	c := Shared(t)
	out, err := c.Command(t.Context(), "scontrol", "token", "username=root", "lifespan=60").CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol token: %v: %s", err, out)
	}
	_, tok, ok := strings.Cut(strings.TrimSpace(string(out)), "SLURM_JWT=")
	if !ok {
		t.Fatalf("scontrol token printed %q", out)
	}
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.RESTURL+"/slurm/v0.0.38/nodes", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-SLURM-USER-NAME", "root")
		if token != "" {
			req.Header.Set("X-SLURM-USER-TOKEN", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(tok); code != http.StatusOK || !strings.Contains(body, `"name": "`+c.Node+`"`) {
		t.Errorf("with a token: %d %s; want 200 listing node %s", code, body, c.Node)
	}
	if code, _ := get(""); code == http.StatusOK {
		t.Errorf("without a token: 200, want a refusal")
	}
}
