// Command kubebench measures computeboard over its Kubernetes provider
// against Jobs created straight through client-go, in the same run, on the
// same control plane. It starts one (internal/kubetest: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok, with
// -nodes fake nodes; the binaries of scripts/k8s-build.sh) and an
// `adapter serve` (-adapter) on the Redis given by -redis whose only
// provider is that cluster. Every job is the same: one Pod that runs
// until deleted (kwok's /kwok/sleep), asking for 100m of CPU and 64 MiB.
// Both sides are timed by one informer of the bench's on every Pod: a
// job is started when its Pod is first seen Running (bound by the
// kube-scheduler, made Running by kwok, as a kubelet would).
//
// One line of key=value pairs per figure:
//
//   - side=direct part=throughput: -n Jobs created in a loop, one after
//     the other, over protobuf as the provider talks, each pinned to a
//     node (required node affinity, round robin) as the provider pins them; create_per_s is -n over the
//     loop's time, started_per_s -n over the time from the first create
//     to the last Pod Running.
//   - side=computeboard part=throughput: -n compute.request entries
//     posted through blackboard.Store.Post by -posters modules at once;
//     started_per_s is -n over the time from the first post to the last
//     Pod Running, with ratio (to direct's started_per_s),
//     overhead_ms_per_job and overhead_pct.
//   - side=direct part=latency: -latency-n Jobs one at a time, from just
//     before Create to the Pod Running (p50, p99).
//   - side=computeboard part=latency: the same from just before
//     Store.Post, with overhead_p50_ms and ratio_p50, and splits at the
//     job record's accepted_at and started_at.
//
// The latency parts alternate, one job of each side at a time (each side
// first half the time), after both throughput parts. For the throughput
// parts, each side's Jobs are deleted (their namespace), and gone, before
// the next side starts: the cascade would otherwise load the control plane
// the next side is measured on. Next to the latencies, post_to_pod and
// create_to_pod split them where the Pod is first seen (before: the
// submission's path to a Job and the Job controller; after: scheduling
// and the node).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/benchutil"
	"github.com/computeboard/computeboard/internal/kubetest"
	"github.com/computeboard/computeboard/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubebench:", err)
		os.Exit(1)
	}
}

type options struct {
	adapter       string
	addr, network string
	n, posters    int
	latencyN      int
	nodes         int
	timeout       time.Duration
}

// idLabel names a Job's Pod for the bench: the direct side's own label,
// the request's entry ID (computeboard.io/request) on computeboard's.
const (
	directLabel  = "kubebench/id"
	requestLabel = "computeboard.io/request"
)

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("kubebench", flag.ContinueOnError)
	fs.StringVar(&o.adapter, "adapter", "", "the adapter binary (required)")
	fs.StringVar(&o.addr, "redis", "127.0.0.1:6379", "Redis address (host:port, or a socket path with -network unix)")
	fs.StringVar(&o.network, "network", "tcp", "tcp or unix")
	fs.IntVar(&o.n, "n", 200, "jobs of the throughput part, per side")
	fs.IntVar(&o.posters, "posters", 4, "concurrent posters, each its own module")
	fs.IntVar(&o.latencyN, "latency-n", 30, "jobs of the latency part, one at a time, per side")
	fs.IntVar(&o.nodes, "nodes", 4, "fake nodes (each takes 1000 Pods)")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.adapter == "" {
		return errors.New("-adapter is required (go build -o DIR/adapter ./cmd/adapter)")
	}
	if o.n < 1 || o.posters < 1 || o.latencyN < 1 || o.nodes < 1 {
		return errors.New("-n, -posters, -latency-n and -nodes must be positive")
	}
	if abs, err := filepath.Abs(o.adapter); err == nil {
		o.adapter = abs
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Network: o.network, Addr: o.addr, PoolSize: 16})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.addr, err)
	}
	var nodes []kubetest.NodeSpec
	for i := range o.nodes {
		nodes = append(nodes, kubetest.NodeSpec{Name: fmt.Sprintf("bench-%d", i), CPU: "1000", Memory: "4Ti", Pods: 1000})
	}
	c, err := kubetest.Start(kubetest.Options{Nodes: nodes})
	if err != nil {
		return err
	}
	defer c.Stop()
	// The direct side talks as the provider does: protobuf.
	rc := c.RESTConfig()
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kubebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	w, err := watchPods(ctx, cs)
	if err != nil {
		return err
	}
	defer w.stop()
	b := &bench{o: o, rdb: rdb, c: c, cs: cs, dir: dir, w: w}

	d, err := b.direct(ctx, stdout)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	return b.computeboard(ctx, stdout, d)
}

