// Package local is the provider that runs tasks as processes on the
// adapter's own machine.
//
// Each task gets its own process group (so a stop reaches every process it
// spawned) and a directory <WorkDir>/<task id> holding stdout, stderr,
// payload, and small JSON records: state (the task's pid, process start
// time and boot ID, and its supervisor's pid and start time, written when
// it starts), exit (the outcome), and stop (a stop request, for the
// supervisor). Resources are not enforced yet (cgroups are roadmap item 5);
// GPU IDs are exported as CUDA_VISIBLE_DEVICES. Discover sizes the local
// node.
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
// The supervisor is a re-execution of a Go binary (normally the adapter
// itself, under the hidden subcommand SupervisorCommand; see
// SupervisorMain), rather than a /bin/sh wrapper, because:
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
// The cost is one small Go process per running task. SupervisorPath may
// name any binary whose main calls SupervisorMain, a dedicated tiny one
// included.
//
// The protocol: the provider starts "SupervisorPath __supervise <task
// dir>" with an empty environment, the task's stdout and stderr files as
// its own, the task's spec (argv, environment, working directory, timeout,
// grace; JSON, never a shell string, never on disk) on descriptor 3, and a
// status pipe on descriptor 4. The supervisor starts the task, writes the
// state record, reports the task's pid ("ready"), and once the task and
// every other process of its group have ended, publishes the exit record
// and sends it down the status pipe too. Start returns after "ready". To
// stop a task, any adapter publishes the stop record (its cause) and sends
// the supervisor SIGTERM; a SIGTERM without a stop record (an operator, a
// shutdown) stops the task too, with a vaguer cause.
//
// Records that more than one process may write (exit, stop) are published
// with link(2): the first complete record wins and is never replaced, and
// every writer that loses adopts the winner, so the adapter that started a
// task, a restarted one, and the supervisor never disagree.
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
package local
