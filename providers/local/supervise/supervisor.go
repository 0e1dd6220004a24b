package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// Command is the argument before the task directory on a supervisor's
// command line: the provider starts Config.SupervisorPath with arguments
//
//	Command <task directory>
//
// cmd/cb-supervisor takes it as its only mode; a binary that is also
// something else (the adapter, a test binary) must hand everything after
// Command to Main before doing anything else (see Main).
const Command = "__supervise"

// The supervisor's inherited descriptors, after stdin, stdout and stderr.
const (
	SpecFD   = 3 // read: the Spec as JSON, then EOF
	StatusFD = 4 // write: a Ready line, later the ExitRecord line
)

// Ready is the supervisor's first line on its status pipe.
type Ready struct {
	PID        int    `json:"pid,omitempty"`         // the task's leader, and so its process group
	StateError string `json:"state_error,omitempty"` // the task started with a problem (its state record could not be written)
	Error      string `json:"error,omitempty"`       // the task did not start
}

// Main runs a task's supervisor and returns the process exit code. It is
// not for people: the local provider starts it (when
// Config.SupervisorPath is set) as "SupervisorPath __supervise <task dir>"
// with the task's spec on SpecFD and a status pipe on StatusFD.
//
// cmd/cb-supervisor is the binary made for it: it imports nothing outside
// the standard library, so it starts in about the time of /bin/true.
// Another binary may serve too (the adapter does, as a fallback), if
// Dispatch is the first thing its main does, before flag parsing, signal
// handling or any other setup; but it pays for every package's
// initialisation on each start.
//
// args is what follows Command. The supervisor runs with an empty
// environment, in the task directory, with the task's stdout and stderr
// files as its own (its rare warnings go to the task's stderr).
//
// Exit codes: 0 once the task's outcome is recorded, 1 when the task could
// not be started, 2 when it was started wrongly.
func Main(args []string) int {
	// First of all: from here on SIGTERM is a stop request, not death.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintf(os.Stderr, "usage: %s <task directory>; run by the local provider, not by hand\n", Command)
		return 2
	}
	dir := args[0]
	// The task must not inherit the pipes: the provider's EOF on the status
	// pipe means "the supervisor is gone".
	syscall.CloseOnExec(SpecFD)
	syscall.CloseOnExec(StatusFD)
	specIn, status := os.NewFile(SpecFD, "spec"), os.NewFile(StatusFD, "status")
	defer status.Close()

	var spec Spec
	err := json.NewDecoder(specIn).Decode(&spec)
	specIn.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: reading the task spec: %v\n", Command, err)
		Send(status, Ready{Error: "supervisor: reading the task spec: " + err.Error()})
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
			if r, err := ReadStop(dir); err == nil {
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
		Send(status, Ready{Error: "stop requested before the task started: " + c.Error()})
		return 1
	default:
	}
	self := ProcIdentity{PID: os.Getpid()}
	_, _, self.StartTicks, _ = ProcStat(self.PID)
	// This process exists for this task only: the task inherits its
	// limits, with no moment under any other.
	if err := ApplyOwnLimits(spec.Limits); err != nil {
		Send(status, Ready{Error: err.Error()})
		return 1
	}
	cmd, out, warn, err := Start(dir, &spec, os.Stdout, os.Stderr, self, nil, false)
	if err != nil {
		Send(status, Ready{Error: err.Error()})
		return 1
	}
	ready := Ready{PID: cmd.Process.Pid}
	if warn != nil {
		ready.StateError = warn.Error()
	}
	// The provider may be gone already (or may give up on us, in which case
	// a stop request follows); the task is supervised either way.
	Send(status, ready)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("component", "computeboard-supervisor", "job", spec.TaskID)
	rec := Supervise(cmd, out, &spec, nil, deadline, stop, notBefore(spec.StartedAt), log)
	report(dir, rec, status, func() { status.Close() }, log)
	return 0
}

// report publishes rec as the task's exit record in dir, sends it on
// status, calls done (the status channel is finished), and syncs it.
func report(dir string, rec ExitRecord, status io.Writer, done func(), log *slog.Logger) {
	published := false
	switch err := PublishRecord(dir, FileExit, rec, false); {
	case err == nil:
		published = true
	case errors.Is(err, ErrRecordExists):
		// Someone recorded the task before us (an adapter that could not
		// reach us); theirs stands, and the provider is told it.
		if disk, err := ReadExit(dir); err == nil {
			rec = disk
		}
	default:
		// The provider, if alive, records what we send it instead.
		log.Warn("task outcome not recorded", "err", err)
	}
	// Heard first, synced after: the provider learns the outcome without
	// waiting for the disk (see SyncPublished for why that is safe).
	Send(status, rec)
	done()
	if published {
		if err := SyncPublished(dir, FileExit); err != nil {
			log.Warn("task outcome not synced", "err", err)
		}
	}
}

// Dispatch runs the supervisor role that args (os.Args[1:]) name, if any:
// a supervisor per task (Command, Main) or the work directory's supervisor
// server (ServeCommand, Serve). ok is false when args name neither, and
// the binary goes on with its own main. Every binary that may serve as
// the local provider's supervisor (Config.SupervisorPath) calls it before
// anything else:
//
//	if code, ok := supervise.Dispatch(os.Args[1:]); ok {
//		os.Exit(code)
//	}
func Dispatch(args []string) (code int, ok bool) {
	switch {
	case len(args) > 0 && args[0] == Command:
		return Main(args[1:]), true
	case len(args) > 0 && args[0] == ServeCommand:
		return Serve(args[1:]), true
	}
	return 0, false
}

// SyncPublished makes the record dir/name, published without a sync,
// durable: the file and its entry in dir.
//
// Why an outcome (the exit record) need not be durable before it is
// reported: only a power loss or kernel crash can lose it (a process
// crash, of the adapter or the supervisor, leaves it in the page cache),
// and that kills the task's processes too, so a task running at that
// moment and one that had just ended look the same afterwards (lost,
// by the boot ID). What must not happen is an outcome that someone has
// seen changing later: the agent's transition of the job record in
// Redis is where an outcome is first seen, and after that the agent
// never asks again. So the record is published, sent to the provider at
// once, and synced right after, off the path from the task's exit to the
// job's transition; the window in which a power loss turns a finished,
// unreported task into a lost one shrinks from the kernel's writeback
// delay to the length of this sync.
func SyncPublished(dir, name string) error {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
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

// Send writes v as one JSON line. Errors are ignored: the reader may be
// gone, and nothing the supervisor does depends on being heard.
func Send(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err == nil {
		_, _ = w.Write(append(b, '\n'))
	}
}

// Receive reads one JSON line into v.
func Receive(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}
