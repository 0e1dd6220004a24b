package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/computeboard/computeboard/internal/kubetest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/providertest"
)

// task is a template's task with a fresh ID.
func task(t *testing.T, argv ...string) providers.Task {
	return providers.Task{ID: providertest.TaskID(t), Argv: argv, Template: "tpl"}
}

// podOf returns the task's Pod, once there is one.
func podOf(t *testing.T, p *Provider, id string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := providertest.Eventually(t.Context(), func() (bool, error) {
		_, pods, err := p.get(t.Context(), id, true)
		if len(pods) > 0 {
			pod = newest(pods)
		}
		return pod != nil, err
	})
	if err != nil {
		t.Fatalf("no Pod for %s: %v", id, err)
	}
	return pod
}

// startRunning starts tk and waits until it runs.
func startRunning(t *testing.T, p *Provider, tk providers.Task) providers.Handle {
	t.Helper()
	h := providertest.Start(t, p, tk)
	providertest.WaitFor(t, p, h, "running", func(st providers.Status) bool { return st.State == providers.StateRunning })
	return h
}

// TestNoPayloadNoVolume: a task without a payload gets /dev/null as its
// payload file (empty, as the payload), and its Pod carries neither the
// payload annotation nor the volume, which only make the Pod heavier for
// the control plane.
func TestNoPayloadNoVolume(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tk := task(t, kubetest.ProgSleep)
	startRunning(t, p, tk)
	pod := podOf(t, p, tk.ID)
	if v, ok := pod.Annotations[AnnotPayload]; ok {
		t.Errorf("payload annotation %q on a task without a payload", v)
	}
	if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "computeboard" }) ||
		slices.ContainsFunc(pod.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "computeboard" }) {
		t.Errorf("volumes %v, mounts %v; want no payload volume", pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts)
	}
	var got string
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == providers.PayloadEnv {
			got = e.Value
		}
	}
	if got != NoPayloadPath {
		t.Errorf("%s=%q, want %q", providers.PayloadEnv, got, NoPayloadPath)
	}
}

