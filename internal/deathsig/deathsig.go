// Package deathsig starts the daemons a test harness owns (redis-server,
// slurmctld, kube-apiserver, an adapter) so that they die with the test
// process, and only with it.
//
// Linux's PR_SET_PDEATHSIG (SysProcAttr.Pdeathsig) fires when the thread
// that forked the child ends, not when the process does, and the Go
// runtime ends any thread whose goroutine exits while locked to it. A
// test binary that runs the local provider in-process does that for
// every task it starts on a cgroup v1 host (supervise.StartIn moves a
// throwaway thread into the task's cgroups), so a daemon started from an
// ordinary goroutine could be killed at any moment: slurmctld vanished
// from under agent.TestRefreshSlurmNodes that way. Start forks from one
// locked thread that never ends.
package deathsig

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

// forker is the goroutine, locked to its thread for the life of the
// process, that starts every child: one per process, made on first use.
var forker = sync.OnceValue(func() chan<- request {
	reqs := make(chan request)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for r := range reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return reqs
})

// Start starts cmd with Pdeathsig SIGKILL, from a thread that lives as
// long as this process: the child is killed when the process ends
// (however it ends), and not before.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	forker() <- request{cmd: cmd, done: done}
	return <-done
}
