package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Files in a task directory.
const (
	FileStdout  = "stdout"
	FileStderr  = "stderr"
	FilePayload = "payload"
	FileWork    = "work"  // the task's own directory: its default working directory and HOME
	FileState   = "state" // StateRecord, written once after the process starts
	FileExit    = "exit"  // ExitRecord, published once when the task ends
	FileStop    = "stop"  // StopRecord, published once when a stop is requested (supervised tasks)
)

// RecordVersion is the version of every record this package writes.
const RecordVersion = 1

// StateRecord identifies a task's process, and its supervisor if it has
// one, well enough for a later adapter to tell "still that process" from
// "gone" (pids are reused; pid plus start time plus boot ID is not).
//
// The supervisor fields were added without a version bump: a record without
// them (SupervisorPID 0) describes a task the provider watched in-process,
// and older readers ignore them.
type StateRecord struct {
	Version    int               `json:"version"`
	Provider   string            `json:"provider"`
	TaskID     string            `json:"task_id"`
	PID        int               `json:"pid"`         // the task's leader
	PGID       int               `json:"pgid"`        // the task's process group (= PID)
	StartTicks uint64            `json:"start_ticks"` // /proc/<pid>/stat field 22; 0 = unknown
	BootID     string            `json:"boot_id"`     // /proc/sys/kernel/random/boot_id; "" = unknown
	StartedAt  time.Time         `json:"started_at"`
	Labels     map[string]string `json:"labels,omitempty"`
	Note       json.RawMessage   `json:"note,omitempty"` // the provider's Task.Note

	SupervisorPID        int    `json:"supervisor_pid,omitempty"`         // 0: no supervisor
	SupervisorStartTicks uint64 `json:"supervisor_start_ticks,omitempty"` // 0 = unknown
	// SupervisorServer: the supervisor is the work directory's supervisor
	// server (Serve), which outlives the task: it is asked to stop the task
	// over its socket, never signalled, and its exit says nothing of the
	// task's.
	SupervisorServer bool `json:"supervisor_server,omitempty"`

	// Cgroups is the task's cgroup directories (none: unconfined), for
	// whoever stops the task or clears up after it. Added without a
	// version bump, like the supervisor fields.
	Cgroups CgroupSet `json:"cgroups,omitempty"`
}

// StopRecord asks a task's supervisor to stop the task, and says why. It is
// published before the supervisor is sent SIGTERM, so the supervisor finds
// it when the signal arrives; the first request wins.
type StopRecord struct {
	Version     int       `json:"version"`
	Cause       string    `json:"cause"` // becomes Status.Error of the cancelled task
	RequestedAt time.Time `json:"requested_at"`
}

// The states an ExitRecord holds: the terminal ones of providers.State,
// spelt the same (this package imports nothing outside the standard
// library; providers/local converts, and a test there keeps the words
// equal).
const (
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
	StateLost      = "lost"
)