// TestJobSpec starts a task with everything a Job can carry and reads its
// Job and Pod back from the API: pinned to the placement's node (and
// bound there by the scheduler), requests and limits, GPUs, the priority
// class, labels, the escaped command and environment, the payload.
func TestJobSpec(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	cs := c.Client(t)
	class := "cb-test-" + strings.ToLower(providertest.TaskID(t)[3:])
	if _, err := cs.SchedulingV1().PriorityClasses().Create(t.Context(), &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Value: 1000}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.SchedulingV1().PriorityClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	p := newTestProvider(t, Config{PriorityClasses: map[int]string{7: class}, Labels: map[string]string{"computeboard.io/board": "b1"},
		Env: map[string]string{"BASE": "1"}})
	tk := task(t, kubetest.ProgSleep, "--out=$(HOME)", "plain")
	tk.Image = "registry.example/train:3"
	tk.Env = map[string]string{"SECRETLESS": "$(BASE)x"}
	tk.Resources = providers.Resources{CPUCores: 1.5, MemoryBytes: 2 << 30}
	tk.Placement = providers.Placement{Node: "kwok-gpu-1", GPUs: []string{GPUID("kwok-gpu-1", 0), GPUID("kwok-gpu-1", 1)}}
	tk.Priority = 7
	tk.Timeout = 90 * time.Minute
	tk.Payload = []byte(`{"x": "ünïcode"}`)
	tk.Labels = map[string]string{"job": "j-1", "attempt": "2", "request": "bb:entry:with:colons"}
	startRunning(t, p, tk)

	j, err := cs.BatchV1().Jobs(p.namespace).Get(t.Context(), JobName(tk.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, p, tk.ID)
	if pod.Spec.NodeName != "kwok-gpu-1" {
		t.Errorf("Pod bound to %q, want kwok-gpu-1", pod.Spec.NodeName)
	}
	wantLabels := map[string]string{LabelProvider: "kube", "computeboard.io/board": "b1", "computeboard.io/job": "j-1",
		"computeboard.io/attempt": "2", "computeboard.io/template": "tpl"} // request: not a label value, annotation only
	for k, v := range wantLabels {
		if j.Labels[k] != v || pod.Labels[k] != v {
			t.Errorf("label %s: Job %q, Pod %q; want %q", k, j.Labels[k], pod.Labels[k], v)
		}
	}
	if _, ok := j.Labels["computeboard.io/request"]; ok {
		t.Errorf("a value that is no label value became a label: %v", j.Labels)
	}
	if got := *j.Spec.BackoffLimit; got != 0 {
		t.Errorf("backoffLimit %d, want 0", got)
	}
	if got := *j.Spec.ActiveDeadlineSeconds; got != 5400 {
		t.Errorf("activeDeadlineSeconds %d, want 5400", got)
	}
	ctr := pod.Spec.Containers[0]
	if diff := cmp.Diff([]string{kubetest.ProgSleep, "--out=$$(HOME)", "plain"}, slices.Concat(ctr.Command, ctr.Args)); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if ctr.Image != "registry.example/train:3" {
		t.Errorf("image %q", ctr.Image)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	if diff := cmp.Diff(map[string]string{"BASE": "1", "SECRETLESS": "$$(BASE)x", providers.PayloadEnv: PayloadPath}, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("2Gi"),
		ResourceGPU: resource.MustParse("2")}
	for name, q := range want {
		if r, l := ctr.Resources.Requests[name], ctr.Resources.Limits[name]; r.Cmp(q) != 0 || l.Cmp(q) != 0 {
			t.Errorf("%s: request %s, limit %s; want %s", name, r.String(), l.String(), q.String())
		}
	}
	if pod.Spec.PriorityClassName != class || pod.Spec.Priority == nil || *pod.Spec.Priority != 1000 {
		t.Errorf("priority class %q (priority %v), want %q (1000)", pod.Spec.PriorityClassName, pod.Spec.Priority, class)
	}
	if got := pod.Annotations[AnnotPayload]; got != string(tk.Payload) {
		t.Errorf("payload annotation %q, want %q", got, tk.Payload)
	}
	// The payload file: the annotation, projected where the env says.
	mounted := slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "computeboard" && m.MountPath+"/payload" == PayloadPath
	})
	projected := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "computeboard" && v.DownwardAPI != nil && len(v.DownwardAPI.Items) == 1 && v.DownwardAPI.Items[0].Path == "payload" &&
			v.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.annotations['"+AnnotPayload+"']"
	})
	if !mounted || !projected {
		t.Errorf("payload volume: mounted %v, projected from the annotation %v", mounted, projected)
	}
	if sc := ctr.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v: want runAsNonRoot, no privilege escalation", sc)
	}
	if j.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("a running Job has ttlSecondsAfterFinished %d", *j.Spec.TTLSecondsAfterFinished)
	}
}

// TestMIG: MIG devices become nvidia.com/mig-<profile> and the Pod runs
// on the MIG node.
func TestMIG(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tk := task(t, kubetest.ProgSleep)
	tk.Placement = providers.Placement{Node: "kwok-mig-0", MIG: []string{MIGID("kwok-mig-0", kubetest.MIGProfile, 0), MIGID("kwok-mig-0", kubetest.MIGProfile, 3)}}
	startRunning(t, p, tk)
	pod := podOf(t, p, tk.ID)
	q := pod.Spec.Containers[0].Resources.Limits[ResourceMIGPrefix+kubetest.MIGProfile]
	if pod.Spec.NodeName != "kwok-mig-0" || q.Value() != 2 {
		t.Errorf("Pod on %q with %s MIG devices; want kwok-mig-0, 2", pod.Spec.NodeName, q.String())
	}
	bad := task(t, kubetest.ProgSleep)
	bad.Placement = providers.Placement{Node: "kwok-mig-0", MIG: []string{"MIG-not-ours"}}
	if _, err := p.Start(t.Context(), bad); !errors.Is(err, providers.ErrInvalidTask) {
		t.Errorf("Start with a MIG ID this provider did not list: %v, want ErrInvalidTask", err)
	}
}

// TestGPUOnlyWhereThereAreGPUs: a GPU task pinned to a node without GPUs
// is never bound (the scheduler checks fit); it stays pending.
func TestGPUOnlyWhereThereAreGPUs(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tk := task(t, kubetest.ProgSleep)
	tk.Placement = providers.Placement{Node: "kwok-cpu-0", GPUs: []string{GPUID("kwok-cpu-0", 0)}}
	h := providertest.Start(t, p, tk)
	time.Sleep(3 * time.Second)
	st, err := p.Poll(t.Context(), h)
	if err != nil || st.State != providers.StatePending {
		t.Fatalf("Poll = %+v, %v; want pending", st, err)
	}
	if pod := podOf(t, p, tk.ID); pod.Spec.NodeName != "" {
		t.Errorf("GPU Pod bound to %s, which has no GPUs", pod.Spec.NodeName)
	}
}

