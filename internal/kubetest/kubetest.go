// Package kubetest starts a real Kubernetes control plane for a test
// package: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and kwok, which plays the kubelet of fake nodes (some with GPUs, one
// with MIG devices), on free loopback ports under a temp dir, and stops it
// when the package's tests end (the apiserver before etcd).
//
// Use it from a one-line TestMain:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//
// and in tests:
//
//	c := kubetest.Shared(t)
//	ns := c.Namespace(t)    // a fresh namespace, deleted when t ends
//	cfg := c.RESTConfig()   // or c.Kubeconfig, a file
//
// The binaries are built from the Go module proxy by scripts/k8s-build.sh
// (`make deps` runs it) into BinDir. kwok runs no containers: a Pod's
// first command word says what it does (the Prog constants; stages.yaml).
//
// If a binary is missing the package fails with the command that builds
// them; with CB_KUBE_SKIP=1 its Kubernetes tests skip instead.
package kubetest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/computeboard/computeboard/internal/deathsig"
)

// SkipEnv, set to 1, makes missing binaries skip the tests that need the
// control plane instead of failing them.
const SkipEnv = "CB_KUBE_SKIP"

// BinEnv names the directory of the binaries, overriding the default.
const BinEnv = "CB_K8S_BIN"

// Version is the Kubernetes release the binaries are built at
// (scripts/k8s-build.sh's K8S_VERSION).
const Version = "1.37.2"

// Programs kwok's stages "run": a Pod's first container's command[0]
// (see stages.yaml). Any other program exits 0 at once.
const (
	ProgSleep = "/kwok/sleep" // runs until the Pod is deleted
	ProgRun   = "/kwok/run"   // args[0] a duration ("3s"): runs that long, then exits 0
	ProgExit  = "/kwok/exit"  // args[0] an exit code: exits with it at once
	ProgOOM   = "/kwok/oom"   // killed for going over its memory at once: OOMKilled, exit code 137
)

// FakeGPUProduct is the nvidia.com/gpu.product label of the GPU nodes.
const FakeGPUProduct = "NVIDIA-FAKE-80GB"

// MIGProfile is the MIG profile of the MIG node's devices
// (nvidia.com/mig-1g.10gb).
const MIGProfile = "1g.10gb"

//go:embed stages.yaml
var stages []byte

// binaries the control plane needs.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// BinDir is where scripts/k8s-build.sh puts the binaries: $CB_K8S_BIN, or
// ${XDG_CACHE_HOME:-$HOME/.cache}/computeboard/k8s/v<Version>/bin.
func BinDir() string {
	if d := os.Getenv(BinEnv); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "computeboard", "k8s", "v"+Version, "bin")
}

// installHint says how to get the binaries.
func installHint(missing string) string {
	return fmt.Sprintf("kubetest: %s not found in %s: build the Kubernetes control plane with `make deps` "+
		"(scripts/k8s-build.sh, about 10 minutes the first time), or set %s=1 to skip the Kubernetes tests", missing, BinDir(), SkipEnv)
}

// NodeSpec is one fake node.
type NodeSpec struct {
	Name   string
	CPU    string            // allocatable cores ("16")
	Memory string            // allocatable memory ("64Gi")
	Pods   int               // allocatable Pods (default 110)
	GPUs   int               // nvidia.com/gpu
	MIG    map[string]int    // MIG profile → nvidia.com/mig-<profile> count
	Labels map[string]string // besides kubernetes.io/hostname and type=kwok
	Taints []corev1.Taint
}

// TaintDedicated is the taint of the node kwok-tainted-0 of DefaultNodes.
func TaintDedicated() corev1.Taint {
	return corev1.Taint{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}
}

// DefaultNodes are the nodes a cluster gets when Options.Nodes is empty:
// two without GPUs, two with two GPUs each (labelled
// nvidia.com/gpu.product=FakeGPUProduct), one with four MIG devices, and
// one tainted TaintDedicated.
func DefaultNodes() []NodeSpec {
	gpu := map[string]string{"nvidia.com/gpu.product": FakeGPUProduct, "nvidia.com/gpu.memory": "81920"}
	return []NodeSpec{
		{Name: "kwok-cpu-0", CPU: "8", Memory: "32Gi"},
		{Name: "kwok-cpu-1", CPU: "8", Memory: "32Gi"},
		{Name: "kwok-gpu-0", CPU: "16", Memory: "64Gi", GPUs: 2, Labels: gpu},
		{Name: "kwok-gpu-1", CPU: "16", Memory: "64Gi", GPUs: 2, Labels: gpu},
		{Name: "kwok-mig-0", CPU: "8", Memory: "32Gi", MIG: map[string]int{MIGProfile: 4},
			Labels: map[string]string{"nvidia.com/gpu.product": FakeGPUProduct}},
		{Name: "kwok-tainted-0", CPU: "4", Memory: "16Gi", Taints: []corev1.Taint{TaintDedicated()}},
	}
}

