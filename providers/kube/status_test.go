package kube

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/computeboard/computeboard/providers"
)

var (
	t0 = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	t1 = t0.Add(10 * time.Second)
	t2 = t0.Add(20 * time.Second)
)

func mt(t time.Time) metav1.Time { return metav1.NewTime(t) }

// jobWith is a Job as the Job controller leaves it, with the given
// condition (none when typ is "").
func jobWith(typ batchv1.JobConditionType, reason, msg string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "cb-x", Namespace: "ns"}}
	j.Status.StartTime = ptr(mt(t0))
	if typ != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: mt(t2)}}
	}
	if typ == batchv1.JobComplete {
		j.Status.CompletionTime = ptr(mt(t2))
	}
	return j
}

// podIn is the Job's Pod in a phase with its container's state.
func podIn(phase corev1.PodPhase, state corev1.ContainerState) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cb-x-abcde", Namespace: "ns", CreationTimestamp: mt(t0)},
		Status: corev1.PodStatus{Phase: phase, StartTime: ptr(mt(t0)),
			ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: state}}},
	}
}

func terminated(code int32, reason string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: mt(t1), FinishedAt: mt(t2)}}
}

func TestStatus(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: mt(t1)}}
	evicted := podIn(corev1.PodFailed, terminated(137, "Error"))
	evicted.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"}}
	gcd := podIn(corev1.PodFailed, running)
	gcd.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists"}}
	stopped := jobWith("", "", "")
	stopped.DeletionTimestamp = ptr(mt(t2))
	stopped.Annotations = map[string]string{AnnotStopped: t2.Format(time.RFC3339)}
	deleted := jobWith("", "", "")
	deleted.DeletionTimestamp = ptr(mt(t2))

	tests := map[string]struct {
		job        *batchv1.Job
		pods       []*corev1.Pod
		want       providers.Status
		wantPrefix string
	}{
		"no pod yet": {job: jobWith("", "", ""), want: providers.Status{State: providers.StatePending}},
		"pod pending": {job: jobWith("", "", ""), pods: []*corev1.Pod{podIn(corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})},
			want: providers.Status{State: providers.StatePending}},
		"running": {job: jobWith("", "", ""), pods: []*corev1.Pod{podIn(corev1.PodRunning, running)},
			want: providers.Status{State: providers.StateRunning, StartedAt: t1}},
		"pod succeeded, Job not complete yet": {job: jobWith(batchv1.JobSuccessCriteriaMet, "CompletionsReached", ""), pods: []*corev1.Pod{podIn(corev1.PodSucceeded, terminated(0, "Completed"))},
			want: providers.Status{State: providers.StateRunning, StartedAt: t1}},
		"complete": {job: jobWith(batchv1.JobComplete, "", ""), pods: []*corev1.Pod{podIn(corev1.PodSucceeded, terminated(0, "Completed"))},
			want: providers.Status{State: providers.StateSucceeded, ExitCode: ptr(0), StartedAt: t1, FinishedAt: t2}},
		"complete, pod gone": {job: jobWith(batchv1.JobComplete, "", ""),
			want: providers.Status{State: providers.StateSucceeded, ExitCode: ptr(0), StartedAt: t0, FinishedAt: t2}},
		"exit code": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"),
			pods: []*corev1.Pod{podIn(corev1.PodFailed, terminated(3, "Error"))},
			want: providers.Status{State: providers.StateFailed, ExitCode: ptr(3), StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonFailed + ":"},
		"oom": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded, ""), pods: []*corev1.Pod{podIn(corev1.PodFailed, terminated(137, "OOMKilled"))},
			want: providers.Status{State: providers.StateFailed, OOMKilled: true, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonOOM + ":"},
		"deadline": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline"),
			pods: []*corev1.Pod{podIn(corev1.PodFailed, terminated(137, "Error"))},
			want: providers.Status{State: providers.StateFailed, TimedOut: true, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonTimeout + ":"},
		"deadline, pod disrupted too": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline"),
			pods: []*corev1.Pod{evicted},
			want: providers.Status{State: providers.StateFailed, TimedOut: true, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonTimeout + ":"},
		"evicted": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy, "Pod ns/cb-x-abcde has condition DisruptionTarget matching FailJob rule at index 0"),
			pods: []*corev1.Pod{evicted},
			want: providers.Status{State: providers.StateLost, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonEvicted + ": EvictionByEvictionAPI"},
		"node gone": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy, "Pod ns/cb-x-abcde has condition DisruptionTarget matching FailJob rule at index 0"),
			pods: []*corev1.Pod{gcd},
			want: providers.Status{State: providers.StateLost, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonNodeLost + ": DeletionByPodGC"},
		"disrupted, pod gone": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy, "Pod ns/cb-x-abcde has condition DisruptionTarget matching FailJob rule at index 0"),
			want: providers.Status{State: providers.StateLost, StartedAt: t0, FinishedAt: t2}, wantPrefix: ReasonEvicted + ":"},
		"failed, pod gone": {job: jobWith(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"),
			want: providers.Status{State: providers.StateFailed, StartedAt: t0, FinishedAt: t2}, wantPrefix: ReasonFailed + ": BackoffLimitExceeded"},
		"stopped": {job: stopped, pods: []*corev1.Pod{podIn(corev1.PodRunning, running)},
			want: providers.Status{State: providers.StateCancelled, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonCancelled + ":"},
		"deleted by someone else": {job: deleted, pods: []*corev1.Pod{podIn(corev1.PodRunning, running)},
			want: providers.Status{State: providers.StateLost, StartedAt: t1, FinishedAt: t2}, wantPrefix: ReasonDeleted + ":"},
		"complete wins over deletion": {job: func() *batchv1.Job {
			j := jobWith(batchv1.JobComplete, "", "")
			j.DeletionTimestamp = ptr(mt(t2.Add(time.Hour)))
			return j
		}(),
			want: providers.Status{State: providers.StateSucceeded, ExitCode: ptr(0), StartedAt: t0, FinishedAt: t2}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := status(tc.job, tc.pods)
			if !strings.HasPrefix(got.Error, tc.wantPrefix) || (tc.wantPrefix == "" && got.Error != "") {
				t.Errorf("Error = %q, want prefix %q", got.Error, tc.wantPrefix)
			}
			got.Error = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatusNewestPod: of several Pods, the newest speaks.
func TestStatusNewestPod(t *testing.T) {
	old := podIn(corev1.PodFailed, terminated(1, "Error"))
	cur := podIn(corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: mt(t2)}})
	cur.Name, cur.CreationTimestamp = "cb-x-fghij", mt(t1)
	if got := status(jobWith("", "", ""), []*corev1.Pod{cur, old}); got.State != providers.StateRunning || !got.StartedAt.Equal(t2) {
		t.Errorf("status = %+v, want running since t2", got)
	}
}
