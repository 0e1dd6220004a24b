// Package slurm is the provider that runs tasks as Slurm batch jobs.
//
// A Task becomes one sbatch submission (Start): a generated bash batch
// script that unsets the job's environment but for Slurm's own variables,
// the GPU variables Slurm sets for the job's GRES, HOME, USER and LOGNAME,
// exports Config.Env, Task.Env and COMPUTEBOARD_PAYLOAD (every word
// single-quoted), and execs the task's argv, so the batch step is the task
// itself; --export=NONE keeps the adapter's environment out of Slurm.
// The job is named JobNamePrefix+task ID and its --comment carries the
// provider's name, the task ID and its labels, so a task is found again
// in squeue alone; --time is Task.Timeout rounded up to whole minutes,
// --cpus-per-task the reserved cores rounded up, --mem the reserved
// memory, --nodelist the placement's node, --gres=gpu[:type]:N its GPUs.
// The handle's ID is the Slurm job ID; Poll and Stop also take a task ID
// (what a caller told ErrTaskExists knows).
//
// Each task has a directory <WorkDir>/<task id> (record, payload, stdout,
// stderr, work), which must be on a file system the partition's nodes
// share. Poll reads one squeue --json (all states, so finished jobs show
// for Slurm's MinJobAge) that every Poll within PollInterval shares; a
// terminal status is recorded in the task directory when first seen, so
// it outlives squeue's memory; a job neither lists is lost.
//
// Slurm states map to providers.State as status documents; the failed
// ones say their cause in Status.Error's prefix (ReasonTimeout, ...).
// Optional abilities: Suspender (scontrol suspend/resume), Signaler
// (scancel --signal --full), Requeuer (scontrol requeue, then StartTime=now),
// Lister, Prober; Nodes lists the partition's nodes (sinfo --json) as pool
// nodes.
//
// PartitionNodes lists every node of the partition, each that takes no
// jobs (drained, down, ...) with why: what the agent reads again while it
// runs.
//
// Slurm is reached through a Transport, chosen by config: CLI (the
// commands, with JSON output as Slurm 22.05 has it; the default) or REST
// (slurmrestd's OpenAPI v0.0.38 over net/http, with a JWT per user from a
// token file or a command, got again before it expires). v0.0.38 submits,
// lists jobs and nodes, cancels and signals; it has no suspend, resume or
// requeue, so REST runs scontrol for those: the abilities are the same
// over both.
package slurm
