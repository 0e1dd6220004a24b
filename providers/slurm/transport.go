package slurm

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Transport is how the provider talks to Slurm: one method per operation,
// in Slurm's terms, so that another transport (slurmrestd with JWT, say)
// can replace the command-line one. Only CLI is implemented.
type Transport interface {
	// Submit submits a batch job and returns its job ID.
	Submit(ctx context.Context, s Submission) (string, error)
	// Jobs lists every job slurmctld still knows, finished ones included
	// (for MinJobAge), in one call.
	Jobs(ctx context.Context) ([]Job, error)
	// Nodes lists the cluster's nodes.
	Nodes(ctx context.Context) ([]NodeInfo, error)
	// Cancel cancels a job; Signal sends sig to every process of its
	// steps, the batch step included.
	Cancel(ctx context.Context, jobID string) error
	Signal(ctx context.Context, jobID string, sig syscall.Signal) error
	// Suspend, Resume and Requeue are scontrol's operations of those
	// names; Release makes a job eligible now (StartTime=now).
	Suspend(ctx context.Context, jobID string) error
	Resume(ctx context.Context, jobID string) error
	Requeue(ctx context.Context, jobID string) error
	Release(ctx context.Context, jobID string) error
}

// Submission is one sbatch call. Every field is passed as a separate
// argument or on stdin, never through a shell.
type Submission struct {
	Name      string        // --job-name
	Comment   string        // --comment
	Partition string        // --partition; empty: the cluster's default
	Script    []byte        // the batch script, on stdin
	Dir       string        // --chdir
	Stdout    string        // --output (Slurm expands %-patterns: see validPath)
	Stderr    string        // --error
	TimeLimit time.Duration // --time, rounded up to whole minutes; 0: none
	CPUs      int           // --cpus-per-task; 0: Slurm's default (1)
	MemoryMiB int64         // --mem in MiB; 0: Slurm's default
	NodeList  string        // --nodelist; empty: any node
	Gres      string        // --gres ("gpu:2", "gpu:a100:1")
	User      string        // --uid (root only); empty: the submitter
}

// args returns sbatch's arguments for s.
func (s Submission) args() []string {
	a := []string{"--parsable", "--export=NONE", "--open-mode=append",
		"--job-name=" + s.Name, "--comment=" + s.Comment,
		"--chdir=" + s.Dir, "--output=" + s.Stdout, "--error=" + s.Stderr}
	if s.Partition != "" {
		a = append(a, "--partition="+s.Partition)
	}
	if s.TimeLimit > 0 {
		a = append(a, "--time="+strconv.FormatInt(int64((s.TimeLimit+time.Minute-1)/time.Minute), 10))
	}
	if s.CPUs > 0 {
		a = append(a, "--cpus-per-task="+strconv.Itoa(s.CPUs))
	}
	if s.MemoryMiB > 0 {
		a = append(a, "--mem="+strconv.FormatInt(s.MemoryMiB, 10)+"M")
	}
	if s.NodeList != "" {
		a = append(a, "--nodelist="+s.NodeList)
	}
	if s.Gres != "" {
		a = append(a, "--gres="+s.Gres)
	}
	if s.User != "" {
		a = append(a, "--uid="+s.User)
	}
	return a
}

// RunFunc runs a Slurm command (name is "sbatch", "squeue", ...) with
// stdin and returns its stdout; a failure carries stderr.
type RunFunc func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error)

// CLI is the Transport over Slurm's commands (sbatch, squeue --json,
// sinfo --json, scancel, scontrol), as Slurm 22.05 ships them: JSON for
// everything read, --parsable for sbatch, no human-readable table parsed.
type CLI struct {
	// Run runs a command; nil: Exec with the zero config (commands on
	// PATH, the environment's SLURM_CONF).
	Run RunFunc
}