type bench struct {
	o   options
	rdb *redis.Client
	c   *kubetest.Cluster
	cs  kubernetes.Interface
	dir string
	w   *podWatch
}

// direct is the direct side's figures.
type direct struct {
	startedPerS float64
}

// namespace creates a namespace for one side.
func (b *bench) namespace(ctx context.Context, name string) (string, func(), error) {
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return "", nil, err
	}
	return name, func() {
		// Gone before the next part starts: a cascade of deletions under
		// way would load the control plane that part measures.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = b.cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		for ctx.Err() == nil {
			if _, err := b.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}, nil
}

// job is a Job as the provider makes it, pinned to node.
func job(id, node string) *batchv1.Job {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	labels := map[string]string{directLabel: id}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "direct-" + id, Labels: labels},
		Spec: batchv1.JobSpec{BackoffLimit: new(int32(0)), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
					}}},
				}},
				Containers: []corev1.Container{{Name: "task", Image: "bench", Command: []string{kubetest.ProgSleep},
					Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}},
			},
		}},
	}
}

func (b *bench) direct(ctx context.Context, stdout io.Writer) (direct, error) {
	ns, drop, err := b.namespace(ctx, "direct")
	if err != nil {
		return direct{}, err
	}
	defer drop()
	create := b.creator(ctx, ns)
	ids := make([]string, b.o.n)
	start := time.Now()
	for i := range ids {
		ids[i] = fmt.Sprintf("t%d", i)
		if err := create(ids[i], i); err != nil {
			return direct{}, err
		}
	}
	created := time.Since(start)
	last, err := b.w.waitAll(ctx, directLabel, ids)
	if err != nil {
		return direct{}, err
	}
	var d direct
	secs := last.Sub(start).Seconds()
	d.startedPerS = float64(b.o.n) / secs
	fmt.Fprintf(stdout, "side=direct part=throughput n=%d nodes=%d create_secs=%.3f create_per_s=%.1f started_secs=%.3f started_per_s=%.1f\n",
		b.o.n, b.o.nodes, created.Seconds(), float64(b.o.n)/created.Seconds(), secs, d.startedPerS)

	return d, nil
}

// creator returns a function that creates Job id in namespace ns, pinned
// to the i-th node (round robin), as the direct side does.
func (b *bench) creator(ctx context.Context, ns string) func(id string, i int) error {
	return func(id string, i int) error {
		_, err := b.cs.BatchV1().Jobs(ns).Create(ctx, job(id, b.c.Nodes[i%len(b.c.Nodes)].Name), metav1.CreateOptions{})
		return err
	}
}

