package supervise

import (
	"encoding/json"
	"syscall"
	"time"
)

// Spec is everything needed to run a task's process and record it: the
// provider builds it in Start and either runs it itself (Start, then
// Supervise, in-process) or hands it to a supervisor as JSON on SpecFD.
// Argv and Env are lists, never a shell string.
type Spec struct {
	Provider  string            `json:"provider"`
	TaskID    string            `json:"task_id"`
	Argv      []string          `json:"argv"`
	Env       []string          `json:"env"`
	Cwd       string            `json:"cwd"`
	Timeout   time.Duration     `json:"timeout,omitempty"`
	KillGrace time.Duration     `json:"kill_grace"`
	StartedAt time.Time         `json:"started_at"`
	Labels    map[string]string `json:"labels,omitempty"`
	Note      json.RawMessage   `json:"note,omitempty"` // recorded with the labels
	// Credential is the user the task's process switches to; nil runs it
	// as the process that starts it.
	Credential *Credential `json:"credential,omitempty"`
	// Limits are set on the task's process before it runs (after, for a
	// task watched in-process; see Start).
	Limits []Rlimit `json:"limits,omitempty"`
	// MaxOutput caps each of stdout and stderr, in bytes; negative: no
	// cap; zero: DefaultMaxOutputBytes.
	MaxOutput int64 `json:"max_output"`
	// Cgroup is the cgroup the task's process starts in; nil: unconfined.
	Cgroup *Cgroup `json:"cgroup,omitempty"`
}

// DefaultMaxOutputBytes is the cap on each of a task's stdout and stderr
// for a Spec that does not say (MaxOutput 0).
const DefaultMaxOutputBytes = 64 << 20

// Credential is the account the task's process takes: only set when the
// process that starts it must switch to it (a root provider running a
// task as a named user).
type Credential struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
}

func (c *Credential) sys() *syscall.Credential {
	if c == nil {
		return nil
	}
	// Groups is never nil here, so the child calls setgroups(2) and keeps
	// none of the provider's supplementary groups.
	return &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: append([]uint32{}, c.Groups...)}
}

// ProcIdentity names one process for as long as it lives: pid plus its
// start time in clock ticks after boot. Zero means none.
type ProcIdentity struct {
	PID        int
	StartTicks uint64
	// Server: the process is a supervisor server (Serve), which
	// supervises many tasks and lives on after each.
	Server bool
}
