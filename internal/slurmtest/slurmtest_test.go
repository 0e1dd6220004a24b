package slurmtest

import (
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
