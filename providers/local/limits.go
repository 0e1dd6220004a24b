package local

import "fmt"

// Limits are the resource limits (setrlimit(2)) every task starts with.
// Each is set as both the soft and the hard limit, so the task cannot
// raise it, and never above the provider's own hard limit (a provider
// without CAP_SYS_RESOURCE could not raise it anyway). Zero fields take
// the defaults.
type Limits struct {
	// OpenFiles is RLIMIT_NOFILE, the open descriptors per process
	// (default 4096; at least 16).
	OpenFiles uint64
	// Processes is RLIMIT_NPROC (default 4096). The kernel counts it per
	// real user ID, across every process and thread of that user on the
	// machine (all the tasks that share a user, and anything else running
	// as it), so it bounds a fork bomb rather than one task; root ignores
	// it, so it is moot for a task run as root.
	Processes uint64
	// CoreBytes is RLIMIT_CORE, the largest core dump (default 0: none; a
	// core dump may hold secrets the task had in memory).
	CoreBytes uint64
}

// Default resource limits.
const (
	DefaultOpenFiles = 4096
	DefaultProcesses = 4096
)

// minOpenFiles is the least Limits.OpenFiles New accepts: a supervisor sets
// the limits on itself before it makes the task's output pipes.
const minOpenFiles = 16

// DefaultMaxOutputBytes is the default cap on each of a task's stdout and
// stderr files.
const DefaultMaxOutputBytes = 64 << 20

func (l Limits) withDefaults() Limits {
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses
	}
	return l
}

// rlimit is one limit to set: soft and hard both become Value.
type rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

func (l Limits) list() []rlimit {
	return []rlimit{
		{Resource: rlimitNOFILE, Value: l.OpenFiles},
		{Resource: rlimitNPROC, Value: l.Processes},
		{Resource: rlimitCORE, Value: l.CoreBytes},
	}
}

// applyOwnLimits sets limits on the calling process, so that the children
// it starts from now on inherit them: the supervisor calls it right before
// it starts the task.
func applyOwnLimits(limits []rlimit) error {
	for _, l := range limits {
		if err := setLimit(0, l); err != nil {
			return fmt.Errorf("set resource limit %d to %d: %w", l.Resource, l.Value, err)
		}
	}
	return nil
}

// applyChildLimits sets limits on a started process (prlimit(2)): the
// provider calls it right after it starts a task in-process, which leaves
// the task a moment to run under the provider's own limits.
func applyChildLimits(pid int, limits []rlimit) error {
	for _, l := range limits {
		if err := setLimit(pid, l); err != nil {
			return fmt.Errorf("set resource limit %d of pid %d to %d: %w", l.Resource, pid, l.Value, err)
		}
	}
	return nil
}
