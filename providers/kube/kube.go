package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/computeboard/computeboard/providers"
)

// Provider runs tasks as Kubernetes Jobs.
type Provider struct {
	name, namespace, workDir, image, serviceAccount string
	env, labels                                     map[string]string
	priorityClasses                                 map[int]string
	tolerations                                     []corev1.Toleration
	nodeSelector                                    string
	allowCommands, allowRoot                        bool
	retention, keepDirs                             time.Duration
	cs                                              kubernetes.Interface
	log                                             *slog.Logger

	// The informers on the provider's Jobs and their Pods (label
	// LabelProvider=name), started by Run. Until synced is closed, reads
	// go to the API.
	factory    informers.SharedInformerFactory
	jobs, pods cache.SharedIndexInformer
	synced     chan struct{}
	syncOnce   sync.Once
	ended      providers.EndedQueue
}

var (
	_ providers.Provider   = (*Provider)(nil)
	_ providers.Lister     = (*Provider)(nil)
	_ providers.Prober     = (*Provider)(nil)
	_ providers.Notifier   = (*Provider)(nil)
	_ providers.FileSharer = (*Provider)(nil)
)

// labelControllerUID is the label the Job controller puts on a Job's Pods.
const labelControllerUID = batchv1.ControllerUidLabel

// indexJobUID indexes Pods by their Job's UID.
const indexJobUID = "job-uid"

// New returns a provider. It checks the config, creates WorkDir and
// builds the informers; it does not contact the cluster (see Probe) and
// its informers start with Run.
func New(cfg Config) (*Provider, error) {
	p := &Provider{name: cfg.Name, namespace: cfg.Namespace, workDir: cfg.WorkDir, image: cfg.Image,
		serviceAccount: cfg.ServiceAccount, env: maps.Clone(cfg.Env), labels: maps.Clone(cfg.Labels),
		priorityClasses: maps.Clone(cfg.PriorityClasses), tolerations: slices.Clone(cfg.Tolerations),
		nodeSelector: cfg.NodeSelector, allowCommands: cfg.AllowCommands, allowRoot: cfg.AllowRoot,
		retention: cfg.Retention, keepDirs: cfg.KeepDirs, log: cfg.Logger, synced: make(chan struct{})}
	if p.name == "" {
		p.name = DefaultName
	}
	if p.namespace == "" {
		p.namespace = DefaultNamespace
	}
	if p.image == "" {
		p.image = DefaultImage
	}
	if p.retention <= 0 {
		p.retention = DefaultRetention
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("provider", p.name)
	switch {
	case cfg.REST == nil:
		return nil, errors.New("kube: Config.REST is required")
	case len(validation.IsValidLabelValue(p.name)) > 0:
		return nil, fmt.Errorf("kube: Name %q is not a label value: %v", p.name, validation.IsValidLabelValue(p.name))
	case len(validation.IsDNS1123Label(p.namespace)) > 0:
		return nil, fmt.Errorf("kube: Namespace %q: %v", p.namespace, validation.IsDNS1123Label(p.namespace))
	case !filepath.IsAbs(p.workDir):
		return nil, fmt.Errorf("kube: WorkDir %q must be an absolute path", p.workDir)
	}
	for k, v := range p.labels {
		if errs := slices.Concat(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)); len(errs) > 0 {
			return nil, fmt.Errorf("kube: label %s=%s: %v", k, v, errs)
		}
	}
	for prio, class := range p.priorityClasses {
		if prio < 0 || prio > 9 || len(validation.IsDNS1123Subdomain(class)) > 0 {
			return nil, fmt.Errorf("kube: PriorityClasses: %d → %q: want a priority 0..9 and a class name", prio, class)
		}
	}
	if err := checkEnv(p.env); err != nil {
		return nil, fmt.Errorf("kube: Env: %w", err)
	}
	if err := os.MkdirAll(p.workDir, 0o700); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	rc := *cfg.REST
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 200, 400 // see Config.REST
	}
	if rc.ContentType == "" {
		// Protobuf, as the control plane's own components talk: the
		// informers decode every Job and Pod update.
		rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		rc.ContentType = "application/vnd.kubernetes.protobuf"
	}
	cs, err := kubernetes.NewForConfig(&rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	p.cs = cs
	p.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(p.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelProvider + "=" + p.name }))
	p.jobs = p.factory.Batch().V1().Jobs().Informer()
	p.pods = p.factory.Core().V1().Pods().Informer()
	if err := p.pods.AddIndexers(cache.Indexers{indexJobUID: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Labels[labelControllerUID] != "" {
			return []string{pod.Labels[labelControllerUID]}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if _, err := p.jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.notice(nil, obj) },
		UpdateFunc: func(old, obj any) {
			p.notice(old, obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			p.notice(nil, obj)
		},
	}); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return p, nil
}

