package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// The supervisor itself (its main, the task spec and the records it
// writes) is package supervise, which imports nothing outside the
// standard library; cmd/cb-supervisor is a binary made of it alone. This
// file is the provider's side of the protocol.

// supervisorGoEnv is a supervisor's environment: the Go runtime's settings
// for a process that mostly waits. One P, not one per CPU, whose idle
// spinning cost more CPU than the supervisor's work; and no garbage
// collection below GOMEMLIMIT (a supervisor allocates little, and most of
// it at its start), which still bounds it. Measured with
// BenchmarkStartToExit/cb-supervisor-unconfined: child CPU per task from
// about 7.7 ms to 6.1 ms. The task never sees these: its environment is
// the spec's.
var supervisorGoEnv = []string{"GOMAXPROCS=1", "GOGC=off", "GOMEMLIMIT=32MiB"}

// launchSupervised starts tk's supervisor and waits, bounded by ctx, for it
// to report the task's process started.
func (p *Provider) launchSupervised(ctx context.Context, tk *task, spec *supervise.Spec, stdout, stderr *os.File) error {
	specR, specW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer specW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specR.Close()
		return err
	}
	cmd := exec.Command(p.supervisor, supervise.Command, tk.dir)
	// The task's environment travels in the spec; this is the
	// supervisor's own (see supervisorGoEnv).
	cmd.Env = supervisorGoEnv
	cmd.Dir = tk.dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{specR, statusW} // specFD, statusFD
	// Its own session: a signal to the adapter's process group or a hang-up
	// of its terminal does not reach the supervisor, and the task's group
	// (which the supervisor creates) is not the supervisor's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	specR.Close()   // the supervisor has its own copies, so EOF on statusR
	statusW.Close() // means it has exited
	if err != nil {
		statusR.Close()
		return fmt.Errorf("start supervisor: %w", err)
	}

	// Bound the handshake by ctx: pipe deadlines interrupt the spec write
	// and the ready read.
	fired := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		now := time.Now()
		_ = specW.SetWriteDeadline(now)
		_ = statusR.SetReadDeadline(now)
		close(fired)
	})
	status := bufio.NewReader(statusR)
	ready, err := handshake(specW, status, spec)
	if !stopWatch() {
		<-fired
		if err != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
	}
	_ = statusR.SetReadDeadline(time.Time{})
	if err == nil && ready.Error != "" {
		err = errors.New(ready.Error)
	}
	if err == nil && ready.PID <= 0 {
		err = fmt.Errorf("supervisor reported no process")
	}
	if err != nil {
		specW.Close() // unblocks a supervisor still reading the spec
		why := p.abandon(tk.dir, cmd)
		statusR.Close()
		return fmt.Errorf("supervisor: %w%s", err, why)
	}
	if ready.StateError != "" {
		// The task runs, with less than it should have.
		p.log.Warn("task started with a problem", "job", tk.id, "err", ready.StateError)
	}
	tk.sup, tk.statusPipe, tk.statusIn, tk.pgid = cmd, statusR, status, ready.PID
	return nil
}

// handshake sends the spec and reads the supervisor's ready line.
func handshake(specW *os.File, status *bufio.Reader, spec *supervise.Spec) (supervise.Ready, error) {
	var ready supervise.Ready
	if err := json.NewEncoder(specW).Encode(spec); err != nil {
		return ready, fmt.Errorf("sending the task spec: %w", err)
	}
	if err := specW.Close(); err != nil {
		return ready, fmt.Errorf("sending the task spec: %w", err)
	}
	if err := supervise.Receive(status, &ready); err != nil {
		if errors.Is(err, io.EOF) {
			return ready, errors.New("exited before starting the task")
		}
		return ready, fmt.Errorf("waiting for it to start the task: %w", err)
	}
	return ready, nil
}

// abandon ends a supervisor whose task Start is about to fail, and the
// task too if it got that far: a stop request, then SIGKILL if it has not
// exited after the time a stop takes. It returns what the supervisor left
// in the task's stderr (a misconfigured SupervisorPath says why there),
// for the error message.
func (p *Provider) abandon(dir string, cmd *exec.Cmd) string {
	_ = supervise.PublishRecord(dir, supervise.FileStop, supervise.StopRecord{Version: supervise.RecordVersion, Cause: "start abandoned", RequestedAt: time.Now()}, false)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { // ends when the supervisor is reaped: at the latest after the Kill below
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(2*p.grace + time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	why := fmt.Sprintf(" (supervisor %v)", cmd.ProcessState)
	if b, err := os.ReadFile(filepath.Join(dir, supervise.FileStderr)); err == nil && len(b) > 0 {
		b = bytes.TrimSpace(b[:min(len(b), 512)])
		why += fmt.Sprintf("; its stderr: %q", b)
	}
	return why
}

// waitSupervised is the waiter's half for a supervised task: it waits for
// the supervisor to report the outcome, and returns it. The outcome comes
// down the status pipe the moment the supervisor has published it, before
// the supervisor syncs it and exits: the supervisor is reaped meanwhile,
// by a goroutine of its own (counted in p.wg, so Close waits for it). A
// supervisor that dies without reporting (SIGKILLed, say) leaves the task
// unobservable, so what is left of it is stopped and the task is recorded
// lost (cancelled if a stop had been requested), without an exit code.
func (p *Provider) waitSupervised(tk *task) supervise.ExitRecord {
	var rec supervise.ExitRecord
	msgErr := supervise.Receive(tk.statusIn, &rec)
	tk.statusPipe.Close()
	if msgErr == nil && rec.Valid() {
		p.wg.Add(1) // the waiter's own count is held until after this
		go func() { // ends when the supervisor exits, right after its sync
			defer p.wg.Done()
			_ = tk.sup.Wait()
		}()
		return rec
	}
	_ = tk.sup.Wait()
	if disk, err := supervise.ReadExit(tk.dir); err == nil {
		return disk // it recorded the outcome but could not tell us
	}
	return p.orphaned(tk, fmt.Sprintf("the task's supervisor ended (%v) without recording its outcome", tk.sup.ProcessState))
}

// orphaned stops what is left of a task whose supervisor ended without
// recording its outcome (why says how), and returns the record of a lost
// task (cancelled if a stop had been requested), without an exit code.
func (p *Provider) orphaned(tk *task, why string) supervise.ExitRecord {
	procs := supervise.TaskProcs{PGID: tk.pgid, Cgroup: tk.cgroup}
	if procs.Alive() {
		procs.Terminate()
	}
	if err := supervise.Drain(context.Background(), procs, p.grace); err != nil {
		p.log.Warn("task's processes not cleared", "job", tk.id, "err", err)
	} else if err := tk.cgroup.Remove(); err != nil {
		p.log.Warn("task's cgroup not removed; Prune retries", "job", tk.id, "err", err)
	}
	st := providers.Status{
		State: providers.StateLost,
		Error: why + "; what was left of the task was stopped",
	}
	if c := tk.stopCause(); c != nil {
		st.State = providers.StateCancelled
		st.Error = c.Error() + "; exit status unknown: " + st.Error
	}
	st.StartedAt, st.FinishedAt = tk.startedAt, p.clock.Now()
	return exitRecordOf(st)
}