// Options configure a cluster.
type Options struct {
	// Nodes are the fake nodes (default DefaultNodes).
	Nodes []NodeSpec
	// Dir holds everything. Default: a new temp dir, removed by Stop.
	Dir string
}

// Cluster is one running control plane.
type Cluster struct {
	Dir        string // data, certificates, logs, kubeconfig
	Kubeconfig string // a kubeconfig file for clients (kubectl, the adapter's config)
	Host       string // the apiserver's URL, https://127.0.0.1:<port>
	Token      string // a bearer token of a system:masters user
	Nodes      []NodeSpec

	ownDir bool
	mu     sync.Mutex
	procs  []*proc // in start order; guarded by mu
}

// proc is one running component.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
}

// The package's cluster, started by Main: set once before any test runs,
// then only read. sharedErr says why there is none.
var (
	shared    *Cluster
	sharedErr error
)

// Main starts a cluster, runs the package's tests and stops the cluster.
// Without the binaries it exits with the build command, unless SkipEnv
// is set: the tests then run and Shared skips each one that needs the
// control plane.
func Main(m *testing.M) {
	c, err := Start(Options{})
	if err != nil {
		if os.Getenv(SkipEnv) != "1" {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		sharedErr = err
	}
	shared = c
	code := m.Run()
	if c != nil {
		c.Stop()
	}
	os.Exit(code)
}

// Shared returns the package's cluster (started by Main), or skips the
// test when the binaries are missing and SkipEnv is set.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	switch {
	case shared != nil:
		return shared
	case sharedErr != nil:
		t.Skipf("%v (%s=1)", sharedErr, SkipEnv)
	default:
		t.Fatal("kubetest: call kubetest.Main(m) from TestMain first")
	}
	return nil
}

// StartT starts a dedicated cluster for one test and stops it when the
// test ends.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(opts)
	if err != nil {
		if os.Getenv(SkipEnv) == "1" {
			t.Skipf("%v (%s=1)", err, SkipEnv)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Start launches the control plane and waits until every node is Ready.
func Start(opts Options) (*Cluster, error) {
	bin := BinDir()
	for _, b := range binaries {
		if fi, err := os.Stat(filepath.Join(bin, b)); err != nil || fi.Mode()&0o111 == 0 {
			return nil, errors.New(installHint(b))
		}
	}
	if len(opts.Nodes) == 0 {
		opts.Nodes = DefaultNodes()
	}
	c := &Cluster{Dir: opts.Dir, Nodes: opts.Nodes}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "kubetest-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.ownDir = d, true
	}
	// A port found free may be taken before a component binds it: retry.
	var err error
	for range 3 {
		if err = c.launch(bin); err == nil {
			break
		}
		c.stopProcs()
	}
	if err == nil {
		err = c.addNodes()
	}
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, c.LogTail())
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) launch(bin string) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdPort, peerPort, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	run := filepath.Join(c.Dir, "run"+strconv.Itoa(apiPort))
	if err := os.MkdirAll(filepath.Join(run, "certs"), 0o700); err != nil {
		return err
	}
	if err := writeKeys(run); err != nil {
		return err
	}
	c.Token = randomHex(16)
	if err := os.WriteFile(filepath.Join(run, "tokens.csv"), []byte(c.Token+",kubetest-admin,uid-kubetest,system:masters\n"), 0o600); err != nil {
		return err
	}
	c.Host = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: kubetest, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: kubetest, user: {token: %q}}]