// TestFailures: how real failures map to statuses and typed reasons.
func TestFailures(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		argv    []string
		timeout time.Duration
		want    func(providers.Status) bool
	}{
		"oom": {argv: []string{kubetest.ProgOOM}, want: func(st providers.Status) bool {
			return st.State == providers.StateFailed && st.OOMKilled && st.ExitCode == nil && strings.HasPrefix(st.Error, ReasonOOM+":")
		}},
		"exit 42": {argv: []string{kubetest.ProgExit, "42"}, want: func(st providers.Status) bool {
			return st.State == providers.StateFailed && st.ExitCode != nil && *st.ExitCode == 42 && strings.HasPrefix(st.Error, ReasonFailed+":")
		}},
		"deadline": {argv: []string{kubetest.ProgSleep}, timeout: time.Second, want: func(st providers.Status) bool {
			return st.State == providers.StateFailed && st.TimedOut && strings.HasPrefix(st.Error, ReasonTimeout+":")
		}},
	}
	p := newTestProvider(t, Config{})
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tk := task(t, tc.argv...)
			tk.Timeout = tc.timeout
			h := providertest.Start(t, p, tk)
			st := providertest.WaitDone(t, p, h)
			if !tc.want(st) {
				t.Errorf("status %+v", st)
			}
			if st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
				t.Errorf("StartedAt %v, FinishedAt %v", st.StartedAt, st.FinishedAt)
			}
		})
	}
}

// TestEvicted: a Pod evicted through the Eviction API ends the task lost,
// with reason evicted.
func TestEvicted(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tk := task(t, kubetest.ProgSleep)
	tk.Placement.Node = "kwok-cpu-1"
	h := startRunning(t, p, tk)
	pod := podOf(t, p, tk.ID)
	if err := p.cs.CoreV1().Pods(p.namespace).EvictV1(t.Context(), &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}); err != nil {
		t.Fatal(err)
	}
	st := providertest.WaitDone(t, p, h)
	if st.State != providers.StateLost || !strings.HasPrefix(st.Error, ReasonEvicted+":") {
		t.Errorf("status after eviction %+v, want lost, evicted", st)
	}
}

// TestStopDeletesJobAndPods: after Stop the Job and its Pods are gone,
// and the task reads cancelled, from its directory, to a new provider too.
func TestStopDeletesJobAndPods(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tk := task(t, kubetest.ProgSleep)
	h := startRunning(t, p, tk)
	if err := p.Stop(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := p.cs.BatchV1().Jobs(p.namespace).Get(t.Context(), JobName(tk.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Job after Stop: %v, want NotFound", err)
	}
	pods, err := p.cs.CoreV1().Pods(p.namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelProvider + "=kube"})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("Pods after Stop: %d (%v), want none (foreground deletion)", len(pods.Items), err)
	}
	again := newTestProvider(t, Config{Namespace: p.namespace, WorkDir: p.workDir})
	if st, err := again.Poll(t.Context(), h); err != nil || st.State != providers.StateCancelled {
		t.Errorf("Poll by a new provider = %+v, %v; want cancelled", st, err)
	}
}

