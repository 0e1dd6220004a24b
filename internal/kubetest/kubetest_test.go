package kubetest

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) { Main(m) }

// TestPrograms runs a Job of each program kwok's stages know and checks
// how its Pod ends: the outcomes the provider's tests rely on.
func TestPrograms(t *testing.T) {
	c := Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	type want struct {
		phase  corev1.PodPhase
		code   int32
		reason string
	}
	tests := map[string]struct {
		argv []string
		want want
	}{
		"other program": {argv: []string{"/bin/true"}, want: want{corev1.PodSucceeded, 0, "Completed"}},
		"exit 0":        {argv: []string{ProgExit, "0"}, want: want{corev1.PodSucceeded, 0, "Completed"}},
		"exit 3":        {argv: []string{ProgExit, "3"}, want: want{corev1.PodFailed, 3, "Error"}},
		"oom":           {argv: []string{ProgOOM}, want: want{corev1.PodFailed, 137, "OOMKilled"}},
		"run 2s":        {argv: []string{ProgRun, "2s"}, want: want{corev1.PodSucceeded, 0, "Completed"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			job := &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "prog-"},
				Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					NodeName:      "kwok-cpu-0",
					Containers:    []corev1.Container{{Name: "task", Image: "none", Command: tc.argv[:1], Args: tc.argv[1:]}},
				}}},
			}
			job, err := cs.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var pod corev1.Pod
			for {
				pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
				if err != nil {
					t.Fatal(err)
				}
				if len(pods.Items) == 1 && (pods.Items[0].Status.Phase == corev1.PodSucceeded || pods.Items[0].Status.Phase == corev1.PodFailed) {
					pod = pods.Items[0]
					break
				}
				if time.Since(start) > time.Minute {
					t.Fatalf("pod not ended after a minute: %+v\n%s", pods.Items, c.LogTail())
				}
				time.Sleep(50 * time.Millisecond)
			}
			term := pod.Status.ContainerStatuses[0].State.Terminated
			if term == nil {
				t.Fatalf("no terminated state: %+v", pod.Status)
			}
			got := want{pod.Status.Phase, term.ExitCode, term.Reason}
			if got != tc.want {
				t.Errorf("pod ended %+v, want %+v", got, tc.want)
			}
			if tc.argv[0] == ProgRun && time.Since(start) < 2*time.Second {
				t.Errorf("%v ended after %v, want at least 2s", tc.argv, time.Since(start))
			}
		})
	}
}

// TestSleepRunsUntilDeleted: a sleeping Pod stays Running.
func TestSleepRunsUntilDeleted(t *testing.T) {
	c := Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	pod, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeName: "kwok-gpu-0",
			Containers: []corev1.Container{{Name: "task", Image: "none", Command: []string{ProgSleep}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := time.Time{}
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(100 * time.Millisecond) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning && running.IsZero() {
			running = time.Now()
		}
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			t.Fatalf("sleeping pod went %s", p.Status.Phase)
		}
		if !running.IsZero() && time.Since(running) > 2*time.Second {
			return
		}
	}
	t.Fatalf("sleeping pod not running for 2s (running since %v)", running)
}
