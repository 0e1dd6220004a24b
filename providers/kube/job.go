package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/computeboard/computeboard/providers"
)

// Labels and annotations on the provider's Jobs and Pods.
const (
	LabelProvider     = "computeboard.io/provider" // Config.Name: the informers' selector
	LabelPrefix       = "computeboard.io/"         // + a task label's key (job, attempt, account, ...)
	AnnotTask         = "computeboard.io/task"     // the task ID
	AnnotLabels       = "computeboard.io/labels"   // the task's labels, JSON: exact, for Lister
	AnnotPayload      = "computeboard.io/payload"  // Pod only, when there is a payload: projected into PayloadPath
	AnnotStopped      = "computeboard.io/stopped"  // set by Stop before it deletes the Job (RFC 3339)
	ContainerName     = "task"
	PayloadDir        = "/var/run/computeboard"
	PayloadPath       = PayloadDir + "/payload"
	NoPayloadPath     = "/dev/null" // $COMPUTEBOARD_PAYLOAD of a task without a payload: an empty file
	ResourceGPU       = "nvidia.com/gpu"
	ResourceMIGPrefix = "nvidia.com/mig-" // + a MIG profile ("1g.10gb")
)

// MaxPayloadBytes bounds Task.Payload: it travels in a Pod annotation, and
// a Pod's annotations may hold 256 KiB in all.
const MaxPayloadBytes = 192 << 10

// JobName is the name of the Job of task id: "cb-" and the ID in
// lowercase, with "." and "_" turned into "-"; when that loses anything
// (capitals, those characters) or is too long for a Job (63), the first
// 48 characters of it and 10 hex digits of the ID's SHA-256. Distinct IDs
// give distinct names.
func JobName(id string) string {
	n := "cb-" + strings.Map(func(r rune) rune {
		if r == '.' || r == '_' {
			return '-'
		}
		return r
	}, strings.ToLower(id))
	if n == "cb-"+id && len(n) <= validation.DNS1123LabelMaxLength && !strings.HasSuffix(n, "-") {
		return n
	}
	sum := sha256.Sum256([]byte(id))
	return strings.TrimRight(n[:min(len(n), 48)], "-") + "-" + hex.EncodeToString(sum[:5])
}

// labelKeyRE is what a task label's key must be to become a Kubernetes
// label computeboard.io/<key>.
var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// jobLabels are the labels of a task's Job and Pod.
func (p *Provider) jobLabels(t providers.Task) map[string]string {
	l := maps.Clone(p.labels)
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range t.Labels {
		if labelKeyRE.MatchString(k) && len(validation.IsValidLabelValue(v)) == 0 {
			l[LabelPrefix+k] = v
		}
	}
	if t.Template != "" && len(validation.IsValidLabelValue(t.Template)) == 0 {
		l[LabelPrefix+"template"] = t.Template
	}
	l[LabelProvider] = p.name
	return l
}

// job builds the Job of t.
func (p *Provider) job(t providers.Task) (*batchv1.Job, error) {
	image := t.Image
	if image == "" {
		image = p.image
	}
	labelsJSON, err := json.Marshal(t.Labels)
	if err != nil {
		return nil, err
	}
	annots := map[string]string{AnnotTask: t.ID, AnnotLabels: string(labelsJSON)}
	env := maps.Clone(p.env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, t.Env)
	// A task without a payload gets an empty file all the same, /dev/null,
	// and its Pod neither the annotation nor the volume: each makes every
	// write and watch event of the Pod larger, and the control plane slower
	// (see README, the Kubernetes figures).
	env[providers.PayloadEnv] = PayloadPath
	if len(t.Payload) == 0 {
		env[providers.PayloadEnv] = NoPayloadPath
	}
	var envVars []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: escape(env[k])})
	}
	argv := make([]string, len(t.Argv))
	for i, a := range t.Argv {
		argv[i] = escape(a)
	}
	res, err := resources(t)
	if err != nil {
		return nil, err
	}
	sc, err := p.securityContext(t.User)
	if err != nil {
		return nil, err
	}
	labels := p.jobLabels(t)
	podAnnots := maps.Clone(annots)
	spec := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: p.serviceAccount,
		Tolerations:        p.tolerations,
		PriorityClassName:  p.priorityClasses[t.Priority],
		Containers: []corev1.Container{{
			Name:            ContainerName,
			Image:           image,
			Command:         argv[:1],
			Args:            argv[1:],
			WorkingDir:      t.Dir,
			Env:             envVars,
			Resources:       res,
			SecurityContext: sc,
		}},
	}
	if len(t.Payload) > 0 {
		podAnnots[AnnotPayload] = string(t.Payload)
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "computeboard", MountPath: PayloadDir, ReadOnly: true}}
		spec.Volumes = []corev1.Volume{{Name: "computeboard", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "payload", FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.annotations['" + AnnotPayload + "']"}}},
		}}}}
	}
	if node := t.Placement.Node; node != "" {
		// Required affinity, not nodeName: the kube-scheduler still checks
		// that the task fits and tolerates the node's taints.
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(t.ID), Namespace: p.namespace, Labels: labels, Annotations: annots},
		Spec: batchv1.JobSpec{
			Parallelism:  ptr[int32](1),
			Completions:  ptr[int32](1),
			BackoffLimit: ptr[int32](0),
			// A Pod evicted, preempted or gone with its node is deleted,
			// and its state with it: this rule leaves the cause on the
			// Job's Failed condition.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionFailJob,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: podAnnots},
				Spec:       spec,
			},
		},
	}
	if t.Timeout > 0 {
		j.Spec.ActiveDeadlineSeconds = ptr(int64(math.Ceil(t.Timeout.Seconds())))
	}
	return j, nil
}

