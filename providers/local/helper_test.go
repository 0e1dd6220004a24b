package local

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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

func TestMain(m *testing.M) {
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
