package proctimes

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestLiveChildren: a child that is still alive has its CPU time counted,
// which RUSAGE_CHILDREN would not hold until it is reaped; Read reads a
// process's own, and fails for no process.
func TestLiveChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before := LiveChildren(os.Getpid())
	// Busy for a while (shell arithmetic), then asleep until killed.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 60`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for LiveChildren(os.Getpid())-before < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("a busy live child's CPU time not counted: %v", LiveChildren(os.Getpid())-before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if c[0]+c[1] == 0 {
		t.Fatalf("the busy child's own utime and stime are 0 (%v)", c)
	}
	if _, err := Read(-1); err == nil {
		t.Fatal("Read of no process: no error")
	}
}
