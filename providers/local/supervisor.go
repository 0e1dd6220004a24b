package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// SupervisorCommand is the hidden subcommand that runs the supervisor: the
// provider starts Config.SupervisorPath with arguments
//
//	SupervisorCommand <task directory>
//
// and the program must hand everything after SupervisorCommand to
// SupervisorMain before doing anything else (see SupervisorMain).
const SupervisorCommand = "__supervise"

// The supervisor's inherited descriptors, after stdin, stdout and stderr.
const (
	specFD   = 3 // read: the taskSpec as JSON, then EOF
	statusFD = 4 // write: a readyMsg line, later the exitRecord line
)

// readyMsg is the supervisor's first line on its status pipe.
type readyMsg struct {
	PID        int    `json:"pid,omitempty"`         // the task's leader, and so its process group
	StateError string `json:"state_error,omitempty"` // the task started with a problem (its state record could not be written)
	Error      string `json:"error,omitempty"`       // the task did not start
}

// SupervisorMain runs a task's supervisor and returns the process exit
// code. It is not for people: the local provider starts it (when
// Config.SupervisorPath is set) as "SupervisorPath __supervise <task dir>"
// with the task's spec on descriptor 3 and a status pipe on descriptor 4.
//
// Wire it into the binary named by SupervisorPath as the first thing main
// does, before flag parsing, signal handling or any other setup:
//
//	func main() {
//		if len(os.Args) > 1 && os.Args[1] == local.SupervisorCommand {
//			os.Exit(local.SupervisorMain(os.Args[2:]))
//		}
//		...
//	}
//
// args is what follows SupervisorCommand. The supervisor runs with an empty
// environment, in the task directory, with the task's stdout and stderr
// files as its own (its rare warnings go to the task's stderr).
//
// Exit codes: 0 once the task's outcome is recorded, 1 when the task could
// not be started, 2 when it was started wrongly.
func SupervisorMain(args []string) int {
	// First of all: from here on SIGTERM is a stop request, not death.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintf(os.Stderr, "usage: %s <task directory>; run by the local provider, not by hand\n", SupervisorCommand)
		return 2
	}
	dir := args[0]
	// The task must not inherit the pipes: the provider's EOF on the status
	// pipe means "the supervisor is gone".
	syscall.CloseOnExec(specFD)
	syscall.CloseOnExec(statusFD)
	specIn, status := os.NewFile(specFD, "spec"), os.NewFile(statusFD, "status")
	defer status.Close()

	var spec taskSpec
	err := json.NewDecoder(specIn).Decode(&spec)
	specIn.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: reading the task spec: %v\n", SupervisorCommand, err)
		sendMessage(status, readyMsg{Error: "supervisor: reading the task spec: " + err.Error()})
		return 2
	}
	deadline := time.Now().Add(spec.Timeout)

	stop := make(chan error, 1)
	go func() { // lives as long as the process
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				continue // a hang-up is not a stop request
			}
			// The provider publishes the stop record before it signals, so
			// the record says why; a signal without one came from elsewhere
			// (an operator, a shutdown) and still stops the task.
			cause := fmt.Errorf("the supervisor was sent %v", sig)
			if r, err := readStop(dir); err == nil {
				cause = errors.New(r.Cause)
			}
			select {
			case stop <- cause:
			default: // one is pending; the first wins
			}
		}
	}()

	select {
	case c := <-stop:
		sendMessage(status, readyMsg{Error: "stop requested before the task started: " + c.Error()})
		return 1
	default:
	}
	self := procIdentity{PID: os.Getpid()}
	_, _, self.StartTicks, _ = procStat(self.PID)
	// This process exists for this task only: the task inherits its
	// limits, with no moment under any other.
	if err := applyOwnLimits(spec.Limits); err != nil {
		sendMessage(status, readyMsg{Error: err.Error()})
		return 1
	}
	cmd, out, warn, err := startTask(dir, &spec, os.Stdout, os.Stderr, self, false)
	if err != nil {
		sendMessage(status, readyMsg{Error: err.Error()})
		return 1
	}
	ready := readyMsg{PID: cmd.Process.Pid}
	if warn != nil {
		ready.StateError = warn.Error()
	}
	// The provider may be gone already (or may give up on us, in which case
	// a stop request follows); the task is supervised either way.
	sendMessage(status, ready)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("component", "computeboard-supervisor", "job", spec.TaskID)
	rec := supervise(cmd, out, &spec, deadline, stop, notBefore(spec.StartedAt), log)
	switch err := publishRecord(dir, fileExit, rec); {
	case errors.Is(err, errRecordExists):
		// Someone recorded the task before us (an adapter that could not
		// reach us); theirs stands, and the provider is told it.
		if disk, err := readExit(dir); err == nil {
			rec = disk
		}
	case err != nil:
		// The provider, if alive, records what we send it instead.
		log.Warn("task outcome not recorded", "err", err)
	}
	sendMessage(status, rec)
	return 0
}

