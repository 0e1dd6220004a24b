package local

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
)

// The tests' child processes are this test binary, re-executed with
// helperEnv set (as os/exec's tests do with helperCommand). TestMain sends
// such a process to helperMain instead of running tests.
const helperEnv = "COMPUTEBOARD_LOCAL_TEST_HELPER"

// stuckSupervisor: this test binary run under this name (through a
// symbolic link) plays a supervisor that hangs.
const stuckSupervisor = "stuck-supervisor"

// diesAfterStartSupervisor: this test binary under this name plays a
// supervisor that records a started task and dies before reporting ready.
const diesAfterStartSupervisor = "dies-after-start-supervisor"

// The test binary is also the tests' supervisor (Config.SupervisorPath),
// dispatched on supervise.Command exactly as supervise.Main's doc tells an
// adapter to do it.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == stuckSupervisor || (len(os.Args) > 1 && os.Args[1] == supervise.Command) || os.Getenv(helperEnv) == "1" {
		setCoverDir()
	}
	if filepath.Base(os.Args[0]) == stuckSupervisor {
		// A misconfigured SupervisorPath that never answers, nor exits on
		// SIGTERM.
		signal.Ignore(syscall.SIGTERM)
		sleepForever()
	}
	if filepath.Base(os.Args[0]) == diesAfterStartSupervisor && len(os.Args) > 2 {
		// A supervisor that records a started task, then dies before it
		// reports ready: the handshake fails although the task may have run.
		dir := os.Args[2]
		rec := fmt.Sprintf(`{"version":1,"provider":"local","task_id":%q}`, filepath.Base(dir))
		_ = os.WriteFile(filepath.Join(dir, supervise.FileState), []byte(rec), 0o600)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == supervise.ServeCommand {
		setCoverDir()
	}
	if code, ok := supervise.Dispatch(os.Args[1:]); ok {
		os.Exit(code)
	}
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Args[1:]))
	}
	os.Exit(runTests(m))
}

// testExe is the test binary that tasks and supervisors run: a copy of
// this one, made by runTests, in a directory every user can read, because
// go test builds in a directory only its own user can enter and tasks of
// a root provider run as testUser.
var testExe string

// testUser is the user a root test provider runs its tasks as, unless a
// test names another.
const testUser = "nobody"

// coverDirsFile, next to testExe, lists where a child may write coverage
// data: the run's own coverage directory (so that supervisors count), then
// a scratch directory for children that cannot write there (tasks running
// as testUser), whose data is thrown away. Without it a -cover build
// prints "GOCOVERDIR not set" into every task's stderr.
const coverDirsFile = "gocoverdirs"

// runTests makes testExe, runs the tests and removes it.
func runTests(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "computeboard-local-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := makeTestExe(dir); err != nil {
		fmt.Fprintln(os.Stderr, "making the test binary copy:", err)
		return 1
	}
	return m.Run()
}