// notice sends the handle of a Job that has just ended (or gone).
func (p *Provider) notice(old, obj any) {
	j, ok := obj.(*batchv1.Job)
	if !ok || j.Annotations[AnnotTask] == "" {
		return
	}
	if o, ok := old.(*batchv1.Job); ok && terminal(o) {
		return
	}
	if terminal(j) || j.DeletionTimestamp != nil {
		p.ended.Send(providers.Handle{Provider: p.name, ID: j.Annotations[AnnotTask]})
	}
}

// Ended implements providers.Notifier: the handles of tasks whose Jobs
// the informer saw end or go.
func (p *Provider) Ended() <-chan providers.Handle { return p.ended.C() }

// Run runs the informers until ctx ends, and prunes the task directories
// older than Config.KeepDirs every hour. Poll, Stop and Tasks read the
// informers' caches once they have synced, and the API before. Call it
// once.
func (p *Provider) Run(ctx context.Context) error {
	p.factory.Start(ctx.Done())
	defer p.factory.Shutdown()
	for typ, ok := range p.factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("kube: %v informer not synced", typ)
		}
	}
	if ctx.Err() != nil {
		return nil // stopped before the caches synced
	}
	p.syncOnce.Do(func() { close(p.synced) })
	p.log.Debug("informers synced")
	for {
		if p.keepDirs > 0 {
			n, err := p.Prune(ctx, time.Now().Add(-p.keepDirs))
			if err != nil && ctx.Err() == nil {
				p.log.Warn("prune task directories", "err", err)
			} else if n > 0 {
				p.log.Info("pruned task directories", "removed", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Hour):
		}
	}
}

func (p *Provider) isSynced() bool {
	select {
	case <-p.synced:
		return true
	default:
		return false
	}
}