func (b *bench) computeboard(ctx context.Context, stdout io.Writer, d direct) error {
	ns, drop, err := b.namespace(ctx, "computeboard")
	if err != nil {
		return err
	}
	defer drop()
	board, store, err := benchutil.NewBoard(b.rdb, "kubebench")
	if err != nil {
		return err
	}
	defer benchutil.DropBoard(b.rdb, store.Keys())
	ad, err := b.startAdapter(ctx, board, ns)
	if err != nil {
		return err
	}
	defer ad.Stop()
	data, _ := json.Marshal(map[string]any{"template": "sleep",
		"resource_requirements": map[string]any{"cpu_cores": 0.1, "memory": 0.0625}})

	start := time.Now()
	ids, err := benchutil.PostSpread(ctx, store, b.o.n, b.o.posters, data)
	if err != nil {
		return err
	}
	posted := time.Since(start)
	last, err := b.w.waitAll(ctx, requestLabel, ids)
	if err != nil {
		return fmt.Errorf("%w; adapter log: %s", err, ad.LogTail())
	}
	secs := last.Sub(start).Seconds()
	perS := float64(b.o.n) / secs
	fmt.Fprintf(stdout, "side=computeboard part=throughput n=%d nodes=%d posters=%d post_secs=%.3f started_secs=%.3f started_per_s=%.1f direct_started_per_s=%.1f ratio=%.3f overhead_ms_per_job=%.1f overhead_pct=%.1f\n",
		b.o.n, b.o.nodes, b.o.posters, posted.Seconds(), secs, perS, d.startedPerS, perS/d.startedPerS, 1000/perS-1000/d.startedPerS,
		100*(d.startedPerS/perS-1))

	// The latency part alternates the sides, one job at a time (the
	// direct side's Jobs in a namespace of their own, alive meanwhile), so
	// that both meet the control plane in the same state: run one after
	// the other, a drift of the control plane between them (etcd, the
	// namespaces' deletions) showed as either side's overhead.
	dns, dropD, err := b.namespace(ctx, "direct-latency")
	if err != nil {
		return err
	}
	defer dropD()
	create := b.creator(ctx, dns)
	var dLats, dPods, dPodToRunning []time.Duration
	lats := make([]time.Duration, 0, b.o.latencyN)
	pods := make([]time.Duration, 0, b.o.latencyN)
	// Splits of post→Pod at the job record's accepted_at (the intake's
	// script) and started_at (the agent's compare-and-set to running, just
	// before the Job's Create), and the Pod's own wait for Running.
	var toAccepted, toRunning, runningToPod, podToRunning []time.Duration
	direct1 := func(i int) error {
		id := fmt.Sprintf("l%d", i)
		t0 := time.Now()
		if err := create(id, i); err != nil {
			return err
		}
		at, err := b.w.waitAll(ctx, directLabel, []string{id})
		if err != nil {
			return err
		}
		pod := b.w.createdAt(directLabel, id)
		dLats = append(dLats, at.Sub(t0))
		dPods = append(dPods, pod.Sub(t0))
		dPodToRunning = append(dPodToRunning, at.Sub(pod))
		return nil
	}
	post1 := func() error {
		t0 := time.Now()
		id, err := store.Post(ctx, blackboard.NewEntry(blackboard.RequestTopic, "latency", data))
		if err != nil {
			return err
		}
		at, err := b.w.waitAll(ctx, requestLabel, []string{id})
		if err != nil {
			return fmt.Errorf("%w; adapter log: %s", err, ad.LogTail())
		}
		pod := b.w.createdAt(requestLabel, id)
		lats = append(lats, at.Sub(t0))
		pods = append(pods, pod.Sub(t0))
		rec, err := b.rdb.HMGet(ctx, store.Keys().Job(wire.JobID(id)), "accepted_at", "started_at").Result()
		if err != nil {
			return fmt.Errorf("job record of %s: %w", id, err)
		}
		accepted, running := benchutil.EpochNS(rec[0]), benchutil.EpochNS(rec[1])
		if accepted == 0 || running == 0 {
			return fmt.Errorf("job record of %s lacks accepted_at or started_at: %v", id, rec)
		}
		toAccepted = append(toAccepted, time.Duration(accepted-t0.UnixNano()))
		toRunning = append(toRunning, time.Duration(running-accepted))
		runningToPod = append(runningToPod, time.Duration(pod.UnixNano()-running))
		podToRunning = append(podToRunning, at.Sub(pod))
		return nil
	}
	for i := range b.o.latencyN {
		first, second := func() error { return direct1(i) }, post1
		if i%2 == 1 { // each side goes first half the time
			first, second = second, first
		}
		if err := first(); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		if err := second(); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	ms50 := func(ds []time.Duration) float64 { return benchutil.Millis(benchutil.Percentile(ds, 50)) }
	dP50 := benchutil.Percentile(dLats, 50)
	fmt.Fprintf(stdout, "side=direct part=latency n=%d create_to_started_p50_ms=%.1f create_to_started_p99_ms=%.1f create_to_pod_p50_ms=%.1f pod_to_running_p50_ms=%.1f\n",
		b.o.latencyN, benchutil.Millis(dP50), benchutil.Millis(benchutil.Percentile(dLats, 99)), ms50(dPods), ms50(dPodToRunning))
	p50 := benchutil.Percentile(lats, 50)
	fmt.Fprintf(stdout, "side=computeboard part=latency n=%d post_to_started_p50_ms=%.1f post_to_started_p99_ms=%.1f direct_p50_ms=%.1f overhead_p50_ms=%.1f ratio_p50=%.3f post_to_pod_p50_ms=%.1f direct_create_to_pod_p50_ms=%.1f"+
		" post_to_accepted_p50_ms=%.1f accepted_to_running_p50_ms=%.1f running_to_pod_p50_ms=%.1f pod_to_running_p50_ms=%.1f direct_pod_to_running_p50_ms=%.1f\n",
		b.o.latencyN, benchutil.Millis(p50), benchutil.Millis(benchutil.Percentile(lats, 99)), benchutil.Millis(dP50), benchutil.Millis(p50-dP50), float64(p50)/float64(dP50),
		ms50(pods), ms50(dPods),
		ms50(toAccepted), ms50(toRunning), ms50(runningToPod), ms50(podToRunning), ms50(dPodToRunning))
	return nil
}

// ---- the Pods' starts ----

// podWatch records when each Pod is first seen Running, by the value of
// each of its labels (label key → value → time).
type podWatch struct {
	mu      sync.Mutex
	running map[string]map[string]time.Time // guarded by mu
	created map[string]map[string]time.Time // guarded by mu: when first seen at all
	changed chan struct{}                   // one slot: something was recorded
	stop    func()
}

func watchPods(ctx context.Context, cs kubernetes.Interface) (*podWatch, error) {
	w := &podWatch{running: map[string]map[string]time.Time{}, created: map[string]map[string]time.Time{}, changed: make(chan struct{}, 1)}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Pods().Informer()
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		for _, key := range []string{directLabel, requestLabel} {
			if v := pod.Labels[key]; v != "" {
				if w.created[key] == nil {
					w.created[key] = map[string]time.Time{}
				}
				if _, ok := w.created[key][v]; !ok {
					w.created[key][v] = now
				}
			}
		}
		if pod.Status.Phase != corev1.PodRunning {
			w.mu.Unlock()
			return
		}
		for _, key := range []string{directLabel, requestLabel} {
			if v := pod.Labels[key]; v != "" {
				if w.running[key] == nil {
					w.running[key] = map[string]time.Time{}
				}
				if _, ok := w.running[key][v]; !ok {
					w.running[key][v] = now
				}
			}
		}
		w.mu.Unlock()
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(ctx)
	f.Start(ictx.Done())
	w.stop = func() { cancel(); f.Shutdown() }
	for _, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			w.stop()
			return nil, errors.New("pod informer not synced")
		}
	}
	return w, nil
}