func makeTestExe(dir string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	exe := filepath.Join(dir, "local.test")
	out, err := os.OpenFile(exe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	testExe = exe
	if f := flag.Lookup("test.gocoverdir"); f != nil && f.Value.String() != "" {
		scratch := filepath.Join(dir, "cover-scratch")
		if err := os.Mkdir(scratch, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(scratch, 0o1777); err != nil {
			return err
		}
		dirs := f.Value.String() + "\n" + scratch + "\n"
		return os.WriteFile(filepath.Join(dir, coverDirsFile), []byte(dirs), 0o644)
	}
	return nil
}

// setCoverDir points a child of a -cover test run (a supervisor, a task)
// at the first coverage directory in coverDirsFile it can write to.
func setCoverDir() {
	if os.Getenv("GOCOVERDIR") != "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), coverDirsFile))
	if err != nil {
		return // not a -cover run
	}
	for d := range strings.Lines(string(b)) {
		d = strings.TrimSpace(d)
		if d != "" && syscall.Access(d, 0o2|0o1) == nil { // W_OK|X_OK, for the real uid
			os.Setenv("GOCOVERDIR", d)
			return
		}
	}
}

// workDir is t.TempDir, made reachable by every user (t.TempDir's parent
// is private to root), for work directories of tasks that run as testUser.
func workDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// helperMain runs one helper program:
//
//	print S          write S to stdout
//	stderr S         write S to stderr
//	exit N           exit with code N
//	sleep            sleep until killed
//	stubborn-sleep   ignore SIGTERM, then sleep until killed
//	env NAME         write $NAME to stdout
//	lookup NAME      write $NAME to stdout, or "<unset>" if it is not set
//	ids              write the process's uid, euid, gid, egid and
//	                 supplementary groups to stdout
//	cat F            write file F to stdout; exit 1 if it cannot be read
//	create F         create file F; exit 1 if it cannot
//	rename F G       create file F, then rename it to G; exit 1 if the
//	                 rename fails (2 if the create does)
//	ls D             read directory D; exit 1 if it cannot
//	spew N M         write N bytes to stdout and M bytes to stderr
//	spew-when F N M  wait until file F exists, then spew N M
//	limits           write the soft and hard RLIMIT_NOFILE, RLIMIT_NPROC
//	                 and RLIMIT_CORE to stdout, one "name soft hard" line
//	                 each
//	limits-after MS  sleep MS milliseconds, then limits
//	pwd              write the working directory to stdout
//	payload          write the payload file to stdout
//	family MODE [setsid]
//	                 start a grandchild (same process group, or with
//	                 setsid a session and group of its own) that sleeps,
//	                 write "<grandchild pid>\n" to stdout, then: MODE
//	                 "stay" sleeps, "leave" exits 0, "stubborn" has both
//	                 ignore SIGTERM and sleep.
//	hog MIB          allocate and touch MIB mebibytes, keep them, then
//	                 write "survived" to stdout
//	spin N           keep N threads busy until killed
//	burn MS [N]      keep N threads (one by default) busy until the
//	                 process has used MS milliseconds of CPU time, then
//	                 exit 0
//	cpus             write the CPUs the process may run on
//	                 (Cpus_allowed_list) to stdout
//	exit-when F N    write "ran\n" to stdout, wait until file F exists,
//	                 then exit with code N
//	adapter DIR ID TIMEOUT ARGV...
//	                 play an adapter: start task ID (ARGV, with this
//	                 helper switch in its env) on a supervised provider
//	                 (supervisor: $COMPUTEBOARD_LOCAL_TEST_SUPERVISOR, else
//	                 this binary) on
//	                 work dir DIR, output capped at
//	                 doomedAdapterMaxOutput, write the task ID and a newline to
//	                 stdout once Start has returned, then sleep until
//	                 killed
func helperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no command")
		return 2
	}
	arg := func(i int) string {
		if i >= len(args) {
			fmt.Fprintf(os.Stderr, "helper: %s: missing argument\n", args[0])
			os.Exit(2)
		}
		return args[i]
	}
	switch args[0] {
	case "print":
		fmt.Print(arg(1))
	case "stderr":
		fmt.Fprint(os.Stderr, arg(1))
	case "exit":
		n, _ := strconv.Atoi(arg(1))
		return n
	case "sleep":
		sleepForever()
	case "stubborn-sleep":
		signal.Ignore(syscall.SIGTERM)
		sleepForever()
	case "env":
		fmt.Print(os.Getenv(arg(1)))
	case "lookup":
		v, ok := os.LookupEnv(arg(1))
		if !ok {
			v = "<unset>"
		}
		fmt.Print(v)
	case "ids":
		groups, _ := os.Getgroups()
		fmt.Printf("uid %d euid %d gid %d egid %d groups %v", os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid(), groups)
	case "cat":
		b, err := os.ReadFile(arg(1))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Stdout.Write(b)
	case "spew", "spew-when":
		if args[0] == "spew-when" {
			waitFile(arg(1))
			args = args[1:]
		}
		for i, f := range []*os.File{os.Stdout, os.Stderr} {
			n, _ := strconv.Atoi(arg(1 + i))
			f.Write(bytes.Repeat([]byte{"oe"[i]}, n))
		}
	case "limits", "limits-after":
		if args[0] == "limits-after" {
			ms, _ := strconv.Atoi(arg(1))
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		for _, l := range []struct {
			name     string
			resource int
		}{{"nofile", supervise.RlimitNOFILE}, {"nproc", supervise.RlimitNPROC}, {"core", supervise.RlimitCORE}} {
			var lim syscall.Rlimit
			if err := syscall.Getrlimit(l.resource, &lim); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Printf("%s %d %d\n", l.name, lim.Cur, lim.Max)
		}
	case "create":
		if err := os.WriteFile(arg(1), nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "rename":
		if err := os.WriteFile(arg(1), nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := os.Rename(arg(1), arg(2)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "ls":
		if _, err := os.ReadDir(arg(1)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "pwd":
		wd, _ := os.Getwd()
		fmt.Print(wd)
	case "payload":
		b, err := os.ReadFile(os.Getenv(providers.PayloadEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Stdout.Write(b)
	case "family":
		mode := arg(1)
		child := "sleep"
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
			child = "stubborn-sleep"
		}
		exe, _ := os.Executable()
		gc := exec.Command(exe, child) // inherits our process group and env
		if len(args) > 2 && args[2] == "setsid" {
			gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // leaves our process group
		}
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("%d\n", gc.Process.Pid)
		if mode == "leave" {
			return 0
		}
		sleepForever()
	case "hog":
		n, _ := strconv.Atoi(arg(1))
		var kept [][]byte
		for range n {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			kept = append(kept, b)
		}
		fmt.Print("survived")
		runtime.KeepAlive(kept)
	case "burn":
		ms, _ := strconv.Atoi(arg(1))
		threads := 1
		if len(args) > 2 {
			threads, _ = strconv.Atoi(args[2])
		}
		var wg sync.WaitGroup
		for range threads {
			wg.Go(func() {
				for x := 0; ; x++ {
					var ru syscall.Rusage
					if x%1024 == 0 && syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil &&
						time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= time.Duration(ms)*time.Millisecond {
						return
					}
					spinSink.Store(int64(x))
				}
			})
		}
		wg.Wait()
	case "spin":
		n, _ := strconv.Atoi(arg(1))
		for range n {
			go func() {
				for x := 0; ; x++ { // burn CPU: what the confinement tests measure
					spinSink.Store(int64(x))
				}
			}()
		}
		sleepForever()
	case "cpus":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				fmt.Print(strings.TrimSpace(v))
			}
		}
	case "ask-server":
		// A job that asks its work directory's supervisor server to stop
		// a task: prints the server's reply, or "refused" when the server
		// closes the connection without one.
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: arg(1), Net: "unix"})
		if err != nil {
			fmt.Println("dial:", err)
			return 0
		}
		defer c.Close()
		if err := supervise.SendRequest(c, supervise.ServerRequest{Dir: arg(2)}); err != nil {
			// The server may close the connection before the request is
			// written (EPIPE): refused as well.
			fmt.Println("refused")
			return 0
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		if line == "" {
			fmt.Println("refused")
			return 0
		}
		fmt.Print(line)
	case "exit-when":
		fmt.Println("ran")
		if !waitFile(arg(1)) {
			return 99
		}
		n, _ := strconv.Atoi(arg(2))
		return n
	case "adapter":
		timeout, err := time.ParseDuration(arg(3))
		if err != nil || len(args) < 5 {
			fmt.Fprintln(os.Stderr, "helper: adapter DIR ID TIMEOUT ARGV...")
			return 2
		}
		exe, _ := os.Executable()
		if sup := os.Getenv(supervisorEnv); sup != "" {
			exe = sup
		}
		cfg := Config{WorkDir: arg(1), SupervisorPath: exe, MaxOutputBytes: doomedAdapterMaxOutput,
			SupervisorServer: os.Getenv(serverModeEnv) == "1"}
		if os.Geteuid() == 0 {
			cfg.User = testUser
		}
		p, err := New(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		h, err := p.Start(context.Background(), providers.Task{
			ID: arg(2), Argv: args[4:], Env: map[string]string{helperEnv: "1"}, Timeout: timeout,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(h.ID)
		sleepForever() // the test SIGKILLs us: an adapter crash
	default:
		fmt.Fprintf(os.Stderr, "helper: unknown command %q\n", args[0])
		return 2
	}
	return 0
}

// waitFile waits until file name exists, for up to ten minutes.
func waitFile(name string) bool {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
		if _, err := os.Stat(name); err == nil {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// supervisorEnv names the supervisor binary the "adapter" helper uses.
const supervisorEnv = "COMPUTEBOARD_LOCAL_TEST_SUPERVISOR"

// serverModeEnv set to 1 has the "adapter" helper run its task under the
// supervisor server (Config.SupervisorServer).
const serverModeEnv = "COMPUTEBOARD_LOCAL_TEST_SERVER"

// doomedAdapterMaxOutput is the output cap of the "adapter" helper's
// provider.
const doomedAdapterMaxOutput = 1000

// sleepForever sleeps long enough for any test, but not forever, so a
// crashed test run cannot leave helpers behind for long.
func sleepForever() { time.Sleep(10 * time.Minute) }

// helper returns argv that runs helper program args.
func helper(t testing.TB, args ...string) []string {
	t.Helper()
	return append([]string{testBinary(t)}, args...)
}

// helperTask returns a task that runs helper program args.
func helperTask(t testing.TB, args ...string) providers.Task {
	return providers.Task{
		ID:   providertest.TaskID(t),
		Argv: helper(t, args...),
		Env:  map[string]string{helperEnv: "1"},
	}
}

// spinSink keeps the spin loops from being optimised away.
var spinSink atomic.Int64