// Start creates t's Job. The handle's ID is the task ID.
//
// A task ID is started once: if this provider has a directory for it, or
// a Job of its name is the task's, Start fails with ErrTaskExists
// (wrapped with ErrInvalidTask) and creates nothing; a Job found only in
// the cluster gets its record, so Poll finds it.
func (p *Provider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	if err := p.validate(t); err != nil {
		return providers.Handle{}, fmt.Errorf("kube: start %s: %w", t.ID, err)
	}
	job, err := p.job(t)
	if err != nil {
		return providers.Handle{}, fmt.Errorf("kube: start %s: %w", t.ID, err)
	}
	dir := p.taskDir(t.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return providers.Handle{}, fmt.Errorf("kube: start %s: %w: %w (%s exists)", t.ID, providers.ErrInvalidTask, providers.ErrTaskExists, dir)
		}
		return providers.Handle{}, fmt.Errorf("kube: start %s: %w", t.ID, err)
	}
	rec := record{Provider: p.name, TaskID: t.ID, Job: p.namespace + "/" + job.Name, CreatedAt: time.Now(), Labels: t.Labels, Note: t.Note}
	created, err := p.cs.BatchV1().Jobs(p.namespace).Create(ctx, job, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Created before (by an adapter that lost this directory, or
		// whose create timed out): if it is the task's, that run is the
		// task's.
		old, gerr := p.cs.BatchV1().Jobs(p.namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if gerr == nil && p.ours(old, t.ID) {
			rec.UID, rec.CreatedAt = string(old.UID), old.CreationTimestamp.Time
			if werr := p.writeRecord(rec); werr != nil {
				return providers.Handle{}, fmt.Errorf("kube: start %s: %w", t.ID, werr)
			}
			return providers.Handle{}, fmt.Errorf("kube: start %s: %w: %w (Job %s)", t.ID, providers.ErrInvalidTask, providers.ErrTaskExists, rec.Job)
		}
		err = fmt.Errorf("%w: Job %s exists and is not this task's", providers.ErrInvalidTask, rec.Job)
	}
	if err != nil {
		os.RemoveAll(dir) // nothing was created: the ID may be retried
		return providers.Handle{}, fmt.Errorf("kube: start %s: %w", t.ID, err)
	}
	rec.UID = string(created.UID)
	if err := p.writeRecord(rec); err != nil {
		// The Job runs: say so; Poll still finds it by name.
		return providers.Handle{}, fmt.Errorf("kube: start %s: created Job %s, but its record failed: %w", t.ID, rec.Job, err)
	}
	p.log.Debug("created", "task", t.ID, "k8s_job", rec.Job)
	return providers.Handle{Provider: p.name, ID: t.ID}, nil
}

// ours reports whether j is this provider's Job of task id.
func (p *Provider) ours(j *batchv1.Job, id string) bool {
	return j.Labels[LabelProvider] == p.name && j.Annotations[AnnotTask] == id
}

// resolve checks a handle and returns its task ID.
func (p *Provider) resolve(h providers.Handle) (string, error) {
	switch {
	case h.Provider != p.name:
		return "", fmt.Errorf("%w: %s belongs to provider %q, not %q", providers.ErrUnknownHandle, h, h.Provider, p.name)
	case !providers.ValidTaskID.MatchString(h.ID):
		return "", fmt.Errorf("%w: %s: malformed ID", providers.ErrUnknownHandle, h)
	}
	return h.ID, nil
}

// get returns task id's Job and its Pods: from the informers' caches once
// synced, from the API before, and for a Job the cache has not seen yet
// (just created); nil when there is none.
func (p *Provider) get(ctx context.Context, id string, fresh bool) (*batchv1.Job, []*corev1.Pod, error) {
	name := JobName(id)
	if !fresh && p.isSynced() {
		obj, ok, err := p.jobs.GetIndexer().GetByKey(p.namespace + "/" + name)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			j := obj.(*batchv1.Job)
			if !p.ours(j, id) {
				return nil, nil, fmt.Errorf("%w: Job %s/%s is not this provider's task %s", providers.ErrUnknownHandle, p.namespace, name, id)
			}
			objs, err := p.pods.GetIndexer().ByIndex(indexJobUID, string(j.UID))
			if err != nil {
				return nil, nil, err
			}
			pods := make([]*corev1.Pod, 0, len(objs))
			for _, o := range objs {
				pods = append(pods, o.(*corev1.Pod))
			}
			return j, pods, nil
		}
	}
	j, err := p.cs.BatchV1().Jobs(p.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if !p.ours(j, id) {
		return nil, nil, fmt.Errorf("%w: Job %s/%s is not this provider's task %s", providers.ErrUnknownHandle, p.namespace, name, id)
	}
	list, err := p.cs.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: labelControllerUID + "=" + string(j.UID)})
	if err != nil {
		return nil, nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return j, pods, nil
}

// Poll reports the task's status from the informers' caches. The first
// terminal status it sees is recorded in the task's directory, and the
// Job is then left to expire (ttlSecondsAfterFinished = Retention); a Job
// gone without a recorded outcome is lost.
func (p *Provider) Poll(ctx context.Context, h providers.Handle) (providers.Status, error) {
	id, err := p.resolve(h)
	if err != nil {
		return providers.Status{}, fmt.Errorf("kube: poll: %w", err)
	}
	st, err := p.poll(ctx, id)
	if err != nil {
		return providers.Status{}, fmt.Errorf("kube: poll %s: %w", id, err)
	}
	return st, nil
}