// ExitRecord is a task's outcome.
type ExitRecord struct {
	Version    int       `json:"version"`
	State      string    `json:"state"` // StateSucceeded, ...
	ExitCode   *int      `json:"exit_code,omitempty"`
	Error      string    `json:"error,omitempty"`
	TimedOut   bool      `json:"timed_out,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Bytes of output dropped past the cap (added without a version bump:
	// absent means none).
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
	// The kernel killed the task for going over its memory limit (added
	// without a version bump: absent means no).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Valid reports whether r is a complete outcome this version understands.
func (r ExitRecord) Valid() bool {
	switch r.State {
	case StateSucceeded, StateFailed, StateCancelled, StateLost:
		return r.Version == RecordVersion
	}
	return false
}

// Durability. A record is written to a temp file and renamed or linked
// into place, so a reader sees the whole record or none. Whether it is
// also fsynced first is the writer's choice (sync), made where the
// record is written, by what a power loss would cost: a crash of a
// process (the adapter, the supervisor) loses nothing either way, since
// the data is in the page cache; only a crash of the machine does, and
// after one every process of the task is gone too.

// WriteRecord writes v as JSON to dir/name atomically (temp file, fsync
// if sync, rename), so a reader sees the whole record or none. It
// replaces any record already there: use it only for records with a
// single writer.
func WriteRecord(dir, name string, v any, sync bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp, err := writeTemp(dir, name, append(b, '\n'), sync)
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

// ErrRecordExists: PublishRecord found a record already in place.
var ErrRecordExists = errors.New("record already published")

// PublishRecord writes v as JSON to dir/name unless a record is already
// there, and returns ErrRecordExists if one is: the first complete record
// wins, and no record is ever replaced. It writes a temp file, fsyncs it
// (if sync) and hard-links it into place, because link(2), unlike
// rename(2), fails when the name exists; so a reader sees the whole
// record or none, and two writers racing (a supervisor and an adapter, or
// two adapters) cannot both win. On a filesystem without hard links it
// falls back to rename after checking that the name is free, which
// narrows the race to that instant instead of closing it.
func PublishRecord(dir, name string, v any, sync bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	b = append(b, '\n')
	final := filepath.Join(dir, name)
	// First as an unnamed file linked in (no temp name to unlink after:
	// see publishUnnamed), else through a temp file.
	if done, err := publishUnnamed(dir, final, b, sync); done {
		if err != nil && !errors.Is(err, ErrRecordExists) {
			err = fmt.Errorf("publish %s: %w", name, err)
		}
		return err
	}
	tmp, err := writeTemp(dir, name, b, sync)
	if err != nil {
		if tmp != "" {
			os.Remove(tmp)
		}
		return fmt.Errorf("publish %s: %w", name, err)
	}
	defer os.Remove(tmp) // after a link, only the temp name goes
	err = os.Link(tmp, final)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return ErrRecordExists
	case Exists(final):
		return ErrRecordExists
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	return nil
}

// writeTemp writes b to a new temp file in dir and, if sync, syncs it. It
// returns the temp file's name, also with an error once the file exists,
// so the caller can remove it.
func writeTemp(dir, name string, b []byte, sync bool) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

// writeInto replaces the contents of the file at path (made earlier, by
// the writer) with b and syncs them.
func writeInto(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readRecord reads dir/name into v. A missing file is fs.ErrNotExist, and
// so is an empty one: a record published without a sync that a power
// loss caught before its data reached the disk (its name may survive
// alone), which is as good as none.
func readRecord(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return fmt.Errorf("read %s: empty, cut short by a crash: %w", name, fs.ErrNotExist)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// ReadState reads the task's state record in dir.
func ReadState(dir string) (StateRecord, error) {
	var r StateRecord
	if err := readRecord(dir, FileState, &r); err != nil {
		return r, err
	}
	if r.Version != RecordVersion {
		return r, fmt.Errorf("read %s: unsupported version %d", FileState, r.Version)
	}
	// A task's cgroup is named after it; nothing else is ever cleared or
	// killed on a record's word.
	r.Cgroups = slices.DeleteFunc(r.Cgroups, func(d CgroupDir) bool {
		return !filepath.IsAbs(d.Path) || filepath.Base(d.Path) != r.TaskID
	})
	return r, nil
}

// ReadExit reads the task's exit record in dir.
func ReadExit(dir string) (ExitRecord, error) {
	var r ExitRecord
	if err := readRecord(dir, FileExit, &r); err != nil {
		return r, err
	}
	if !r.Valid() {
		return r, fmt.Errorf("read %s: unsupported version %d or state %q", FileExit, r.Version, r.State)
	}
	return r, nil
}

// ReadStop reads the task's stop record in dir.
func ReadStop(dir string) (StopRecord, error) {
	var r StopRecord
	if err := readRecord(dir, FileStop, &r); err != nil {
		return r, err
	}
	if r.Version != RecordVersion || r.Cause == "" {
		return r, fmt.Errorf("read %s: unsupported version %d or empty cause", FileStop, r.Version)
	}
	return r, nil
}

// Exists reports whether path exists (or cannot be told not to).
func Exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// syncRecord is WriteRecord made durable: once it returns, the record
// survives a power loss, with dir's own entry in its parent (the provider
// made dir just before the task started). Writers use it only where
// something is promised on the record's strength (see Start).
//
// The data is synced before the rename, so that the name never survives
// a power loss without its contents (ext4 may otherwise keep an empty
// file), and the rename after it, through dir; dir's entry in its parent
// was made earlier and is usually in the journal commit of the first
// sync already, so the last sync seldom waits.
func syncRecord(dir, name string, v any) error {
	if err := WriteRecord(dir, name, v, true); err != nil {
		return err
	}
	return syncDirs(dir, name)
}

// syncRecordFrom is syncRecord written into the file from (dir/from, made
// by the writer: a reservation of room), which is renamed to name: no new
// file, and no temp file to unlink. Unlinks are what make creating files
// slow on ext4 without a journal: each freed inode is passed over by the
// inode allocator for the next half minute or more (recently_deleted),
// which cost the supervisor a sixth of the machine's CPU at a hundred
// trivial tasks a second.
func syncRecordFrom(dir, from, name string, v any) error {
	b, err := json.Marshal(v)
	if err == nil {
		err = writeInto(filepath.Join(dir, from), append(b, '\n'))
	}
	if err == nil {
		err = os.Rename(filepath.Join(dir, from), filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return syncDirs(dir, name)
}

// syncDirs makes dir's entries, and dir's own entry in its parent,
// durable (for the record name).
func syncDirs(dir, name string) error {
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
