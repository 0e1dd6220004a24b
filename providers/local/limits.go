package local

import "github.com/computeboard/computeboard/providers/local/supervise"

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
const DefaultMaxOutputBytes = supervise.DefaultMaxOutputBytes

func (l Limits) withDefaults() Limits {
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses
	}
	return l
}

func (l Limits) list() []supervise.Rlimit {
	return []supervise.Rlimit{
		{Resource: supervise.RlimitNOFILE, Value: l.OpenFiles},
		{Resource: supervise.RlimitNPROC, Value: l.Processes},
		{Resource: supervise.RlimitCORE, Value: l.CoreBytes},
	}
}