func (p *Provider) poll(ctx context.Context, id string) (providers.Status, error) {
	if st, ok := p.outcome(id); ok {
		return st, nil
	}
	j, pods, err := p.get(ctx, id, false)
	if err != nil {
		return providers.Status{}, err
	}
	if j == nil {
		if _, rerr := p.readRecord(id); rerr != nil {
			return providers.Status{}, fmt.Errorf("%w: no Job %s and no record", providers.ErrUnknownHandle, JobName(id))
		}
		if st, ok := p.outcome(id); ok { // recorded meanwhile (Stop)
			return st, nil
		}
		return providers.Status{State: providers.StateLost, Error: fmt.Sprintf(
			"%s: Job %s/%s is gone and no outcome was seen", ReasonDeleted, p.namespace, JobName(id))}, nil
	}
	st := p.statusOf(j, pods)
	if st.State.Terminal() {
		p.collect(ctx, id, j, st)
	}
	return st, nil
}

// statusOf is status with the output's location: the Pod's log
// (k8s:<namespace>/<pod>/<container>, what kubectl logs reads while the
// Pod exists).
func (p *Provider) statusOf(j *batchv1.Job, pods []*corev1.Pod) providers.Status {
	st := status(j, pods)
	if pod := newest(pods); pod != nil {
		st.StdoutPath = "k8s:" + pod.Namespace + "/" + pod.Name + "/" + ContainerName
		st.StderrPath = st.StdoutPath
	}
	return st
}

// collect records an ended task's outcome (when this provider holds its
// directory) and lets its Job expire Retention later. The outcome is kept
// only once the expiry is set, so a failed patch is tried again on the
// next Poll.
func (p *Provider) collect(ctx context.Context, id string, j *batchv1.Job, st providers.Status) {
	if j.DeletionTimestamp == nil && j.Spec.TTLSecondsAfterFinished == nil {
		ttl := int64(p.retention / time.Second)
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"ttlSecondsAfterFinished": ttl}})
		_, err := p.cs.BatchV1().Jobs(p.namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			p.log.Warn("set the expiry of an ended Job", "task", id, "k8s_job", j.Name, "err", err)
			return
		}
	}
	if _, err := os.Stat(p.taskDir(id)); err == nil {
		p.keepOutcome(id, st)
	}
}

// Stop marks the Job stopped and deletes it with foreground propagation
// (its Pods first), then waits, bounded by ctx, until it is gone. A
// finished or lost task is left as it is.
func (p *Provider) Stop(ctx context.Context, h providers.Handle) error {
	id, err := p.resolve(h)
	if err != nil {
		return fmt.Errorf("kube: stop: %w", err)
	}
	if err := p.stop(ctx, id); err != nil {
		return fmt.Errorf("kube: stop %s: %w", id, err)
	}
	return nil
}

