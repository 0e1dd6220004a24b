package slurm

import (
	"log/slog"
	"time"
)

// Config configures a Provider. The zero value of every field but WorkDir
// is useful.
type Config struct {
	// Name is stamped on every Handle and Comment (default "slurm").
	Name string
	// Partition is where jobs are submitted (--partition) and whose nodes
	// Nodes lists. Empty: the cluster's default partition, and every node.
	Partition string
	// BinDir holds sbatch, squeue, sinfo, scancel and scontrol. Empty:
	// looked up on PATH.
	BinDir string
	// SlurmConf is the SLURM_CONF the commands run with. Empty: none, so
	// the commands use their built-in default (/etc/slurm/slurm.conf).
	SlurmConf string
	// WorkDir holds one directory per task, <WorkDir>/<task id>: its
	// record, payload, stdout, stderr and default working directory.
	// Required; created if missing. Jobs read and write it on their compute
	// node, so it must be the same path on a file system every node of
	// the partition shares (on one machine, any directory).
	WorkDir string
	// Env is the environment every task starts from, before Task.Env; nil
	// means empty. Nothing comes from the adapter's environment.
	Env map[string]string
	// User is the account tasks run as when Task.User is empty. A provider
	// running as root submits with sbatch --uid; one that is not can only
	// run tasks as its own user. Empty: the provider's own user.
	User string
	// AllowRoot lets tasks run as root (the provider runs as root and no
	// user is named, or the user's uid is 0). Without it such a Start
	// fails with providers.ErrInvalidTask.
	AllowRoot bool
	// PollInterval is how long one squeue --json answers every Poll
	// (default 1s): Polls within it share one call.
	PollInterval time.Duration
	// CommandTimeout bounds each Slurm command (default 30s).
	CommandTimeout time.Duration
	// JobNamePrefix starts every job's name (default "cb-"): the job of
	// task T is named JobNamePrefix+T.
	JobNamePrefix string
	// REST, when set, reaches Slurm through slurmrestd with JWT (see
	// REST) instead of the commands; Suspend, Resume and Requeue still
	// run scontrol (BinDir, SlurmConf), which v0.0.38 lacks.
	REST *RESTConfig
	// Transport talks to Slurm (default: REST when set, else the CLI with
	// BinDir, SlurmConf and CommandTimeout).
	Transport Transport
	// Logger gets debug lines (default: discard).
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultName           = "slurm"
	DefaultPollInterval   = time.Second
	DefaultCommandTimeout = 30 * time.Second
	DefaultJobNamePrefix  = "cb-"
)
