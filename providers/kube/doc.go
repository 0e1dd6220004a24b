// Package kube is the provider that runs tasks as Kubernetes Jobs, through
// k8s.io/client-go.
//
// A Task becomes one batch/v1 Job (Start) in Config.Namespace: backoffLimit
// 0 (the agent decides retries), one Pod whose only container, "task",
// runs the task's argv in Task.Image (or Config.Image), pinned to the
// placement's node by required node affinity on metadata.name (the
// kube-scheduler still checks fit and taints), with requests equal to
// limits for CPU and memory, nvidia.com/gpu for whole GPUs and
// nvidia.com/mig-<profile> for MIG devices, a PriorityClass from
// Config.PriorityClasses, activeDeadlineSeconds from Task.Timeout, and the
// payload as a file projected from a Pod annotation (downward API); a
// task without a payload gets /dev/null as that file, and no annotation
// or volume.
// Every word of argv and every environment value has its "$" doubled, so
// Kubernetes' $(VAR) expansion never rewrites what a template said.
// Templates only: a task whose argv came from the allowlist (Task.Template
// empty) is refused unless Config.AllowCommands.
//
// Names and labels: the Job is JobName(task ID); it and its Pod carry
// computeboard.io/provider=<Config.Name> (the informers' selector), the
// task's labels as computeboard.io/<key> where Kubernetes allows them,
// Config.Labels, and the task ID and exact labels as annotations. The
// handle's ID is the task ID.
//
// Status comes from one shared informer on the provider's Jobs and one on
// their Pods (Run), never from a request per Poll; a Job the cache has not
// seen yet is read once from the API. Job conditions and the Pod's
// container state map to providers.Status (status.go): Complete →
// succeeded; DeadlineExceeded → failed, TimedOut; OOMKilled → failed,
// OOMKilled; evicted, preempted or its node gone → lost; a Job deleted by
// someone else → lost. Each task has a small directory in Config.WorkDir
// (its labels and note, and its terminal status once seen), so a task
// stays known after its Job is gone. When Poll first sees a task ended it
// records that and sets the Job's ttlSecondsAfterFinished to
// Config.Retention: a Job that ends while the adapter is down stays until
// an adapter has seen it. Run prunes the directories of tasks that ended
// over Config.KeepDirs ago (the adapter's retention).
//
// Stop marks the Job stopped and deletes it with foreground propagation,
// waiting until it is gone. Optional abilities: Lister, Prober, Notifier
// (the informer's ends); ClusterNodes lists the cluster's nodes as pool
// nodes, each out (cordoned, not Ready, an untolerated taint) or not, and
// Nodes those that are not. Not offered: Suspender (a suspended Job's Pods are deleted,
// not paused), Signaler and Requeuer.
package kube
