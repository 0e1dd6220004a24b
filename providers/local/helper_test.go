package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
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
// dispatched on SupervisorCommand exactly as SupervisorMain's doc tells an
// adapter to do it.
func TestMain(m *testing.M) {
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
		_ = os.WriteFile(filepath.Join(dir, fileState), []byte(rec), 0o600)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == SupervisorCommand {
		os.Exit(SupervisorMain(os.Args[2:]))
	}
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helperMain runs one helper program:
//
//	print S          write S to stdout
//	stderr S         write S to stderr
//	exit N           exit with code N
//	sleep            sleep until killed
//	stubborn-sleep   ignore SIGTERM, then sleep until killed
//	env NAME         write $NAME to stdout
//	pwd              write the working directory to stdout
//	payload          write the payload file to stdout
//	family MODE      start a grandchild (same process group) that sleeps,
//	                 write "<grandchild pid>\n" to stdout, then: MODE
//	                 "stay" sleeps, "leave" exits 0, "stubborn" has both
//	                 ignore SIGTERM and sleep.
//	exit-when F N    write "ran\n" to stdout, wait until file F exists,
//	                 then exit with code N
//	adapter DIR ID TIMEOUT ARGV...
//	                 play an adapter: start task ID (ARGV, with this
//	                 helper switch in its env) on a supervised provider on
//	                 work dir DIR, write the task ID and a newline to
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
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("%d\n", gc.Process.Pid)
		if mode == "leave" {
			return 0
		}
		sleepForever()
	case "exit-when":
		fmt.Println("ran")
		for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
			if _, err := os.Stat(arg(1)); err == nil {
				n, _ := strconv.Atoi(arg(2))
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
		return 99
	case "adapter":
		timeout, err := time.ParseDuration(arg(3))
		if err != nil || len(args) < 5 {
			fmt.Fprintln(os.Stderr, "helper: adapter DIR ID TIMEOUT ARGV...")
			return 2
		}
		exe, _ := os.Executable()
		p, err := New(Config{WorkDir: arg(1), SupervisorPath: exe})
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

// sleepForever sleeps long enough for any test, but not forever, so a
// crashed test run cannot leave helpers behind for long.
func sleepForever() { time.Sleep(10 * time.Minute) }

// helper returns argv that runs helper program args.
func helper(t testing.TB, args ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{exe}, args...)
}

// helperTask returns a task that runs helper program args.
func helperTask(t testing.TB, args ...string) providers.Task {
	return providers.Task{
		ID:   providertest.TaskID(t),
		Argv: helper(t, args...),
		Env:  map[string]string{helperEnv: "1"},
	}
}