func (p *Provider) stop(ctx context.Context, id string) error {
	if _, ok := p.outcome(id); ok {
		return nil
	}
	j, pods, err := p.get(ctx, id, true)
	if err != nil {
		return err
	}
	if j == nil {
		if _, rerr := p.readRecord(id); rerr != nil {
			return fmt.Errorf("%w: no Job %s and no record", providers.ErrUnknownHandle, JobName(id))
		}
		return nil // lost: nothing to stop
	}
	st := status(j, pods)
	if st.State.Terminal() && j.DeletionTimestamp == nil {
		p.collect(ctx, id, j, st)
		return nil
	}
	if !st.State.Terminal() || st.State == providers.StateCancelled {
		if _, ok := j.Annotations[AnnotStopped]; !ok {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"annotations": map[string]string{AnnotStopped: time.Now().UTC().Format(time.RFC3339Nano)}}})
			if _, err := p.cs.BatchV1().Jobs(p.namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		fg := metav1.DeletePropagationForeground
		err := p.cs.BatchV1().Jobs(p.namespace).Delete(ctx, j.Name, metav1.DeleteOptions{
			PropagationPolicy: &fg, Preconditions: &metav1.Preconditions{UID: &j.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		if _, err := os.Stat(p.taskDir(id)); err == nil {
			p.keepOutcome(id, providers.Status{State: providers.StateCancelled, StartedAt: st.StartedAt,
				FinishedAt: time.Now(), Error: ReasonCancelled + ": the Job was deleted on request",
				StdoutPath: p.statusOf(j, pods).StdoutPath, StderrPath: p.statusOf(j, pods).StderrPath})
		}
	}
	// Deleted (by Stop now, or before): wait until it is gone.
	for {
		cur, err := p.cs.BatchV1().Jobs(p.namespace).Get(ctx, j.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && cur.UID != j.UID):
			return nil
		case err != nil:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still being deleted (Job %s/%s): %w", p.namespace, j.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Tasks lists the tasks this provider holds records of (its WorkDir)
// that are running or ended at or after since, and the Jobs the cluster
// holds as this provider's that it has no record of (created by an
// adapter with another WorkDir; their Note is empty).
func (p *Provider) Tasks(ctx context.Context, since time.Time) ([]providers.TaskRecord, error) {
	ents, err := os.ReadDir(p.workDir)
	if err != nil {
		return nil, fmt.Errorf("kube: tasks: %w", err)
	}
	var out []providers.TaskRecord
	keep := func(tr providers.TaskRecord) {
		if tr.Status.State.Terminal() && tr.Status.FinishedAt.Before(since) {
			return
		}
		out = append(out, tr)
	}
	seen := map[string]bool{}
	for _, e := range ents {
		if !e.IsDir() || !providers.ValidTaskID.MatchString(e.Name()) {
			continue
		}
		rec, err := p.readRecord(e.Name())
		if err != nil {
			continue // a start cut short, or not ours
		}
		seen[rec.TaskID] = true
		st, err := p.poll(ctx, rec.TaskID)
		if err != nil {
			return out, fmt.Errorf("kube: tasks: %s: %w", rec.TaskID, err)
		}
		keep(providers.TaskRecord{Handle: providers.Handle{Provider: p.name, ID: rec.TaskID}, Labels: rec.Labels, Note: rec.Note, Status: st})
	}
	jobs, err := p.listJobs(ctx)
	if err != nil {
		return out, fmt.Errorf("kube: tasks: %w", err)
	}
	for _, j := range jobs {
		id := j.Annotations[AnnotTask]
		if id == "" || seen[id] || !providers.ValidTaskID.MatchString(id) || JobName(id) != j.Name {
			continue
		}
		_, pods, err := p.get(ctx, id, false)
		if err != nil {
			return out, fmt.Errorf("kube: tasks: %s: %w", id, err)
		}
		var labels map[string]string
		_ = json.Unmarshal([]byte(j.Annotations[AnnotLabels]), &labels)
		keep(providers.TaskRecord{Handle: providers.Handle{Provider: p.name, ID: id}, Labels: labels, Status: p.statusOf(j, pods)})
	}
	return out, nil
}

// listJobs lists the provider's Jobs, by name.
func (p *Provider) listJobs(ctx context.Context) ([]*batchv1.Job, error) {
	var jobs []*batchv1.Job
	if p.isSynced() {
		for _, obj := range p.jobs.GetStore().List() {
			jobs = append(jobs, obj.(*batchv1.Job))
		}
	} else {
		list, err := p.cs.BatchV1().Jobs(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelProvider + "=" + p.name})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			jobs = append(jobs, &list.Items[i])
		}
	}
	slices.SortFunc(jobs, func(a, b *batchv1.Job) int { return strings.Compare(a.Name, b.Name) })
	return jobs, nil
}

// SharesFiles is false: a task runs in its Pod's containers, on the
// cluster's nodes, and sees none of the adapter machine's files (so it gets
// no checkpoint directory there).
func (p *Provider) SharesFiles() bool { return false }

// Probe checks that the work directory takes a file and that the cluster
// answers a list of Jobs in the namespace (reachable, and allowed).
func (p *Provider) Probe(ctx context.Context) error {
	f, err := os.CreateTemp(p.workDir, ".probe-*")
	if err != nil {
		return fmt.Errorf("kube: probe: %w", err)
	}
	f.Close()
	os.Remove(f.Name())
	if _, err := p.cs.BatchV1().Jobs(p.namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("kube: probe: %w", err)
	}
	return nil
}
