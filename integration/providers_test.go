package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/internal/slurmtest"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/wire"
)

// TestSlurmProvider runs one adapter whose config lists two providers,
// this machine ("here") and a real single-node Slurm ("hpc", cheaper):
// the agent registers both nodes, each under its provider; a request for
// provider hpc, and one asking for the cheapest node, run through Slurm
// and succeed on its node (jobs explain names the node and provider); a
// request for a provider without nodes is rejected impossible_request.
func TestSlurmProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Slurm cluster")
	}
	t.Parallel()
	c := slurmtest.StartT(t, slurmtest.Options{CPUs: 4, MemoryMiB: 2048})
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	local := fmt.Sprintf("cb-here-%d", time.Now().UnixNano()%1e6)
	cfg := writeConfig(t, testConfig(board, fmt.Sprintf(`node: {name: %s, cpu_cores: 2, memory_gb: 2, gpu_discovery: off}
providers:
  - name: here
    kind: local
    cost: {cpu_core_hour: 0.05, memory_gib_hour: 0.01}
  - name: hpc
    kind: slurm
    slurm: {partition: %s, slurm_conf: %s, work_dir: %s, poll_interval: 200ms}
    cost: {cpu_core_hour: 0.01, memory_gib_hour: 0.002}
`, local, c.Partition, c.Conf, filepath.Join(jobDir(t), "slurm"))))
	runAdapter(t, "--config", cfg, "--redis", srv.URL())

	var recs map[string]pool.NodeRecord
	eventually(t, 30*time.Second, "both nodes registered", func() bool {
		recs = map[string]pool.NodeRecord{}
		for name, v := range rdb.HGetAll(t.Context(), st.Keys().PoolNodes()).Val() {
			var r pool.NodeRecord
			if json.Unmarshal([]byte(v), &r) == nil {
				recs[name] = r
			}
		}
		return len(recs) == 2
	})
	for name, want := range map[string]string{local: "here", c.Node: "hpc"} {
		if r := recs[name]; r.Provider != want || r.Labels[wire.ProviderLabel] != want {
			t.Errorf("node %s: provider %q, labels %v; want provider %s", name, r.Provider, r.Labels, want)
		}
	}

	ids := postRequests(t, st, "reasoning", []string{
		`{"template":"echo","arguments":["via slurm"],"provider":"hpc"}`,
		`{"template":"echo","arguments":["cheapest"],"placement":"cheapest"}`,
		`{"template":"echo","arguments":["here"],"provider":"here"}`,
		`{"template":"echo","arguments":["nowhere"],"provider":"kube"}`,
	})
	sts := waitAllTerminal(t, rdb, st, ids, 90*time.Second)
	for i, want := range []struct {
		status wire.JobStatus
		node   string
	}{{wire.JobSucceeded, c.Node}, {wire.JobSucceeded, c.Node}, {wire.JobSucceeded, local}, {wire.JobRejected, ""}} {
		jd, _ := jobData(t, st, ids[i])
		if sts[ids[i]] != string(want.status) || jd.Node != want.node {
			t.Errorf("request %d: %s on %q (error %+v); want %s on %q\n%s", i, sts[ids[i]], jd.Node, jd.Error, want.status, want.node, c.LogTail())
		}
	}
	// jobs explain names the node a job ran on and its provider.
	if out, code := cli(t, "jobs", "explain", wire.JobID(ids[0]), "--redis", srv.URL(), "--board", board); code != 0 ||
		!strings.Contains(out, "on node "+c.Node+" (provider hpc)") {
		t.Errorf("jobs explain exited %d:\n%s\nwant it to name node %s and provider hpc", code, out, c.Node)
	}
	if jd, _ := jobData(t, st, ids[3]); jd.ReasonCode != wire.CodeImpossibleRequest || jd.Error == nil || !strings.Contains(jd.Error.Message, "provider=kube") {
		t.Errorf("request for provider kube: reason %q, error %+v; want impossible_request naming the selector", jd.ReasonCode, jd.Error)
	}
}
