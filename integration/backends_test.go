package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/kubetest"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/internal/slurmtest"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// TestPoolOverThreeBackends runs one adapter whose pool spans this
// machine ("here", the local provider), a real single-node Slurm with
// its cgroup plugins ("hpc") and a real Kubernetes control plane with
// kwok's nodes ("k8s"). Requests posted through the blackboard run on the
// backend and node the engine chose; on Slurm, a job over its memory ends
// failed with reason oom, a retracted running job is cancelled in Slurm
// too, and a job that finishes while the adapter is down is recorded
// after the restart, once (Kubernetes' cancel and restart cases are in
// TestKubeProvider).
func TestPoolOverThreeBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Slurm and a Kubernetes control plane")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		t.Skip("no cgroup v1 memory controller: Slurm's task/cgroup cannot confine memory here")
	}
	t.Parallel()
	sc := slurmtest.StartT(t, slurmtest.Options{Cgroup: true, CPUs: 4, MemoryMiB: 2048})
	kc := kubetest.StartT(t, kubetest.Options{})
	ns := kc.Namespace(t)
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	local := fmt.Sprintf("cb-here-%d", time.Now().UnixNano()%1e6)
	extra := fmt.Sprintf(`  krun:
    command: [%s]
    image: registry.example/run:1
    allow_arguments: true
    argument_pattern: '[0-9]{1,3}s'
    max_arguments: 1
  hog:
    command: [/bin/sh, -c, 'head -c 400M /dev/zero | tail >/dev/null']
node: {name: %s, cpu_cores: 2, memory_gb: 2, gpu_discovery: off}
providers:
  - name: here
    kind: local
  - name: hpc
    kind: slurm
    slurm: {partition: %s, slurm_conf: %s, work_dir: %s, poll_interval: 200ms}
  - name: k8s
    kind: kube
    kube: {kubeconfig: %s, namespace: %s, work_dir: %s}
`, kubetest.ProgRun, local, sc.Partition, sc.Conf, filepath.Join(jobDir(t), "slurm"),
		kc.Kubeconfig, ns, filepath.Join(jobDir(t), "kube"))
	cfg := writeConfig(t, strings.Replace(testConfig(board, ""), "allowlist:", extra+"allowlist:", 1))
	stop, out := runAdapter(t, "--config", cfg, "--redis", srv.URL())

	eventually(t, 60*time.Second, "nodes of all three providers registered", func() bool {
		seen := map[string]bool{}
		for _, v := range rdb.HGetAll(t.Context(), st.Keys().PoolNodes()).Val() {
			var r pool.NodeRecord
			if json.Unmarshal([]byte(v), &r) == nil {
				seen[r.Provider] = true
			}
		}
		return seen["here"] && seen["hpc"] && seen["k8s"]
	})

	ids := postRequests(t, st, "reasoning", []string{
		`{"template":"echo","arguments":["via slurm"],"provider":"hpc"}`,
		`{"template":"krun","arguments":["1s"],"resource_requirements":{"cpu_cores":1,"memory":1,"gpu_count":1}}`,
		`{"template":"echo","arguments":["here"],"provider":"here"}`,
		`{"template":"hog","provider":"hpc","resource_requirements":{"cpu_cores":1,"memory":0.0625}}`,
		`{"template":"sleep","arguments":["60"],"provider":"hpc"}`,
	})
	sleeper := ids[4]
	waitStatus(t, st, sleeper, wire.JobRunning)
	slurmID := slurmJobID(t, rdb, st, sleeper)
	if err := st.Retract(t.Context(), sleeper); err != nil {
		t.Fatal(err)
	}
	sts := waitAllTerminal(t, rdb, st, ids, 120*time.Second)
	for i, want := range []struct {
		status wire.JobStatus
		node   func(string) bool
		reason string
	}{
		{wire.JobSucceeded, func(n string) bool { return n == sc.Node }, ""},
		{wire.JobSucceeded, func(n string) bool { return strings.HasPrefix(n, "kwok-gpu-") }, ""},
		{wire.JobSucceeded, func(n string) bool { return n == local }, ""},
		{wire.JobFailed, func(n string) bool { return n == sc.Node }, "oom"},
		{wire.JobCancelled, func(n string) bool { return n == sc.Node }, ""},
	} {
		jd, _ := jobData(t, st, ids[i])
		code := ""
		if jd.Error != nil {
			code = jd.Error.Code
		}
		if sts[ids[i]] != string(want.status) || !want.node(jd.Node) || (want.reason != "" && code != want.reason) {
			t.Errorf("request %d: %s on %q (error %+v); want %s %s\n%s\n%s", i, sts[ids[i]], jd.Node, jd.Error, want.status, want.reason, out.String(), sc.LogTail())
		}
	}
	// The Kubernetes job's Pod ran where the engine placed it.
	if jd, _ := jobData(t, st, ids[1]); podOfJob(t, kc.Client(t), ns, wire.JobID(ids[1])).Spec.NodeName != jd.Node {
		t.Errorf("the GPU job's Pod did not run on the engine's node %s", jd.Node)
	}
	// Slurm itself cancelled the retracted job.
	eventually(t, 30*time.Second, "Slurm to say the retracted job is cancelled", func() bool {
		return slurmState(t, sc, slurmID) == "CANCELLED"
	})

	// A Slurm job that finishes while the adapter is down.
	late := postRequests(t, st, "reasoning", []string{`{"template":"sleep","arguments":["3"],"provider":"hpc"}`})[0]
	waitStatus(t, st, late, wire.JobRunning)
	lateID := slurmJobID(t, rdb, st, late)
	stop()
	eventually(t, 60*time.Second, "the Slurm job to complete while the adapter is down", func() bool {
		return slurmState(t, sc, lateID) == "COMPLETED"
	})
	if jd, _ := jobData(t, st, late); jd.Status != wire.JobRunning {
		t.Fatalf("with the adapter down the job is %s, want still running", jd.Status)
	}
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	jd := waitStatus(t, st, late, wire.JobSucceeded)
	if jd.Attempt != 1 {
		t.Errorf("attempt %d, want 1: it ran once", jd.Attempt)
	}
	time.Sleep(2 * time.Second) // a second recording would come now
	if n := finishedEvents(t, st, wire.JobID(late)); n != 1 {
		t.Errorf("compute.job.finished raised %d times for the job, want 1", n)
	}
}

// slurmJobID is the Slurm job ID of the job of request reqID: its
// record's provider handle.
func slurmJobID(t *testing.T, rdb redis.UniversalClient, st *blackboard.Store, reqID string) string {
	t.Helper()
	var h providers.Handle
	eventually(t, 30*time.Second, "the handle of "+reqID, func() bool {
		v := rdb.HGet(t.Context(), st.Keys().Job(wire.JobID(reqID)), "handle").Val()
		return v != "" && json.Unmarshal([]byte(v), &h) == nil && h.ID != ""
	})
	return h.ID
}

// slurmState is what squeue says of Slurm job id (finished jobs stay
// listed for MinJobAge).
func slurmState(t *testing.T, c *slurmtest.Cluster, id string) string {
	t.Helper()
	out, err := c.Command(context.Background(), "squeue", "--noheader", "--states=all", "--format=%T", "--jobs="+id).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