// createdAt is when the Pod of id (the value of label key) was first seen.
func (w *podWatch) createdAt(key, id string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.created[key][id]
}

// waitAll waits until the Pod of every id (the value of label key) is
// Running and returns when the last was first seen so.
func (w *podWatch) waitAll(ctx context.Context, key string, ids []string) (time.Time, error) {
	for {
		w.mu.Lock()
		var last time.Time
		missing := 0
		for _, id := range ids {
			at, ok := w.running[key][id]
			if !ok {
				missing++
			} else if at.After(last) {
				last = at
			}
		}
		w.mu.Unlock()
		if missing == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d jobs not started: %w", missing, len(ids), ctx.Err())
		case <-w.changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ---- the adapter ----

// startAdapter starts an adapter whose only provider is the cluster, its
// Jobs in namespace ns, and waits until it is the scheduler and sees the
// cluster's nodes.
func (b *bench) startAdapter(ctx context.Context, board, ns string) (*benchutil.Adapter, error) {
	redisURL := benchutil.RedisURL(b.o.network, b.o.addr)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "board: %q\nredis: %q\nlisten: 127.0.0.1:0\nwork_dir: %q\n", board, redisURL, filepath.Join(b.dir, "jobs"))
	fmt.Fprintf(&cfg, "templates:\n  sleep: {command: [%s], image: bench}\n", kubetest.ProgSleep)
	fmt.Fprintf(&cfg, "broker:\n  module_rate: -1\n  module_max_waiting: -1\n")
	fmt.Fprintf(&cfg, "providers:\n  - name: k8s\n    kind: kube\n    kube: {kubeconfig: %q, namespace: %s, work_dir: %q}\n",
		b.c.Kubeconfig, ns, filepath.Join(b.dir, "kube"))
	cfgPath := filepath.Join(b.dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return nil, err
	}
	return benchutil.StartAdapter(ctx, b.o.adapter, cfgPath, filepath.Join(b.dir, "adapter.log"), func(nodes string) bool {
		return !slices.ContainsFunc(b.c.Nodes, func(n kubetest.NodeSpec) bool { return !strings.Contains(nodes, `"`+n.Name+`"`) })
	})
}
