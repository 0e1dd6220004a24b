// Package slurmtest starts a real single-node Slurm (munged, slurmctld,
// slurmd) for a test package, on free loopback ports under a temp dir, and
// stops it when the package's tests end.
//
// Use it from a one-line TestMain:
//
//	func TestMain(m *testing.M) { slurmtest.Main(m) }
//
// and in tests:
//
//	c := slurmtest.Shared(t) // c.Conf is the SLURM_CONF clients need
//
// Each instance has its own cluster name, node name (slurmd -N), ports,
// state, spool and log directories, so packages that start Slurm at the
// same time do not meet; only munged is shared (/run/munge, started here if
// it is not running, and left running). The daemons run in the
// foreground as children of the test binary (-D), so none outlives it.
//
// Every cluster accepts JWT besides munge (AuthAltTypes=auth/jwt, a key
// of its own), and with Options.REST runs slurmrestd (-a rest_auth/jwt,
// as nobody: it refuses SlurmUser, root here) on a free loopback port:
// Cluster.RESTURL. Main's shared cluster has it.
//
// If the Slurm binaries are missing the package fails with the install
// command; with CB_SLURM_SKIP=1 its Slurm tests skip instead. The daemons
// need root.
package slurmtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/deathsig"
)

// SkipEnv, set to 1, makes a missing Slurm skip the tests that need it
// instead of failing them.
const SkipEnv = "CB_SLURM_SKIP"

// InstallHint is printed when a Slurm binary cannot be found.
const InstallHint = "slurm not found: install it with `sudo DEBIAN_FRONTEND=noninteractive apt-get install -y munge slurmctld slurmd slurm-client slurmrestd` " +
	"(or run `make test`, which does it for you), or set " + SkipEnv + "=1 to skip the Slurm tests"

// FakeGPUType is the GRES type of the fake GPUs a cluster offers
// (Options.GPUs): gres.conf backs them with /dev/null-like files, so jobs
// get CUDA_VISIBLE_DEVICES but no device.
const FakeGPUType = "fake"

// Binaries the harness needs.
var binaries = []string{"munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol"}

// restBinary is what Options.REST needs besides.
const restBinary = "slurmrestd"

// RESTUser is the user slurmrestd runs as.
const RESTUser = "nobody"

// shared is the per-package cluster started by Main; set once before any
// test runs, then only read. sharedErr says why there is none.
var (
	shared    *Cluster
	sharedErr error
)

// Main starts a cluster, runs the package's tests and stops the cluster.
// Without Slurm it exits with InstallHint, unless SkipEnv is set: the
// tests then run and Shared skips each one that needs Slurm.
func Main(m *testing.M) {
	c, err := Start(Options{GPUs: 2, REST: true})
	if err != nil {
		if os.Getenv(SkipEnv) != "1" {
			fmt.Fprintln(os.Stderr, "slurmtest:", err)
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
// test when Slurm is missing and SkipEnv is set.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	switch {
	case shared != nil:
		return shared
	case sharedErr != nil:
		t.Skipf("slurmtest: %v (%s=1)", sharedErr, SkipEnv)
	default:
		t.Fatal("slurmtest: call slurmtest.Main(m) from TestMain first")
	}
	return nil
}

// StartT starts a dedicated cluster for one test and stops it when the
// test ends, logging the daemons' last lines if the test failed.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(opts)
	if err != nil {
		if os.Getenv(SkipEnv) == "1" {
			t.Skipf("slurmtest: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("slurmtest: the cluster's logs\n%s", c.LogTail())
		}
		c.Stop()
	})
	return c
}

// Options configure a cluster.
type Options struct {
	// CPUs and MemoryMiB are what the node declares (slurmd believes the
	// configuration, SlurmdParameters=config_overrides, so a small machine
	// can offer more slots than it has cores). Defaults 32 and 8192.
	CPUs      int
	MemoryMiB int
	// GPUs is how many fake GPUs (GRES gpu:FakeGPUType) the node offers.
	GPUs int
	// Cgroup turns on Slurm's cgroup v1 plugins (proctrack/cgroup,
	// task/cgroup with ConstrainRAMSpace), so a job over its --mem ends
	// OUT_OF_MEMORY. Needs cgroup v1 memory and cpuset controllers.
	Cgroup bool
	// REST starts slurmrestd too (Cluster.RESTURL).
	REST bool
	// Dir holds everything. Default: a new temp dir, removed by Stop.
	Dir string
}

