// Package local is the provider that runs tasks as processes on the
// adapter's own machine.
//
// Each task gets its own process group (so a stop reaches every process it
// spawned) and a directory <WorkDir>/<task id> holding stdout, stderr,
// payload, work (the task's own directory), and small JSON records: state
// (the task's pid, process start time and boot ID, its supervisor's pid
// and start time, and its cgroup, written when it starts), exit (the
// outcome, with any output dropped past the cap), and stop (a stop
// request, for the supervisor). Each task also runs in a control group of its own, which
// enforces its CPU, memory and CPU-set reservation and lets a stop reach
// every process it started (see Confinement). Discover sizes the local
// node; Prune removes the directories of tasks that ended before a cutoff
// (the adapter's retention).
//
// # Who a task runs as, and what it can reach
//
// A task runs as Task.User, else Config.User: a user name or numeric uid
// from the machine's user database. A provider running as root starts the
// task's process with that user's uid, primary gid and groups (its
// supervisor stays root); it refuses a task that would run as root (no
// user named, or one with uid 0) unless Config.AllowRoot is set. A
// provider not running as root runs every task as its own user, and
// refuses a task naming any other. Unknown users and refusals are
// providers.ErrInvalidTask.
//
// A task's environment is only Config.Env, then HOME (the task's work
// directory), USER and LOGNAME (its user's name), then Task.Env (which may
// set those three), then CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and
// COMPUTEBOARD_PAYLOAD, which the provider sets last (the task
// directory's payload file, or /dev/null for a task without a payload:
// an empty file either way, and no file is made). The two GPU
// variables list the task's Placement.GPUs then Placement.MIG (UUIDs), in
// order; a task placed on no GPU gets CUDA_VISIBLE_DEVICES="" and
// NVIDIA_VISIBLE_DEVICES=void, so it sees none. (They steer CUDA and the
// NVIDIA container runtime; they do not stop a task opening /dev/nvidia*.) Nothing is inherited from the adapter's
// own environment, and the supervisor runs with an empty one. Running as
// another user, a task cannot read the adapter's /proc/<pid>/environ,
// memory or files.
//
// Permissions, for a root provider running tasks as other users: WorkDir
// is 0711 (users pass through, nobody lists it); a task directory is
// 0711 and root's, and so are the records, stdout and stderr in it (0600),
// so a task can neither read another's output nor replace its own records
// or output files (with a link to a secret, say); the work directory
// (0700, the default working directory and HOME) and payload (0600) belong
// to the task's user. Tasks that share a user can reach each other's work
// directories and payloads: give accounts distinct users where that
// matters. A provider not running as root makes the same tree, all its
// own and 0700.
//
// # Resource limits and output caps
//
// Every task starts with the resource limits in Config.Limits, as both
// soft and hard limit (so it cannot raise them), never above the
// provider's own hard limit:
//
//   - RLIMIT_NOFILE, open descriptors per process: Limits.OpenFiles,
//     default 4096;
//   - RLIMIT_NPROC, processes and threads: Limits.Processes, default 4096;
//     the kernel counts it per real uid over the whole machine (every task
//     sharing the user), and ignores it for root;
//   - RLIMIT_CORE, core dump size: Limits.CoreBytes, default 0 (none).
//
// A supervisor sets them on itself right before it starts the task (it
// exists for that task alone), so the task runs under them from its first
// instruction. Watched in-process, they are set on the task with prlimit
// right after it starts, which leaves it a moment under the provider's own
// limits; a root provider without CAP_SYS_RESOURCE (as in most containers)
// cannot set them on another user's process at all, and then logs a
// warning and leaves the task under its own limits. Use a supervisor.
//
// Stdout and stderr are each capped at Config.MaxOutputBytes (default 64
// MiB). The task writes to pipes, which the supervisor (or, in-process,
// the provider) copies into the files up to the cap, then reads and
// discards, so the task neither blocks nor is disturbed; the exit record
// and Status count the dropped bytes (StdoutDropped, StderrDropped,
// OutputTruncated). Because the supervisor holds the cap, it holds while
// no adapter runs; if the supervisor itself is killed, what the task
// writes afterwards is lost (its writes fail with EPIPE). A cap on files
// (RLIMIT_FSIZE) would cap every file the task writes and kill it with
// SIGXFSZ, so it is not used.
//
// # Confinement
//
// Config.Cgroups (zero value: on) puts each task in a cgroup of its own,
// <hierarchy>/<Cgroups.Parent>/<provider name>/<task id>, Parent being
// "computeboard" by default, a path from the root of each cgroup
// hierarchy (the provider makes it, and enables the controllers it needs
// on the way down, on cgroup v2). In it:
//
//   - Resources.CPUCores is a CFS quota: CPUCores × 100ms per 100ms
//     (cpu.max on v2, cpu.cfs_quota_us and cpu.cfs_period_us on v1);
//   - Resources.MemoryBytes is a hard memory limit, with swap off
//     (memory.max and memory.swap.max=0; memory.limit_in_bytes and
//     memory.memsw.limit_in_bytes, or memory.swappiness=0 without memsw).
//     A task whose process the kernel kills for going over it ends
//     StateFailed with Status.OOMKilled (the cgroup's oom_kill count, read
//     by the supervisor and kept in the exit record);
//   - Placement.CPUs is its cpuset, and Placement.NUMA (when ≥ 0) its
//     memory node; empty, the parent's;
//   - a stop or timeout reaches every process in the cgroup, those that
//     left the task's process group (setsid) included: SIGTERM to each,
//     then after KillGrace cgroup.kill (v2), or a freeze, SIGKILL to each
//     and a thaw (v2's cgroup.freeze, v1's freezer). A task that ends on
//     its own takes what it left running with it, as with its group.
//
// A zero CPUCores or MemoryBytes means no limit on that. Each controller
// comes from cgroup v2 where the v2 hierarchy offers it, from its v1
// hierarchy otherwise (hybrid machines mix them). The task's process is
// created inside its cgroup, never moved there after it has run (see
// startIn), while the supervisor stays outside it, so the supervisor
// survives the task's OOM kill and records it. The cgroup is removed once
// the task has ended; Prune removes any a supervisor could not. A
// supervisor server instead keeps the cgroup v1 directories of a task
// that ended cleanly (on its own, nothing left running, no OOM kill,
// little memory still charged), renamed aside, and gives them to a later
// task, with that task's limits and CPU count (supervise.Spares): a
// rename is cheaper than making and removing a cgroup, which was a third
// of the server's CPU per trivial task. It removes them when it exits;
// Prune removes those of a server that was killed.
//
// Confinement needs root and Linux (v2 also Linux 5.7, for
// CLONE_INTO_CGROUP). Where a control is missing (not root, a controller
// not mounted, Cgroups.Disable), New logs once what is missing, and
// tasks run without it: Provider.Confinement says what is enforced, so
// the adapter claims no more.
//
// # Supervisors: outcomes that survive the adapter
//
// Only a process's parent can collect its exit status, so a task that is
// the adapter's child loses its outcome when the adapter dies. With
// Config.SupervisorPath set, every task runs under a supervisor instead: a
// small process, started by the provider in a session of its own, that
// starts the task as its child (in a process group of its own), waits for
// it, and publishes the outcome to the exit record itself. The adapter
// dying (even by SIGKILL) does not touch it. The supervisor is the same
// Go code the provider would otherwise run in-process (supervise), so both
// modes classify outcomes, enforce timeouts and clear process groups
// identically; the supervisor also keeps enforcing Timeout while no
// adapter runs.
//
// The supervisor is a Go binary, cmd/cb-supervisor (package supervise,
// which imports only the standard library, so that it starts in about the
// time of /bin/true; any binary whose main hands supervise.Command to
// supervise.Main serves too, the adapter itself included, at the cost of
// its initialisation on every start), rather than a /bin/sh wrapper,
// because:
//
//   - nothing is ever parsed by a shell, and no shell need be installed;
//   - it sees the task's real wait status, so an exit code and a death by
//     signal stay distinct (a shell reports both as $?, 128+n being
//     ambiguous with exit(128+n));
//   - it sits outside the task's process group, so signals the provider
//     sends to the group (SIGTERM, SIGSTOP, SIGCONT, SIGKILL, a user's
//     SIGUSR1) reach the task exactly once and never the supervisor, which
//     can therefore SIGKILL the group after KillGrace and still record the
//     outcome; a wrapper inside the group would be stopped and killed with
//     it;
//   - a stop carries its cause (stopped, provider closed, timed out), so
//     cancelled, failed and timed out stay distinguishable after a restart.
//
// The cost is one small Go process per running task.
//
// The protocol: the provider starts "SupervisorPath __supervise <task
// dir>" with an empty environment, the task's stdout and stderr files as
// its own, the task's spec (argv, environment, working directory, user,
// resource limits, cgroup, output cap, timeout, grace; JSON, never a
// shell string, never on disk) on descriptor 3, and a status pipe on
// descriptor 4. The supervisor sets the limits on itself, makes the
// task's cgroup, starts the task in it as its user with pipes for stdout
// and stderr, writes the state record (naming the cgroup), reports the
// task's pid ("ready"), copies the output into the files up to the cap,
// and once the task and every other process of its group and cgroup have
// ended, removes the cgroup, publishes the exit record, sends it down the
// status pipe too, then syncs it and exits. Start returns after "ready". To
// stop a task, any adapter publishes the stop record (its cause) and sends
// the supervisor SIGTERM; a SIGTERM without a stop record (an operator, a
// shutdown) stops the task too, with a vaguer cause.
//
// # The supervisor server
//
// With Config.SupervisorServer (the adapter's default on Linux), one
// supervisor process serves every task of the work directory: the
// provider starts "SupervisorPath __serve <work dir>" on demand, in a
// session of its own, and it exits after 30 s with nothing to do. It runs
// the same supervise code and writes the same records, and it is each
// task's parent, so the guarantee is unchanged; what it saves is a process
// start and a Go runtime start per task, which cost several times a
// trivial task (BenchmarkStartToExit; the e2e bench's children CPU per
// job). The provider connects to its abstract unix socket, named after the
// work directory (peers of another user are refused), and sends the spec
// with the task's stdout and stderr as SCM_RIGHTS; the connection is then
// the task's status pipe (ready, later the exit record), and "stop" on it
// is the SIGTERM of a supervisor per task. The state record says
// supervisor_server, so an adapter that restarted asks the server over
// its socket to stop an adopted task (never signals it: that would stop
// every task), and watches the task's own process for its end (the server
// outlives it). The server sets the tasks' resource limits on itself
// before its first task, so they inherit them as a supervisor per task's
// do. If the server dies, its running tasks are lost, as a killed
// supervisor's task is: more tasks at once, which is the price of the
// shared process.
//
// Records that more than one process may write (exit, stop) are published
// with link(2): the first complete record wins and is never replaced, and
// every writer that loses adopts the winner, so the adapter that started a
// task, a restarted one, and the supervisor never disagree.
//
// Only the state record is synced to disk before the start is reported: it
// is the evidence that the task started, without which a restarted adapter
// reports "never started" and the job would run again. The exit record is
// sent to the provider first and synced right after (see
// supervise.SyncPublished for why that is safe), and stop records are not
// synced at all: only a live supervisor reads them.
//
// # Re-attaching after a restart
//
// A restarted adapter (a new Provider on the same WorkDir, given old
// handles) reports a task from its exit record when there is one.
// Otherwise the task is running while its leader (pid, start time and
// boot ID all matching) or its supervisor is alive; Stop, Suspend, Resume
// and Signal work on it, Stop through the supervisor, which records the
// real outcome. A supervised task is lost only if its supervisor died
// without recording an outcome (it was SIGKILLed, or the machine
// rebooted); the adapter that started it, if still alive, then stops
// what is left of it.
//
// Without a SupervisorPath, the provider watches its tasks in-process and
// a restarted adapter can re-attach only to tasks still running: a task
// that ends while no adapter runs is reported lost, because its exit
// status died with the adapter that was its parent. Stopping such a task
// after a restart records it cancelled without an exit code.
//
// # Learning of ends
//
// The provider is a providers.Notifier (see Provider.Ended): a task's end
// is notified as it happens, from the waiter that reaps the task (or its
// supervisor) once the outcome is published, so the adapter need not poll
// its tasks on a short tick. A task a restarted adapter finds running is
// watched through a pidfd on its supervisor (or, without one, its
// process), from the first Poll that finds it running.
package local
