package local

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Clock tells the time; internal/clock's Real and Fake satisfy it.
type Clock interface {
	Now() time.Time
}

// Config configures a Provider. The zero value of every field but WorkDir
// is useful.
type Config struct {
	// Name is stamped on every Handle (default "local"). Give each local
	// provider in one adapter its own name.
	Name string
	// WorkDir holds one directory per task, <WorkDir>/<task id>. Required;
	// created if missing. A provider running as root sets its mode to 0711,
	// so that tasks running as other users can reach their own directories
	// but not list anyone's; every directory above it must be searchable
	// by the task users too, or Start says which one is not. Otherwise it
	// is created with mode 0700. Task directories are removed only by
	// Prune, which the adapter calls with its retention.
	WorkDir string
	// Env is the environment every task starts from, before Task.Env. Nil
	// means empty: this package never reads the adapter's own environment,
	// so the adapter passes PATH, LANG and the like explicitly. HOME, USER
	// and LOGNAME here are overridden (HOME is the task's work directory,
	// USER and LOGNAME its user); Task.Env may still set them.
	Env map[string]string
	// User is the account tasks run as when Task.User is empty: a user
	// name or numeric uid in the machine's user database. When this
	// process runs as root, each task's process switches to its user (uid,
	// primary gid and the user's groups); a provider not running as root
	// can only run tasks as its own user and refuses any other. Empty
	// means no default.
	User string
	// AllowRoot lets tasks run as root: a task naming no user (nor a
	// default User) on a provider running as root, or naming a user whose
	// uid is 0. Without it such a Start fails with providers.ErrInvalidTask.
	AllowRoot bool
	// Limits are the resource limits every task starts with; see Limits
	// for the defaults.
	Limits Limits
	// MaxOutputBytes caps each of a task's stdout and stderr files
	// (default DefaultMaxOutputBytes, 64 MiB): output past it is read and
	// discarded, and Status.StdoutDropped or StderrDropped counts it; the
	// task is not disturbed. Negative means no cap.
	MaxOutputBytes int64
	// Logger gets debug lines when tasks start and end, and the warnings
	// nobody can return to (default: discard).
	Logger *slog.Logger
	// Clock stamps StartedAt and FinishedAt (default: the wall clock).
	// Timeout and KillGrace are measured by real timers, not by Clock.
	Clock Clock
	// KillGrace is how long a task's processes get between SIGTERM and
	// SIGKILL when it is stopped or times out (default 5s).
	KillGrace time.Duration
	// MaxConcurrent caps the tasks running at once; beyond it Start returns
	// providers.ErrAtCapacity (default 0: no cap).
	MaxConcurrent int
	// SupervisorPath is an absolute path to an executable whose main
	// starts with supervise.Dispatch: cmd/cb-supervisor, made for it, or
	// any binary wired so (the adapter itself, as a slower fallback). Each task
	// then runs under its own small supervisor process, which outlives this
	// one: a task's outcome is recorded, and its timeout enforced, even if
	// the adapter dies while it runs, and a restarted adapter reports the
	// real outcome. The supervisor stamps FinishedAt by the wall clock
	// (never before StartedAt), not by Clock.
	//
	// Empty (the default) watches tasks in this process: a task that ends
	// while no adapter is running is then reported lost.
	SupervisorPath string
	// SupervisorServer, with SupervisorPath, runs every task under one
	// supervisor server per WorkDir (supervise.Serve, started on demand,
	// exiting when idle) instead of a supervisor process per task: the same
	// records and the same guarantee (the server, not the adapter, is each
	// task's parent), without a process start and a Go runtime start per
	// task. Linux only; elsewhere it is ignored. The server lives under the
	// tasks' Limits (it sets them on itself, for the tasks to inherit).
	SupervisorServer bool
	// Cgroups confines each task in a control group of its own: its
	// CPUCores as a CPU quota, its MemoryBytes as a memory limit without
	// swap, its Placement.CPUs as a CPU set, and a stop that kills every
	// process it started. The zero value confines tasks under
	// DefaultCgroupParent where the machine allows it (as root, on Linux);
	// see Provider.Confinement for what is enforced.
	Cgroups Cgroups
}

// withDefaults returns cfg with defaults filled in, or why it is invalid.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		cfg.Name = "local"
	}
	if cfg.WorkDir == "" {
		return cfg, fmt.Errorf("local: config: WorkDir is required")
	}
	dir, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return cfg, fmt.Errorf("local: config: WorkDir: %w", err)
	}
	cfg.WorkDir = dir
	if err := makeWorkDir(dir); err != nil {
		return cfg, fmt.Errorf("local: config: %w", err)
	}
	cfg.Env = maps.Clone(cfg.Env)
	if err := checkEnv(cfg.Env); err != nil {
		return cfg, fmt.Errorf("local: config: Env: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	switch {
	case cfg.KillGrace < 0:
		return cfg, fmt.Errorf("local: config: negative KillGrace %v", cfg.KillGrace)
	case cfg.KillGrace == 0:
		cfg.KillGrace = 5 * time.Second
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Limits.OpenFiles < minOpenFiles {
		// The supervisor lives under them too, and needs a few of its own.
		return cfg, fmt.Errorf("local: config: Limits.OpenFiles %d is below %d", cfg.Limits.OpenFiles, minOpenFiles)
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if cfg.MaxConcurrent < 0 {
		return cfg, fmt.Errorf("local: config: negative MaxConcurrent %d", cfg.MaxConcurrent)
	}
	if cfg.SupervisorPath != "" {
		if !filepath.IsAbs(cfg.SupervisorPath) {
			return cfg, fmt.Errorf("local: config: SupervisorPath %q is not an absolute path", cfg.SupervisorPath)
		}
		fi, err := os.Stat(cfg.SupervisorPath)
		if err != nil {
			return cfg, fmt.Errorf("local: config: SupervisorPath: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return cfg, fmt.Errorf("local: config: SupervisorPath %s is not an executable file", cfg.SupervisorPath)
		}
	}
	parent := strings.Trim(filepath.Clean("/"+cfg.Cgroups.Parent), "/")
	if parent == "" {
		parent = DefaultCgroupParent
	}
	cfg.Cgroups.Parent = parent
	return cfg, nil
}

// makeWorkDir creates the work directory if needed. A root provider runs
// tasks as other users, who must be able to pass through it to their own
// task directories, but neither list nor write it.
func makeWorkDir(dir string) error {
	if os.Geteuid() != 0 {
		return os.MkdirAll(dir, 0o700)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != 0o711 {
		return os.Chmod(dir, 0o711)
	}
	return nil
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