// Cluster is one running single-node Slurm.
type Cluster struct {
	Dir        string // state, spool, logs, slurm.conf
	Conf       string // the slurm.conf path: SLURM_CONF for clients
	Name       string // ClusterName
	Node       string // NodeName (slurmd -N)
	Partition  string // the only partition, default for jobs
	CtldPort   int
	SlurmdPort int
	// RESTURL is slurmrestd's ("http://127.0.0.1:<port>"), with
	// Options.REST; it takes JWTs (X-SLURM-USER-TOKEN), which
	// `scontrol token username=<user>` makes (root only for others).
	RESTURL string

	opts    Options
	ownDir  bool
	mu      sync.Mutex
	daemons []*exec.Cmd // slurmctld, slurmd; guarded by mu
}

// Start launches munged (if needed), slurmctld and slurmd (and, with
// Options.REST, slurmrestd), and waits until the node is idle, with no
// flag such as NOT_RESPONDING, and slurmrestd listens.
func Start(opts Options) (*Cluster, error) {
	need := binaries
	if opts.REST {
		need = append(slices.Clip(need), restBinary)
	}
	for _, b := range need {
		if lookPath(b) == "" {
			return nil, errors.New(InstallHint)
		}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("slurmtest: the Slurm daemons need root (slurmd runs jobs as their users)")
	}
	if opts.CPUs == 0 {
		opts.CPUs = 32
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 8192
	}
	if err := ensureMunge(); err != nil {
		return nil, err
	}
	id := randomHex(4)
	c := &Cluster{opts: opts, Dir: opts.Dir, Name: "cb" + id, Node: "cbn" + id, Partition: "cbtest"}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "slurmtest-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.ownDir = d, true
	}
	// Jobs of other users run their script from the spool directory.
	if err := os.Chmod(c.Dir, 0o755); err != nil {
		return nil, err
	}
	for _, sub := range []string{"state", "spool", "log"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	// A port found free may be taken before the daemon binds it: retry.
	var err error
	for range 3 {
		if err = c.launch(); err == nil {
			return c, nil
		}
		c.stopDaemons()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
	return nil, err
}

// Env returns the environment a Slurm client needs: SLURM_CONF.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// Command returns a Slurm client command (sbatch, squeue, ...) aimed at
// this cluster.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, lookPath(name), args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	return cmd
}

// LogTail returns the last lines of the daemons' logs, for failure messages.
func (c *Cluster) LogTail() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log", "slurmrestd.out"} {
		data, _ := os.ReadFile(filepath.Join(c.Dir, "log", f))
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", f, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

func (c *Cluster) launch() error {
	var err error
	if c.CtldPort, err = freePort(); err != nil {
		return err
	}
	if c.SlurmdPort, err = freePort(); err != nil {
		return err
	}
	if err := c.writeConf(); err != nil {
		return err
	}
	if err := c.daemon("slurmctld", "-D", "-f", c.Conf); err != nil {
		return err
	}
	if err := c.daemon("slurmd", "-D", "-f", c.Conf, "-N", c.Node); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		state, err := c.nodeState()
		if err == nil && (state == "idle" || state == "mixed" || state == "allocated") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slurmtest: node %s not idle after 30s (state %q, %v)\n%s", c.Node, state, err, c.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !c.opts.REST {
		return nil
	}
	return c.startREST()
}

