package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// Files in a task directory.
const (
	fileStdout  = "stdout"
	fileStderr  = "stderr"
	filePayload = "payload"
	fileState   = "state" // stateRecord, written once after the process starts
	fileExit    = "exit"  // exitRecord, written once when the task ends
)

const recordVersion = 1

// stateRecord identifies a task's process well enough for a later adapter
// to tell "still that process" from "gone" (pids are reused; pid plus start
// time plus boot ID is not).
type stateRecord struct {
	Version    int               `json:"version"`
	Provider   string            `json:"provider"`
	TaskID     string            `json:"task_id"`
	PID        int               `json:"pid"`
	PGID       int               `json:"pgid"`
	StartTicks uint64            `json:"start_ticks"` // /proc/<pid>/stat field 22; 0 = unknown
	BootID     string            `json:"boot_id"`     // /proc/sys/kernel/random/boot_id; "" = unknown
	StartedAt  time.Time         `json:"started_at"`
	Labels     map[string]string `json:"labels,omitempty"`
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
}

func exitRecordOf(st providers.Status) exitRecord {
	return exitRecord{
		Version: recordVersion, State: st.State, ExitCode: st.ExitCode, Error: st.Error,
		TimedOut: st.TimedOut, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
	}
}

// status turns the record back into a Status for the task in dir.
func (r exitRecord) status(dir string) providers.Status {
	return providers.Status{
		State: r.State, ExitCode: r.ExitCode, Error: r.Error, TimedOut: r.TimedOut,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		StdoutPath: filepath.Join(dir, fileStdout), StderrPath: filepath.Join(dir, fileStderr),
	}
}

// writeRecord writes v as JSON to dir/name atomically (temp file, fsync,
// rename), so a reader sees the whole record or none.
func writeRecord(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
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
	return r, nil
}

func readExit(dir string) (exitRecord, error) {
	var r exitRecord
	if err := readRecord(dir, fileExit, &r); err != nil {
		return r, err
	}
	if r.Version != recordVersion || !r.State.Terminal() {
		return r, fmt.Errorf("read %s: unsupported version %d or state %q", fileExit, r.Version, r.State)
	}
	return r, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
