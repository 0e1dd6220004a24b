package deathsig

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestChildOutlivesTheStartingThread starts a child from a goroutine
// locked to its OS thread that then ends locked, so the Go runtime ends
// the thread (what an in-process local provider does for every task it
// moves into cgroup v1: supervise.StartIn's throwaway thread). Pdeathsig
// fires when the thread that forked the child ends, not the process: a
// child started by a plain cmd.Start with Pdeathsig would be killed here.
func TestChildOutlivesTheStartingThread(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if syscall.Gettid() != syscall.Getpid() {
			errc <- Start(cmd)
			return
		}
		// The runtime never ends the main thread: hold it, and start
		// from a goroutine that cannot land there.
		inner := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked
			defer close(inner)
			errc <- Start(cmd)
		}()
		<-inner
		runtime.UnlockOSThread()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // the only Wait
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	// The locked goroutine has ended; give the runtime time to end its
	// thread, and the kernel to deliver a death signal if there is one.
	select {
	case <-exited:
		t.Fatalf("the child died with the thread that started it: %v", cmd.ProcessState)
	case <-time.After(500 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child is gone: %v", err)
	}
}