// startREST starts slurmrestd on a free loopback port, as RESTUser (it
// refuses to run as SlurmUser), taking JWTs only, and waits until it
// accepts connections.
func (c *Cluster) startREST() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// SLURM_JWT=daemon: slurmrestd's own auth/jwt plugin takes each
	// request's token, not one from its environment.
	if err := c.daemonEnv("slurmrestd", []string{"SLURM_JWT=daemon"}, "-f", c.Conf, "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38", "-u", RESTUser, addr); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			c.RESTURL = "http://" + addr
			return nil
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(c.Dir, "log", "slurmrestd.out"))
			return fmt.Errorf("slurmtest: slurmrestd not listening on %s after 15s: %v\n%s", addr, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) writeConf() error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	host, _, _ = strings.Cut(host, ".")
	c.Conf = filepath.Join(c.Dir, "slurm.conf")
	d := c.Dir
	// The JWT key: SlurmUser's (root) alone.
	if err := os.WriteFile(filepath.Join(d, "jwt.key"), []byte(randomHex(32)), 0o600); err != nil {
		return err
	}
	proctrack, task, gather, params := "proctrack/linuxproc", "task/none", "jobacct_gather/linux", "CR_Core"
	if c.opts.Cgroup {
		proctrack, task, gather, params = "proctrack/cgroup", "task/cgroup,task/affinity", "jobacct_gather/cgroup", "CR_Core_Memory\nDefMemPerCPU=64"
	}
	gres := ""
	if c.opts.GPUs > 0 {
		gres = fmt.Sprintf(" Gres=gpu:%s:%d", FakeGPUType, c.opts.GPUs)
	}
	conf := fmt.Sprintf(`# slurmtest: one node, no accounting; generated
ClusterName=%[1]s
SlurmctldHost=%[2]s(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=%[3]d
SlurmdPort=%[4]d
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/log/slurmctld.log
SlurmdLogFile=%[5]s/log/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=%[6]s
TaskPlugin=%[7]s
JobAcctGatherType=%[8]s
SelectType=select/cons_tres
SelectTypeParameters=%[9]s
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
KillWait=2
GresTypes=gpu
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=%[5]s/jwt.key
NodeName=%[10]s NodeHostname=%[2]s NodeAddr=127.0.0.1 CPUs=%[11]d RealMemory=%[12]d%[13]s State=UNKNOWN
PartitionName=%[14]s Nodes=%[10]s Default=YES MaxTime=INFINITE State=UP
`, c.Name, host, c.CtldPort, c.SlurmdPort, d, proctrack, task, gather, params,
		c.Node, c.opts.CPUs, c.opts.MemoryMiB, gres, c.Partition)
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		return err
	}
	var gresConf strings.Builder
	for i := range c.opts.GPUs {
		// Any character device will do: Slurm only hands out its index.
		fmt.Fprintf(&gresConf, "NodeName=%s Name=gpu Type=%s File=%s\n", c.Node, FakeGPUType, []string{"/dev/zero", "/dev/full", "/dev/null", "/dev/random", "/dev/urandom"}[i%5])
	}
	if err := os.WriteFile(filepath.Join(d, "gres.conf"), []byte(gresConf.String()), 0o644); err != nil {
		return err
	}
	cg := "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainCores=yes\nConstrainRAMSpace=yes\nConstrainSwapSpace=no\n"
	return os.WriteFile(filepath.Join(d, "cgroup.conf"), []byte(cg), 0o644)
}

// daemon starts a Slurm daemon in the foreground as a child that dies
// with this process.
func (c *Cluster) daemon(name string, args ...string) error {
	return c.daemonEnv(name, nil, args...)
}