contexts: [{name: kubetest, context: {cluster: kubetest, user: kubetest}}]
current-context: kubetest
`, c.Host, c.Token)
	if err := os.WriteFile(c.Kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	stagesFile := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, stages, 0o644); err != nil {
		return err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	if err := c.start(bin, "etcd", "--name", "kubetest", "--data-dir", filepath.Join(run, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "kubetest="+peerURL, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	if err := c.waitHTTP("etcd", etcdURL+"/health", "", func(b []byte) bool { return bytes.Contains(b, []byte(`"health":"true"`)) }); err != nil {
		return err
	}
	if err := c.start(bin, "kube-apiserver", "--etcd-servers="+etcdURL, "--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort), "--advertise-address=127.0.0.1",
		// 1.37 refuses a loopback advertise address with the endpoint
		// reconciler; nothing here needs the kubernetes Service's endpoints.
		"--endpoint-reconciler-type=none", "--cert-dir="+filepath.Join(run, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(run, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(run, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=AlwaysAllow",
		"--token-auth-file="+filepath.Join(run, "tokens.csv"),
		"--disable-admission-plugins=ServiceAccount"); err != nil {
		return err
	}
	if err := c.waitHTTP("kube-apiserver", c.Host+"/readyz", c.Token, func(b []byte) bool { return string(b) == "ok" }); err != nil {
		return err
	}
	kcArgs := []string{"--kubeconfig=" + c.Kubeconfig, "--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--secure-port=0"}
	if err := c.start(bin, "kube-controller-manager", append(kcArgs,
		"--service-account-private-key-file="+filepath.Join(run, "sa.key"),
		"--use-service-account-credentials=false", "--kube-api-qps=200", "--kube-api-burst=400",
		"--concurrent-job-syncs=20")...); err != nil {
		return err
	}
	if err := c.start(bin, "kube-scheduler", kcArgs...); err != nil {
		return err
	}
	return c.start(bin, "kwok", "--kubeconfig="+c.Kubeconfig, "-c", stagesFile,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-ip=10.0.0.1", "--cidr=10.0.0.0/24", "--server-address=127.0.0.1:"+strconv.Itoa(kwokPort))
}

// RESTConfig returns a client config for the cluster, with client-side
// rate limits high enough for tests.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{Host: c.Host, BearerToken: c.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
}

// Client returns a clientset for the cluster.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace creates a namespace of its own for t and deletes it (with
// everything in it) when t ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	cs := c.Client(t)
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kt-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// addNodes registers the fake nodes (annotated for kwok) and waits until
// kwok has made each Ready and the node lifecycle controller has lifted
// its node.kubernetes.io/not-ready taint (until then nothing is
// scheduled there).
func (c *Cluster) addNodes() error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, ns := range c.Nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        ns.Name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"kubernetes.io/hostname": ns.Name, "type": "kwok"},
		}, Spec: corev1.NodeSpec{Taints: ns.Taints}}
		for k, v := range ns.Labels {
			n.Labels[k] = v
		}
		res := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(ns.CPU),
			corev1.ResourceMemory: resource.MustParse(ns.Memory),
			corev1.ResourcePods:   *resource.NewQuantity(int64(cmp.Or(ns.Pods, 110)), resource.DecimalSI),
		}
		if ns.GPUs > 0 {
			res["nvidia.com/gpu"] = *resource.NewQuantity(int64(ns.GPUs), resource.DecimalSI)
		}
		for profile, k := range ns.MIG {
			res[corev1.ResourceName("nvidia.com/mig-"+profile)] = *resource.NewQuantity(int64(k), resource.DecimalSI)
		}
		n.Status = corev1.NodeStatus{Capacity: res, Allocatable: res}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("kubetest: create node %s: %w", ns.Name, err)
		}
	}
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, n := range nodes.Items {
				if schedulable(&n) {
					ready++
				}
			}
		}
		if err == nil && ready == len(c.Nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %d of %d nodes Ready after 60s (%v)", ready, len(c.Nodes), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// schedulable reports whether n is Ready and carries none of the taints
// Kubernetes puts on a node it cannot use (node.kubernetes.io/...).
func schedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// start runs a component in the foreground as a child that dies with
// this process, its output in <Dir>/<name>.log.
func (c *Cluster) start(bin, name string, args ...string) error {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	out, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := deathsig.Start(cmd); err != nil {
		return fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }() // reaps it; ends with the process
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// waitHTTP waits up to 60 s until url answers 200 with a body ok accepts,
// failing early when the component it belongs to exits.
func (c *Cluster) waitHTTP(name, url, token string, ok func([]byte) bool) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if p := c.proc(name); p != nil {
			select {
			case <-p.done:
				return fmt.Errorf("kubetest: %s exited: %v", name, p.cmd.ProcessState)
			default:
			}
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && ok(bytes.TrimSpace(b)) {
				return nil
			}
			last = fmt.Sprintf("%s: %.200s", resp.Status, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kubetest: %s not ready after 60s: %s", name, last)
}

func (c *Cluster) proc(name string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// LogTail returns the last lines of each component's log, for failure
// messages.
func (c *Cluster) LogTail() string {
	var b strings.Builder
	for _, name := range binaries {
		data, err := os.ReadFile(filepath.Join(c.Dir, name+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// Stop stops the components, newest first (kwok, the scheduler and the
// controller manager, then the apiserver, and etcd only once the
// apiserver is gone: otherwise it lingers, retrying etcd), and removes the
// directory unless the caller gave it.
func (c *Cluster) Stop() {
	c.stopProcs()
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}

func (c *Cluster) stopProcs() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// writeKeys writes the service-account signing key pair.
func writeKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