// notBefore is the wall clock, held back to no earlier than start: the
// supervisor stamps FinishedAt itself, and StartedAt came from the
// provider's Clock.
func notBefore(start time.Time) func() time.Time {
	return func() time.Time {
		if now := time.Now(); now.After(start) {
			return now
		}
		return start
	}
}

// sendMessage writes v as one JSON line. Errors are ignored: the reader
// may be gone, and nothing the supervisor does depends on being heard.
func sendMessage(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err == nil {
		_, _ = w.Write(append(b, '\n'))
	}
}

// readMessage reads one JSON line into v.
func readMessage(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}

// launchSupervised starts tk's supervisor and waits, bounded by ctx, for it
// to report the task's process started.
func (p *Provider) launchSupervised(ctx context.Context, tk *task, spec *taskSpec, stdout, stderr *os.File) error {
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
	cmd := exec.Command(p.supervisor, SupervisorCommand, tk.dir)
	cmd.Env = []string{} // the task's environment travels in the spec
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
func handshake(specW *os.File, status *bufio.Reader, spec *taskSpec) (readyMsg, error) {
	var ready readyMsg
	if err := json.NewEncoder(specW).Encode(spec); err != nil {
		return ready, fmt.Errorf("sending the task spec: %w", err)
	}
	if err := specW.Close(); err != nil {
		return ready, fmt.Errorf("sending the task spec: %w", err)
	}
	if err := readMessage(status, &ready); err != nil {
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
	_ = publishRecord(dir, fileStop, stopRecord{Version: recordVersion, Cause: "start abandoned", RequestedAt: time.Now()})
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
	if b, err := os.ReadFile(filepath.Join(dir, fileStderr)); err == nil && len(b) > 0 {
		b = bytes.TrimSpace(b[:min(len(b), 512)])
		why += fmt.Sprintf("; its stderr: %q", b)
	}
	return why
}

// waitSupervised is the waiter's half for a supervised task: it waits for
// the supervisor to report the outcome and exit, and returns the outcome.
// A supervisor that dies without reporting (SIGKILLed, say) leaves the task
// unobservable, so what is left of it is stopped and the task is recorded
// lost (cancelled if a stop had been requested), without an exit code.
func (p *Provider) waitSupervised(tk *task) exitRecord {
	var rec exitRecord
	msgErr := readMessage(tk.statusIn, &rec)
	tk.statusPipe.Close()
	_ = tk.sup.Wait()
	if msgErr == nil && rec.valid() {
		return rec
	}
	if disk, err := readExit(tk.dir); err == nil {
		return disk // it recorded the outcome but could not tell us
	}
	procs := taskProcs{pgid: tk.pgid, cg: tk.cgroup}
	if procs.alive() {
		procs.terminate()
	}
	if err := drain(context.Background(), procs, p.grace); err != nil {
		p.log.Warn("task's processes not cleared", "job", tk.id, "err", err)
	} else if err := tk.cgroup.remove(); err != nil {
		p.log.Warn("task's cgroup not removed; Prune retries", "job", tk.id, "err", err)
	}
	st := providers.Status{
		State: providers.StateLost,
		Error: fmt.Sprintf("the task's supervisor ended (%v) without recording its outcome; what was left of the task was stopped", tk.sup.ProcessState),
	}
	if c := tk.stopCause(); c != nil {
		st.State = providers.StateCancelled
		st.Error = c.Error() + "; exit status unknown: " + st.Error
	}
	st.StartedAt, st.FinishedAt = tk.startedAt, p.clock.Now()
	return exitRecordOf(st)
}
