package slurm

import (
	"fmt"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// Error prefixes of a failed task's Status.Error: the Slurm state that
// ended it, so a reader (or a test) can tell the causes apart.
const (
	ReasonTimeout   = "timeout"   // TIMEOUT, DEADLINE: ran past its time limit
	ReasonOOM       = "oom"       // OUT_OF_MEMORY
	ReasonNodeFail  = "node_fail" // NODE_FAIL, BOOT_FAIL: its node failed
	ReasonPreempted = "preempted" // PREEMPTED: Slurm preempted it
	ReasonCancelled = "cancelled" // CANCELLED
	ReasonFailed    = "failed"    // FAILED and the rest
)

// terminal reports whether a Slurm base state is final.
func terminal(state string) bool {
	switch state {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
		"BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT":
		return true
	}
	return false
}

// status maps a job to a task Status (without the output paths).
//
//	PENDING, CONFIGURING, REQUEUED, REQUEUE_HOLD, ... → pending
//	RUNNING, COMPLETING, SIGNALING, STAGE_OUT, ...    → running
//	SUSPENDED                                         → running, Suspended
//	COMPLETED                                         → succeeded, exit 0
//	FAILED                                            → failed, exit code (none when killed by a signal)
//	OUT_OF_MEMORY                                     → failed, OOMKilled
//	TIMEOUT, DEADLINE                                 → failed, TimedOut
//	CANCELLED                                         → cancelled
//	NODE_FAIL, BOOT_FAIL, PREEMPTED, ...              → failed, Error says which
func status(j Job) providers.Status {
	st := providers.Status{StartedAt: j.Started, FinishedAt: j.Ended}
	ws := syscall.WaitStatus(j.ExitStatus)
	exit := func() {
		if ws.Exited() {
			code := ws.ExitStatus()
			st.ExitCode = &code
		}
	}
	killed := func() string {
		if ws.Signaled() {
			return fmt.Sprintf(" (killed by signal %d, %v)", ws.Signal(), ws.Signal())
		}
		return ""
	}
	why := func(prefix, words string) string {
		s := prefix + ": " + words
		if j.Reason != "" && j.Reason != "None" {
			s += " (Slurm reason " + j.Reason + ")"
		}
		return s + killed()
	}
	switch j.State {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "POWER_UP_NODE":
		st.State = providers.StatePending
		st.StartedAt = time.Time{}
	case "RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "UPDATE_DB":
		st.State = providers.StateRunning
	case "SUSPENDED":
		st.State, st.Suspended = providers.StateRunning, true
	case "COMPLETED":
		st.State = providers.StateSucceeded
		exit()
		if st.ExitCode == nil || *st.ExitCode != 0 { // not seen, but an exit status is an exit status
			st.State = providers.StateFailed
			st.Error = why(ReasonFailed, "job completed with a non-zero status")
		}
	case "FAILED", "SPECIAL_EXIT":
		st.State = providers.StateFailed
		exit()
		st.Error = why(ReasonFailed, "job failed")
	case "OUT_OF_MEMORY":
		st.State, st.OOMKilled = providers.StateFailed, true
		st.Error = why(ReasonOOM, "job went over its memory limit")
	case "TIMEOUT", "DEADLINE":
		st.State, st.TimedOut = providers.StateFailed, true
		st.Error = why(ReasonTimeout, "job ran past its time limit")
	case "CANCELLED", "REVOKED":
		st.State = providers.StateCancelled
		st.Error = why(ReasonCancelled, "job cancelled")
	case "NODE_FAIL", "BOOT_FAIL":
		st.State = providers.StateFailed
		st.Error = why(ReasonNodeFail, "the job's node failed ("+j.Nodes+")")
	case "PREEMPTED":
		st.State = providers.StateFailed
		st.Error = why(ReasonPreempted, "Slurm preempted the job")
	default:
		// A state this provider does not know: say so, as running, so
		// the task is neither ended nor restarted on a guess.
		st.State = providers.StateRunning
		st.Error = "unknown Slurm job state " + j.State
	}
	if st.State.Terminal() && st.FinishedAt.IsZero() {
		st.FinishedAt = st.StartedAt
	}
	if st.State.Terminal() && !st.StartedAt.IsZero() && st.FinishedAt.Before(st.StartedAt) {
		st.FinishedAt = st.StartedAt
	}
	return st
}
