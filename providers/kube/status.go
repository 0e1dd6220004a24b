package kube

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/computeboard/computeboard/providers"
)

// Error prefixes of an ended task's Status.Error: what ended it, so a
// reader (or a test) can tell the causes apart.
const (
	ReasonTimeout   = "timeout"   // the Job's DeadlineExceeded: it ran past its Timeout
	ReasonOOM       = "oom"       // its container was OOMKilled
	ReasonEvicted   = "evicted"   // evicted, preempted or otherwise disrupted: lost
	ReasonNodeLost  = "node_lost" // its node went away: lost
	ReasonDeleted   = "deleted"   // its Job was deleted, not by Stop: lost
	ReasonCancelled = "cancelled" // Stop deleted it
	ReasonFailed    = "failed"    // a non-zero exit, and the rest
)

// status maps a Job and its Pods to a task Status (without output paths).
//
//	no terminal condition, no Pod running        → pending
//	no terminal condition, a Pod running (or its end not yet on the Job)
//	                                             → running
//	Complete                                     → succeeded, exit 0
//	Failed, DeadlineExceeded                     → failed, TimedOut
//	Failed, the container OOMKilled              → failed, OOMKilled
//	Failed, the Pod evicted, preempted, or disrupted (DisruptionTarget,
//	the Job's pod failure policy)                → lost (evicted; node_lost when its node is gone)
//	Failed, otherwise                            → failed, the container's exit code
//	being deleted, AnnotStopped set              → cancelled
//	being deleted otherwise                      → lost (deleted)
func status(j *batchv1.Job, pods []*corev1.Pod) providers.Status {
	pod := newest(pods)
	var st providers.Status
	var term *corev1.ContainerStateTerminated
	if cs := containerStatus(pod); cs != nil {
		switch {
		case cs.State.Running != nil:
			st.StartedAt = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			term = cs.State.Terminated
			st.StartedAt, st.FinishedAt = term.StartedAt.Time, term.FinishedAt.Time
		}
	}
	if st.StartedAt.IsZero() && pod != nil && pod.Status.StartTime != nil && pod.Status.Phase != corev1.PodPending {
		st.StartedAt = pod.Status.StartTime.Time
	}
	complete, failed := condition(j, batchv1.JobComplete), condition(j, batchv1.JobFailed)
	switch {
	case complete != nil:
		st.State = providers.StateSucceeded
		st.ExitCode = ptr(0)
		if j.Status.CompletionTime != nil && st.FinishedAt.IsZero() {
			st.FinishedAt = j.Status.CompletionTime.Time
		}
		at(&st.FinishedAt, complete.LastTransitionTime.Time)
	case failed != nil:
		st.State = providers.StateFailed
		at(&st.FinishedAt, failed.LastTransitionTime.Time)
		why := failed.Reason
		if failed.Message != "" {
			why += ": " + failed.Message
		}
		lost, reason := disrupted(pod)
		switch {
		case failed.Reason == batchv1.JobReasonDeadlineExceeded:
			// First: the Job controller deletes the Pods of a Job past its
			// deadline.
			st.TimedOut = true
			st.Error = ReasonTimeout + ": the Job ran past its activeDeadlineSeconds (" + why + ")"
		case lost != "":
			st.State = providers.StateLost
			st.Error = lost + ": " + reason
		case failed.Reason == batchv1.JobReasonPodFailurePolicy && strings.Contains(failed.Message, string(corev1.DisruptionTarget)):
			// Its Pod is gone: the Job's condition is all that is left.
			st.State = providers.StateLost
			st.Error = ReasonEvicted + ": the Pod was evicted, preempted or lost with its node (" + why + ")"
		case term != nil && term.Reason == "OOMKilled":
			st.OOMKilled = true
			st.Error = ReasonOOM + ": the container went over its memory limit (OOMKilled, exit code " + fmt.Sprint(term.ExitCode) + ")"
		case term != nil:
			st.ExitCode = ptr(int(term.ExitCode))
			st.Error = fmt.Sprintf("%s: the container exited with code %d (%s; %s)", ReasonFailed, term.ExitCode, term.Reason, why)
		default:
			st.Error = ReasonFailed + ": " + why
		}
	case j.DeletionTimestamp != nil:
		st.FinishedAt = j.DeletionTimestamp.Time
		if _, ok := j.Annotations[AnnotStopped]; ok {
			st.State = providers.StateCancelled
			st.Error = ReasonCancelled + ": the Job was deleted on request"
		} else {
			st.State = providers.StateLost
			st.Error = ReasonDeleted + ": the Job was deleted outside computeboard"
		}
	case pod != nil && pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "":
		// Running, or ended with the Job's condition still to come.
		st.State = providers.StateRunning
		st.FinishedAt = time.Time{}
	default:
		st.State = providers.StatePending
		st.StartedAt, st.FinishedAt = time.Time{}, time.Time{}
	}
	if st.State.Terminal() {
		if st.StartedAt.IsZero() && j.Status.StartTime != nil {
			st.StartedAt = j.Status.StartTime.Time
		}
		at(&st.FinishedAt, st.StartedAt)
		if st.FinishedAt.Before(st.StartedAt) {
			st.FinishedAt = st.StartedAt
		}
	}
	return st
}

// disrupted says whether the Pod ended for reasons of the cluster's, not
// its own: the prefix (ReasonEvicted, ReasonNodeLost) and the reason, or
// "".
func disrupted(pod *corev1.Pod) (string, string) {
	if pod == nil {
		return "", ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			prefix := ReasonEvicted
			if c.Reason == "DeletionByPodGC" || c.Reason == "DeletionByTaintManager" {
				prefix = ReasonNodeLost // its node is gone, or not ready
			}
			return prefix, strings.TrimSpace(c.Reason + " " + c.Message)
		}
	}
	switch pod.Status.Reason {
	case "Evicted", "Preempting", "Shutdown", "Terminated":
		return ReasonEvicted, strings.TrimSpace(pod.Status.Reason + " " + pod.Status.Message)
	case "NodeLost", "NodeAffinity", "UnexpectedAdmissionError":
		return ReasonNodeLost, strings.TrimSpace(pod.Status.Reason + " " + pod.Status.Message)
	}
	return "", ""
}

// condition returns the Job's condition of type typ when it is true.
func condition(j *batchv1.Job, typ batchv1.JobConditionType) *batchv1.JobCondition {
	for i, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

// terminal reports whether the Job has ended (a terminal condition).
func terminal(j *batchv1.Job) bool {
	return condition(j, batchv1.JobComplete) != nil || condition(j, batchv1.JobFailed) != nil
}

// newest is the Pod created last (a Job of backoffLimit 0 has one, but a
// disrupted Pod may have been replaced).
func newest(pods []*corev1.Pod) *corev1.Pod {
	if len(pods) == 0 {
		return nil
	}
	return slices.MaxFunc(pods, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// containerStatus is the status of the Pod's task container.
func containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i, cs := range pod.Status.ContainerStatuses {
		if cs.Name == ContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// at sets *t to v when *t is unset.
func at(t *time.Time, v time.Time) {
	if t.IsZero() {
		*t = v
	}
}