// escape doubles every "$", so that Kubernetes' $(VAR) expansion of
// command, args and env values gives back s as it is.
func escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// resources are a task's requests and limits (equal: the Pod is
// Guaranteed where it asks for CPU and memory): its cores rounded up to a
// millicore, its memory, its whole GPUs and its MIG devices by profile.
func resources(t providers.Task) (corev1.ResourceRequirements, error) {
	rl := corev1.ResourceList{}
	if c := t.Resources.CPUCores; c > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Ceil(c*1000)), resource.DecimalSI)
	}
	if m := t.Resources.MemoryBytes; m > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(m, resource.BinarySI)
	}
	if n := len(t.Placement.GPUs); n > 0 {
		rl[ResourceGPU] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	mig := map[string]int64{}
	for _, id := range t.Placement.MIG {
		profile, ok := migProfile(id)
		if !ok {
			return corev1.ResourceRequirements{}, fmt.Errorf("%w: MIG device %q is not one this provider listed (kube:<node>:mig-<profile>:<i>)", providers.ErrInvalidTask, id)
		}
		mig[profile]++
	}
	for profile, n := range mig {
		rl[corev1.ResourceName(ResourceMIGPrefix+profile)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}, nil
	}
	return corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}, nil
}

// securityContext runs the task as its user (a numeric ID, or "nobody"),
// never as root unless AllowRoot, without privilege escalation or
// capabilities.
func (p *Provider) securityContext(user string) (*corev1.SecurityContext, error) {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	switch {
	case user == "nobody":
		sc.RunAsUser = ptr[int64](65534)
	case user != "":
		uid, err := strconv.ParseInt(user, 10, 64)
		if err != nil || uid < 0 {
			return nil, fmt.Errorf("%w: user %q: Pods run as a numeric user ID (or nobody)", providers.ErrInvalidTask, user)
		}
		if uid == 0 && !p.allowRoot {
			return nil, fmt.Errorf("%w: user %q is root; set Config.AllowRoot to allow it", providers.ErrInvalidTask, user)
		}
		sc.RunAsUser = &uid
	}
	if !p.allowRoot {
		sc.RunAsNonRoot = ptr(true)
	}
	return sc, nil
}

// validate checks what Start needs beyond Task.Validate.
func (p *Provider) validate(t providers.Task) error {
	if err := t.Validate(); err != nil {
		return err
	}
	switch {
	case t.Template == "" && !p.allowCommands:
		return fmt.Errorf("%w: only operator templates run on this cluster, and argv %q came from the allowlist (Config.AllowCommands)", providers.ErrInvalidTask, t.Argv[0])
	case t.Resources.CPUCores < 0 || t.Resources.MemoryBytes < 0:
		return fmt.Errorf("%w: negative resources", providers.ErrInvalidTask)
	case len(t.Payload) > MaxPayloadBytes:
		return fmt.Errorf("%w: payload is %d bytes; the limit is %d", providers.ErrInvalidTask, len(t.Payload), MaxPayloadBytes)
	case !utf8.Valid(t.Payload):
		return fmt.Errorf("%w: payload is not UTF-8 (it travels in a Pod annotation)", providers.ErrInvalidTask)
	case t.Placement.Node != "" && len(validation.IsDNS1123Subdomain(t.Placement.Node)) > 0:
		return fmt.Errorf("%w: node name %q", providers.ErrInvalidTask, t.Placement.Node)
	}
	if err := checkEnv(t.Env); err != nil {
		return fmt.Errorf("%w: env: %w", providers.ErrInvalidTask, err)
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnv accepts the variables a shell can export.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if !envName.MatchString(k) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("bad variable %q (names are [A-Za-z_][A-Za-z0-9_]*, values have no NUL)", k)
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