// TestEndedWhileDown: a task that ends while no provider watches is
// reported by the next one (its Job stays until then), which then sets
// the Job's expiry; a Job deleted behind the provider's back is lost.
func TestEndedWhileDown(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ns, dir := c.Namespace(t), t.TempDir()
	first, err := New(Config{REST: c.RESTConfig(), Namespace: ns, WorkDir: dir, Retention: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tk := task(t, kubetest.ProgRun, "2s")
	h, err := first.Start(t.Context(), tk)
	if err != nil {
		t.Fatal(err)
	}
	gone := task(t, kubetest.ProgSleep)
	hGone, err := first.Start(t.Context(), gone)
	if err != nil {
		t.Fatal(err)
	}
	// No provider runs while the task runs out.
	cs := c.Client(t)
	if err := providertest.Eventually(t.Context(), func() (bool, error) {
		j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), JobName(tk.ID), metav1.GetOptions{})
		return err == nil && terminal(j), err
	}); err != nil {
		t.Fatal(err)
	}
	if err := cs.BatchV1().Jobs(ns).Delete(t.Context(), JobName(gone.ID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := newTestProvider(t, Config{Namespace: ns, WorkDir: dir, Retention: 10 * time.Minute})
	st, err := second.Poll(t.Context(), h)
	if err != nil || st.State != providers.StateSucceeded {
		t.Fatalf("Poll after the restart = %+v, %v; want succeeded", st, err)
	}
	j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), JobName(tk.ID), metav1.GetOptions{})
	if err != nil || j.Spec.TTLSecondsAfterFinished == nil || *j.Spec.TTLSecondsAfterFinished != 600 {
		t.Errorf("Job after its end was seen: %v, ttl %v; want ttlSecondsAfterFinished 600", err, j.Spec.TTLSecondsAfterFinished)
	}
	st = providertest.WaitDone(t, second, hGone)
	if st.State != providers.StateLost || !strings.HasPrefix(st.Error, ReasonDeleted+":") {
		t.Errorf("a Job deleted outside computeboard: %+v, want lost, deleted", st)
	}
}

// TestPrune: the directory of a task whose end was recorded goes once it
// is older than the cutoff; a running task's stays; the ended task is
// still read from its Job.
func TestPrune(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	done := providertest.Start(t, p, task(t, kubetest.ProgExit, "0"))
	run := providertest.Start(t, p, task(t, kubetest.ProgSleep))
	providertest.WaitDone(t, p, done)
	if n, err := p.Prune(t.Context(), time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("Prune of what ended under an hour ago: %d, %v; want 0", n, err)
	}
	if n, err := p.Prune(t.Context(), time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("Prune: %d, %v; want 1 (the ended task)", n, err)
	}
	for h, want := range map[providers.Handle]bool{done: false, run: true} {
		if _, err := os.Stat(p.taskDir(h.ID)); (err == nil) != want {
			t.Errorf("%v: directory there = %v, want %v", h, err == nil, want)
		}
	}
	if st, err := p.Poll(t.Context(), done); err != nil || st.State != providers.StateSucceeded {
		t.Errorf("Poll of a pruned task whose Job stays: %+v, %v", st, err)
	}
}