// daemonEnv is daemon with env added to the environment.
func (c *Cluster) daemonEnv(name string, env []string, args ...string) error {
	cmd := exec.Command(lookPath(name), args...)
	cmd.Env = slices.Concat(os.Environ(), c.Env(), env)
	out, err := os.Create(filepath.Join(c.Dir, "log", name+".out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := deathsig.Start(cmd); err != nil {
		return fmt.Errorf("slurmtest: start %s: %w", name, err)
	}
	c.mu.Lock()
	c.daemons = append(c.daemons, cmd)
	c.mu.Unlock()
	return nil
}

// nodeState reads the node's state and flags from sinfo --json.
func (c *Cluster) nodeState() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "sinfo", "--json").Output()
	if err != nil {
		return "", err
	}
	var v struct {
		Nodes []struct {
			Name  string   `json:"name"`
			State string   `json:"state"`
			Flags []string `json:"state_flags"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return "", err
	}
	for _, n := range v.Nodes {
		if n.Name == c.Node {
			// Flags such as NOT_RESPONDING, which slurmctld clears a
			// moment after slurmd registers, follow: "idle+NOT_RESPONDING".
			return strings.Join(append([]string{n.State}, n.Flags...), "+"), nil
		}
	}
	return "", fmt.Errorf("node %s not in sinfo", c.Node)
}

// Stop cancels every job, stops the daemons and removes the directory
// unless it was given by the caller. Cgroup directories Slurm leaves
// behind (Options.Cgroup) are removed too.
func (c *Cluster) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Jobs' slurmstepd processes are not the daemons' children: end them
	// through Slurm before the daemons go.
	_ = c.Command(ctx, "scancel", "--partition="+c.Partition).Run()
	for ctx.Err() == nil && c.jobsAlive(ctx) {
		time.Sleep(100 * time.Millisecond)
	}
	c.stopDaemons()
	if c.opts.Cgroup {
		removeCgroups("slurm_" + c.Node)
	}
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// jobsAlive reports whether a job has not ended (false on error).
func (c *Cluster) jobsAlive(ctx context.Context) bool {
	out, err := c.Command(ctx, "squeue", "--json").Output()
	if err != nil {
		return false
	}
	var v struct {
		Jobs []struct {
			State string `json:"job_state"`
		} `json:"jobs"`
	}
	if json.Unmarshal(out, &v) != nil {
		return false
	}
	for _, j := range v.Jobs {
		switch j.State {
		case "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT":
			return true
		}
	}
	return false
}

func (c *Cluster) stopDaemons() {
	c.mu.Lock()
	daemons := c.daemons
	c.daemons = nil
	c.mu.Unlock()
	// slurmd first: it reports to slurmctld on the way out.
	for i := len(daemons) - 1; i >= 0; i-- {
		cmd := daemons[i]
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// removeCgroups removes the cgroup v1 directories named name (and below)
// that Slurm's cgroup plugins leave behind, deepest first.
func removeCgroups(name string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// mungeLock serialises the check-and-start of munged between test
// processes.
const mungeLock = "/tmp/cb-slurmtest-munge.lock"

// ensureMunge makes sure a munged answers on /run/munge: a running one is
// reused; otherwise one is started (as the munge user) and left running
// for whoever else needs it.
func ensureMunge() error {
	if mungeWorks() {
		return nil
	}
	f, err := os.OpenFile(mungeLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if mungeWorks() {
		return nil
	}
	if fi, err := os.Stat("/etc/munge/munge.key"); err != nil || fi.Size() == 0 {
		if out, err := exec.Command("runuser", "-u", "munge", "--", cmp.Or(lookPath("mungekey"), "mungekey"), "--create").CombinedOutput(); err != nil {
			return fmt.Errorf("slurmtest: create the munge key: %v: %s", err, out)
		}
	}
	if out, err := exec.Command("install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge").CombinedOutput(); err != nil {
		return fmt.Errorf("slurmtest: /run/munge: %v: %s", err, out)
	}
	// munged daemonizes; it is shared, so it is not this process's child
	// to stop.
	if out, err := exec.Command("runuser", "-u", "munge", "--", lookPath("munged")).CombinedOutput(); err != nil {
		return fmt.Errorf("slurmtest: start munged: %v: %s", err, out)
	}
	for range 100 {
		if mungeWorks() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("slurmtest: munged started but munge -n | unmunge fails")
}

func mungeWorks() bool {
	cred, err := exec.Command("munge", "-n").Output()
	if err != nil {
		return false
	}
	cmd := exec.Command("unmunge")
	cmd.Stdin = bytes.NewReader(cred)
	return cmd.Run() == nil
}

// lookPath finds a Slurm or munge binary on PATH, or in /usr/sbin and
// /usr/bin (daemons live in sbin, which a user's PATH may lack); "" when
// it is in none.
func lookPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
