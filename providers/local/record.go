package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// Files in a task directory.
const (
	fileStdout  = "stdout"
	fileStderr  = "stderr"
	filePayload = "payload"
	fileWork    = "work"  // the task's own directory: its default working directory and HOME
	fileState   = "state" // stateRecord, written once after the process starts
	fileExit    = "exit"  // exitRecord, published once when the task ends
	fileStop    = "stop"  // stopRecord, published once when a stop is requested (supervised tasks)
)

const recordVersion = 1

// stateRecord identifies a task's process, and its supervisor if it has
// one, well enough for a later adapter to tell "still that process" from
// "gone" (pids are reused; pid plus start time plus boot ID is not).
//
// The supervisor fields were added without a version bump: a record without
// them (SupervisorPID 0) describes a task the provider watched in-process,
// and older readers ignore them.
type stateRecord struct {
	Version    int               `json:"version"`
	Provider   string            `json:"provider"`
	TaskID     string            `json:"task_id"`
	PID        int               `json:"pid"`         // the task's leader
	PGID       int               `json:"pgid"`        // the task's process group (= PID)
	StartTicks uint64            `json:"start_ticks"` // /proc/<pid>/stat field 22; 0 = unknown
	BootID     string            `json:"boot_id"`     // /proc/sys/kernel/random/boot_id; "" = unknown
	StartedAt  time.Time         `json:"started_at"`
	Labels     map[string]string `json:"labels,omitempty"`

	SupervisorPID        int    `json:"supervisor_pid,omitempty"`         // 0: no supervisor
	SupervisorStartTicks uint64 `json:"supervisor_start_ticks,omitempty"` // 0 = unknown

	// Cgroups is the task's cgroup directories (none: unconfined), for
	// whoever stops the task or clears up after it. Added without a
	// version bump, like the supervisor fields.
	Cgroups cgroupSet `json:"cgroups,omitempty"`
}

// stopRecord asks a task's supervisor to stop the task, and says why. It is
// published before the supervisor is sent SIGTERM, so the supervisor finds
// it when the signal arrives; the first request wins.
type stopRecord struct {
	Version     int       `json:"version"`
	Cause       string    `json:"cause"` // becomes Status.Error of the cancelled task
	RequestedAt time.Time `json:"requested_at"`
}

// exitRecord is a task's outcome.
type exitRecord struct {
	Version    int             `json:"version"`
	State      providers.State `json:"state"`
	ExitCode   *int            `json:"exit_code,omitempty"`
	Error      string          `json:"error,omitempty"`
	TimedOut   bool            `json:"timed_out,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	// Bytes of output dropped past the cap (added without a version bump:
	// absent means none).
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
	// The kernel killed the task for going over its memory limit (added
	// without a version bump: absent means no).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

func exitRecordOf(st providers.Status) exitRecord {
	return exitRecord{
		Version: recordVersion, State: st.State, ExitCode: st.ExitCode, Error: st.Error,
		TimedOut: st.TimedOut, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		StdoutDropped: st.StdoutDropped, StderrDropped: st.StderrDropped, OOMKilled: st.OOMKilled,
	}
}

// status turns the record back into a Status for the task in dir.
func (r exitRecord) status(dir string) providers.Status {
	return providers.Status{
		State: r.State, ExitCode: r.ExitCode, Error: r.Error, TimedOut: r.TimedOut,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		StdoutPath: filepath.Join(dir, fileStdout), StderrPath: filepath.Join(dir, fileStderr),
		StdoutDropped: r.StdoutDropped, StderrDropped: r.StderrDropped, OOMKilled: r.OOMKilled,
	}
}

// writeRecord writes v as JSON to dir/name atomically (temp file, fsync,
// rename), so a reader sees the whole record or none. It replaces any
// record already there: use it only for records with a single writer.
func writeRecord(dir, name string, v any) error {
	tmp, err := writeTemp(dir, name, v)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		if tmp != "" {
			os.Remove(tmp)
		}
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// errRecordExists: publishRecord found a record already in place.
var errRecordExists = errors.New("record already published")

// publishRecord writes v as JSON to dir/name unless a record is already
// there, and returns errRecordExists if one is: the first complete record
// wins, and no record is ever replaced. It writes a temp file, fsyncs it
// and hard-links it into place, because link(2), unlike rename(2), fails
// when the name exists; so a reader sees the whole record or none, and two
// writers racing (a supervisor and an adapter, or two adapters) cannot
// both win. On a filesystem without hard links it falls back to rename
// after checking that the name is free, which narrows the race to that
// instant instead of closing it.
func publishRecord(dir, name string, v any) error {
	tmp, err := writeTemp(dir, name, v)
	if err != nil {
		if tmp != "" {
			os.Remove(tmp)
		}
		return fmt.Errorf("publish %s: %w", name, err)
	}
	defer os.Remove(tmp) // after a link, only the temp name goes
	final := filepath.Join(dir, name)
	err = os.Link(tmp, final)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return errRecordExists
	case exists(final):
		return errRecordExists
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	return nil
}

// writeTemp writes v as a JSON line to a new temp file in dir and syncs
// it. It returns the temp file's name, also with an error once the file
// exists, so the caller can remove it.
func writeTemp(dir, name string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

// readRecord reads dir/name into v. A missing file is fs.ErrNotExist.
func readRecord(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

func readState(dir string) (stateRecord, error) {
	var r stateRecord
	if err := readRecord(dir, fileState, &r); err != nil {
		return r, err
	}
	if r.Version != recordVersion {
		return r, fmt.Errorf("read %s: unsupported version %d", fileState, r.Version)
	}
	// A task's cgroup is named after it; nothing else is ever cleared or
	// killed on a record's word.
	r.Cgroups = slices.DeleteFunc(r.Cgroups, func(d cgroupDir) bool {
		return !filepath.IsAbs(d.Path) || filepath.Base(d.Path) != r.TaskID
	})
	return r, nil
}

func readExit(dir string) (exitRecord, error) {
	var r exitRecord
	if err := readRecord(dir, fileExit, &r); err != nil {
		return r, err
	}
	if !r.valid() {
		return r, fmt.Errorf("read %s: unsupported version %d or state %q", fileExit, r.Version, r.State)
	}
	return r, nil
}

func readStop(dir string) (stopRecord, error) {
	var r stopRecord
	if err := readRecord(dir, fileStop, &r); err != nil {
		return r, err
	}
	if r.Version != recordVersion || r.Cause == "" {
		return r, fmt.Errorf("read %s: unsupported version %d or empty cause", fileStop, r.Version)
	}
	return r, nil
}

// valid reports whether r is a complete outcome this version understands.
func (r exitRecord) valid() bool { return r.Version == recordVersion && r.State.Terminal() }

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