// Exec returns a RunFunc that runs Slurm's commands from binDir (empty:
// PATH) with SLURM_CONF=conf (empty: inherited), each bounded by timeout.
func Exec(binDir, conf string, timeout time.Duration) RunFunc {
	return func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		path := name
		if binDir != "" {
			path = filepath.Join(binDir, name)
		}
		cmd := exec.CommandContext(ctx, path, args...)
		// The client's environment: only what Slurm's clients need. With
		// --export=NONE none of it reaches a job, and sbatch reads SBATCH_*
		// variables as options: none of the adapter's may slip in.
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		if conf != "" {
			cmd.Env = append(cmd.Env, "SLURM_CONF="+conf)
		}
		cmd.Stdin = bytes.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = time.Second
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return stdout.Bytes(), &CommandError{Name: name, Args: args, Err: err, Stderr: strings.TrimSpace(stderr.String())}
		}
		return stdout.Bytes(), nil
	}
}

// CommandError is a Slurm command that failed.
type CommandError struct {
	Name   string
	Args   []string
	Err    error
	Stderr string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s %s: %v: %s", e.Name, strings.Join(e.Args, " "), e.Err, e.Stderr)
}

func (e *CommandError) Unwrap() error { return e.Err }

var _ Transport = (*CLI)(nil)

func (c *CLI) run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	run := c.Run
	if run == nil {
		run = Exec("", "", time.Minute)
	}
	return run(ctx, name, args, stdin)
}

// Submit runs sbatch --parsable with the script on stdin.
func (c *CLI) Submit(ctx context.Context, s Submission) (string, error) {
	out, err := c.run(ctx, "sbatch", s.args(), s.Script)
	if err != nil {
		return "", err
	}
	// --parsable prints "jobid" or "jobid;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if !validJobID(id) {
		return "", fmt.Errorf("sbatch --parsable printed %q, not a job ID", out)
	}
	return id, nil
}

// Jobs runs squeue --json -t all.
func (c *CLI) Jobs(ctx context.Context) ([]Job, error) {
	out, err := c.run(ctx, "squeue", []string{"--json", "--states=all"}, nil)
	if err != nil {
		return nil, err
	}
	return decodeJobs(out)
}

// Nodes runs sinfo --json.
func (c *CLI) Nodes(ctx context.Context) ([]NodeInfo, error) {
	out, err := c.run(ctx, "sinfo", []string{"--json"}, nil)
	if err != nil {
		return nil, err
	}
	return decodeNodes(out)
}

// Cancel runs scancel.
func (c *CLI) Cancel(ctx context.Context, jobID string) error {
	_, err := c.run(ctx, "scancel", []string{jobID}, nil)
	return err
}

// Signal runs scancel --signal=SIG --full: --full reaches the batch step
// (the task's own process: the batch script execs it) and its children,
// which scancel leaves alone by default.
func (c *CLI) Signal(ctx context.Context, jobID string, sig syscall.Signal) error {
	_, err := c.run(ctx, "scancel", []string{"--signal=" + strconv.Itoa(int(sig)), "--full", jobID}, nil)
	return err
}

// Suspend runs scontrol suspend.
func (c *CLI) Suspend(ctx context.Context, jobID string) error {
	return c.scontrol(ctx, "suspend", jobID)
}

// Resume runs scontrol resume.
func (c *CLI) Resume(ctx context.Context, jobID string) error {
	return c.scontrol(ctx, "resume", jobID)
}

// Requeue runs scontrol requeue.
func (c *CLI) Requeue(ctx context.Context, jobID string) error {
	return c.scontrol(ctx, "requeue", jobID)
}

// Release runs scontrol update JobId=N StartTime=now: a requeued job is
// otherwise held back about two minutes (BeginTime).
func (c *CLI) Release(ctx context.Context, jobID string) error {
	return c.scontrol(ctx, "update", "JobId="+jobID, "StartTime=now")
}

func (c *CLI) scontrol(ctx context.Context, args ...string) error {
	_, err := c.run(ctx, "scontrol", args, nil)
	return err
}

func validJobID(id string) bool {
	if id == "" || len(id) > 20 {
		return false
	}
	_, err := strconv.ParseUint(id, 10, 64)
	return err == nil
}