// TestTemplatesOnly: by default a task whose argv came from the allowlist
// (no template) is refused, and nothing is created.
func TestTemplatesOnly(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	tk := task(t, "/bin/echo", "hi")
	tk.Template = ""
	if _, err := p.Start(t.Context(), tk); !errors.Is(err, providers.ErrInvalidTask) {
		t.Fatalf("Start without a template: %v, want ErrInvalidTask", err)
	}
	jobs, err := p.cs.BatchV1().Jobs(p.namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 0 {
		t.Errorf("Jobs after a refused start: %d (%v), want none", len(jobs.Items), err)
	}
	tk.Template = "tpl" // the same ID may be started once refused
	providertest.WaitDone(t, p, providertest.Start(t, p, tk))
}

// TestNotifier: the informer's notice of an end comes without a poll.
func TestNotifier(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	ended := p.Ended()
	h := providertest.Start(t, p, task(t, kubetest.ProgExit, "0"))
	timeout := time.After(providertest.WaitLimit)
	for {
		select {
		case got := <-ended:
			if got == h {
				if st, err := p.Poll(t.Context(), h); err != nil || st.State != providers.StateSucceeded {
					t.Errorf("Poll after the notice = %+v, %v; want succeeded", st, err)
				}
				return
			}
		case <-timeout:
			t.Fatal("no notice of the task's end")
		}
	}
}

// TestNodes reads the fake nodes as pool nodes.
func TestNodes(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{Name: "k8s"})
	nodes, err := p.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]inventory.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
		if n.Labels[NodeLabelProvider] != "k8s" || n.Labels["kubernetes.io/hostname"] != n.Name {
			t.Errorf("%s labels %v", n.Name, n.Labels)
		}
	}
	if _, ok := byName["kwok-tainted-0"]; ok {
		t.Errorf("a node with an untolerated NoSchedule taint is listed")
	}
	cpu := byName["kwok-cpu-0"]
	if cpu.CPUs != 8 || cpu.MemoryMiB != 32<<10 || len(cpu.GPUs) != 0 {
		t.Errorf("kwok-cpu-0 = %+v", cpu)
	}
	gpu := byName["kwok-gpu-0"]
	wantGPUs := []inventory.GPU{
		{UUID: GPUID("kwok-gpu-0", 0), Model: kubetest.FakeGPUProduct, MemoryMiB: 81920, Source: inventory.FromConfig},
		{UUID: GPUID("kwok-gpu-0", 1), Model: kubetest.FakeGPUProduct, MemoryMiB: 81920, Source: inventory.FromConfig},
	}
	if diff := cmp.Diff(wantGPUs, gpu.GPUs); diff != "" {
		t.Errorf("kwok-gpu-0 GPUs (-want +got):\n%s", diff)
	}
	mig := byName["kwok-mig-0"]
	if len(mig.GPUs) != 1 || !mig.GPUs[0].MIGMode || len(mig.GPUs[0].MIG) != 4 || mig.GPUs[0].MIG[2].Profile != kubetest.MIGProfile {
		t.Errorf("kwok-mig-0 GPUs = %+v", mig.GPUs)
	}
	tolerant := newTestProvider(t, Config{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch"}}})
	nodes, err = tolerant.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(nodes, func(n inventory.Node) bool {
		return n.Name == "kwok-tainted-0" && n.Labels[NodeLabelTaints] == "dedicated=batch:NoSchedule"
	}) {
		t.Errorf("with a toleration, the tainted node is not listed (or without its taint label): %v", nodes)
	}

	// Out, and why: a cordoned node (kwok-tainted-0, where no other test
	// runs anything), an untolerated taint.
	cs := kubetest.Shared(t).Client(t)
	cordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
		if _, err := cs.CoreV1().Nodes().Patch(context.Background(), "kwok-tainted-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cordon(true)
	t.Cleanup(func() { cordon(false) })
	for name, tc := range map[string]struct {
		p    *Provider
		want string
	}{"tolerant": {tolerant, "kube: cordoned"}, "intolerant": {p, "kube: cordoned"}} {
		all, err := tc.p.ClusterNodes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(all, func(n ClusterNode) bool { return n.Name == "kwok-tainted-0" })
		if i < 0 || all[i].Out != tc.want {
			t.Errorf("%s: kwok-tainted-0 not out %q: %+v", name, tc.want, all)
		}
		if j := slices.IndexFunc(all, func(n ClusterNode) bool { return n.Name == "kwok-cpu-0" }); j < 0 || all[j].Out != "" {
			t.Errorf("%s: kwok-cpu-0 not listed usable: %+v", name, all)
		}
	}
	cordon(false)
	all, err := p.ClusterNodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(all, func(n ClusterNode) bool { return n.Name == "kwok-tainted-0" }); i < 0 || all[i].Out != "kube: taint dedicated=batch:NoSchedule not tolerated" {
		t.Errorf("uncordoned tainted node: %+v", all)
	}
}

// TestProbe: a reachable cluster passes; an unreachable one fails.
func TestProbe(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{})
	if err := p.Probe(t.Context()); err != nil {
		t.Errorf("Probe: %v", err)
	}
	cfg := kubetest.Shared(t).RESTConfig()
	cfg.Host = "https://127.0.0.1:1"
	down, err := New(Config{REST: cfg, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Probe(t.Context()); err == nil {
		t.Errorf("Probe of an unreachable cluster passed")
	}
}

// TestJobName: names are valid Job names, distinct for distinct IDs.
func TestJobName(t *testing.T) {
	ids := []string{"j-1", "J-1", "j.1", "j_1", "a-", strings.Repeat("x", 128), strings.Repeat("x", 127) + "y",
		"0123456789abcdef0123456789abcdef0123456789abcdef01234567890-1"}
	seen := map[string]string{}
	for _, id := range ids {
		n := JobName(id)
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("JobName(%q) = %q: %v", id, n, errs)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("JobName(%q) = JobName(%q) = %q", id, other, n)
		}
		seen[n] = id
	}
	if got := JobName("job-7-1"); got != "cb-job-7-1" {
		t.Errorf("JobName(job-7-1) = %q, want it readable: cb-job-7-1", got)
	}
}
