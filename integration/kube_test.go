package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/computeboard/computeboard/agent"
	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/kubetest"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers/kube"
	"github.com/computeboard/computeboard/wire"
)

// TestKubeProvider runs one adapter whose config lists this machine
// ("here") and a real Kubernetes control plane whose nodes are kwok's
// ("k8s"): the agent registers every schedulable node of the cluster
// under its provider; requests posted through the blackboard run as Jobs
// whose Pods the kube-scheduler binds to the node the engine chose (a
// node selector's, a GPU request's: only a node with GPUs); a local
// request still runs here; a retracted running job is cancelled and its
// Job deleted; a job that ends while the adapter is down is recorded
// after the restart, once, and runs once.
func TestKubeProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	t.Parallel()
	c := kubetest.StartT(t, kubetest.Options{})
	cs := c.Client(t)
	ns := c.Namespace(t)
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
  ksleep:
    command: [%s]
node: {name: %s, cpu_cores: 2, memory_gb: 2, gpu_discovery: off}
providers:
  - name: here
    kind: local
  - name: k8s
    kind: kube
    kube: {kubeconfig: %s, namespace: %s, work_dir: %s, refresh_interval: 1s}
`, kubetest.ProgRun, kubetest.ProgSleep, local, c.Kubeconfig, ns, filepath.Join(jobDir(t), "kube"))
	body := strings.Replace(testConfig(board, ""), "allowlist:", extra+"allowlist:", 1)
	cfg := writeConfig(t, body)
	stop, out := runAdapter(t, "--config", cfg, "--redis", srv.URL())

	// Every schedulable kwok node (not the tainted one) is a pool node of k8s.
	var recs map[string]pool.NodeRecord
	wantNodes := []string{"kwok-cpu-0", "kwok-cpu-1", "kwok-gpu-0", "kwok-gpu-1", "kwok-mig-0"}
	eventually(t, 60*time.Second, "the nodes registered", func() bool {
		recs = map[string]pool.NodeRecord{}
		for name, v := range rdb.HGetAll(t.Context(), st.Keys().PoolNodes()).Val() {
			var r pool.NodeRecord
			if json.Unmarshal([]byte(v), &r) == nil {
				recs[name] = r
			}
		}
		return len(recs) == len(wantNodes)+1
	})
	for _, n := range wantNodes {
		if r := recs[n]; r.Provider != "k8s" || r.Labels[wire.ProviderLabel] != "k8s" {
			t.Errorf("node %s: provider %q, labels %v; want provider k8s", n, r.Provider, r.Labels)
		}
	}
	if _, ok := recs["kwok-tainted-0"]; ok {
		t.Errorf("the tainted node is in the pool")
	}

	ids := postRequests(t, st, "reasoning", []string{
		`{"template":"krun","arguments":["1s"],"provider":"k8s"}`,
		`{"template":"krun","arguments":["1s"],"node_selector":{"kubernetes.io/hostname":"kwok-cpu-1"}}`,
		`{"template":"krun","arguments":["1s"],"resource_requirements":{"cpu_cores":1,"memory":1,"gpu_count":2}}`,
		`{"template":"echo","arguments":["here"],"provider":"here"}`,
		`{"template":"ksleep","provider":"k8s"}`,
	})
	sleeper := ids[4]
	waitStatus(t, st, sleeper, wire.JobRunning)
	if err := st.Retract(t.Context(), sleeper); err != nil {
		t.Fatal(err)
	}
	sts := waitAllTerminal(t, rdb, st, ids, 120*time.Second)
	for i, want := range []struct {
		status wire.JobStatus
		node   func(string) bool
	}{
		{wire.JobSucceeded, func(n string) bool { return strings.HasPrefix(n, "kwok-") }},
		{wire.JobSucceeded, func(n string) bool { return n == "kwok-cpu-1" }},
		{wire.JobSucceeded, func(n string) bool { return n == "kwok-gpu-0" || n == "kwok-gpu-1" }},
		{wire.JobSucceeded, func(n string) bool { return n == local }},
		{wire.JobCancelled, func(n string) bool { return strings.HasPrefix(n, "kwok-") }},
	} {
		jd, _ := jobData(t, st, ids[i])
		if sts[ids[i]] != string(want.status) || !want.node(jd.Node) {
			t.Errorf("request %d: %s on %q (error %+v); want %s\n%s", i, sts[ids[i]], jd.Node, jd.Error, want.status, out.String())
		}
		if i == 3 || i == 4 {
			continue
		}
		// The Pod ran where the engine placed the job.
		pod := podOfJob(t, cs, ns, wire.JobID(ids[i]))
		if pod.Spec.NodeName != jd.Node {
			t.Errorf("request %d: the engine chose %s, the Pod ran on %s", i, jd.Node, pod.Spec.NodeName)
		}
		if i == 2 {
			q := pod.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
			if q.Value() != 2 {
				t.Errorf("GPU request's Pod asks for %s GPUs, want 2", q.String())
			}
		}
	}
	// Cancelled: its Job is gone.
	if _, err := cs.BatchV1().Jobs(ns).Get(t.Context(), kube.JobName(agent.TaskID(wire.JobID(sleeper), 1)), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cancelled job's Job: %v, want NotFound", err)
	}

	// A job that ends while the adapter is down.
	late := postRequests(t, st, "reasoning", []string{`{"template":"krun","arguments":["4s"],"provider":"k8s"}`})[0]
	waitStatus(t, st, late, wire.JobRunning)
	stop()
	jobName := kube.JobName(agent.TaskID(wire.JobID(late), 1))
	eventually(t, 60*time.Second, "the Job to complete while the adapter is down", func() bool {
		j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), jobName, metav1.GetOptions{})
		return err == nil && j.Status.CompletionTime != nil
	})
	if jd, _ := jobData(t, st, late); jd.Status != wire.JobRunning {
		t.Fatalf("with the adapter down the job is %s, want still running", jd.Status)
	}
	runAdapter(t, "--config", cfg, "--redis", srv.URL())
	jd := waitStatus(t, st, late, wire.JobSucceeded)
	if jd.Attempt != 1 {
		t.Errorf("attempt %d, want 1", jd.Attempt)
	}
	time.Sleep(2 * time.Second) // a second recording would come now
	if n := finishedEvents(t, st, wire.JobID(late)); n != 1 {
		t.Errorf("compute.job.finished raised %d times for the job, want 1", n)
	}
	list, err := cs.BatchV1().Jobs(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "computeboard.io/job=" + wire.JobID(late)})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("Jobs of the job: %d (%v), want 1: it ran once", len(list.Items), err)
	}
	if ttl := list.Items[0].Spec.TTLSecondsAfterFinished; ttl == nil {
		t.Errorf("the recorded Job has no ttlSecondsAfterFinished: it would stay forever")
	}

	// A node cordoned in the cluster goes out of scheduling, with the
	// reason, and comes back once uncordoned.
	cordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
		if _, err := cs.CoreV1().Nodes().Patch(t.Context(), "kwok-cpu-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unhealthy := func() string {
		var r pool.NodeRecord
		_ = json.Unmarshal([]byte(rdb.HGet(t.Context(), st.Keys().PoolNodes(), "kwok-cpu-0").Val()), &r)
		return r.Unhealthy
	}
	cordon(true)
	eventually(t, 30*time.Second, "kwok-cpu-0 out of scheduling", func() bool { return strings.Contains(unhealthy(), "cordoned") })
	cordon(false)
	eventually(t, 30*time.Second, "kwok-cpu-0 back", func() bool { return unhealthy() == "" })
}

// podOfJob returns the Pod of the first attempt of job.
func podOfJob(t *testing.T, cs kubernetes.Interface, ns, job string) corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "computeboard.io/job=" + job})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("Pods of job %s: %d (%v), want 1", job, len(pods.Items), err)
	}
	return pods.Items[0]
}

// finishedEvents counts the compute.job.finished events of job.
func finishedEvents(t *testing.T, st *blackboard.Store, job string) int {
	t.Helper()
	evs, _, err := st.Events(t.Context(), "0", jobs.EventJobFinished, 100000, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		var p jobs.JobFinishedEvent
		if json.Unmarshal(e.Payload, &p) == nil && p.JobID == job {
			n++
		}
	}
	return n
}
