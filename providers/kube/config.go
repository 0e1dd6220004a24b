package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config configures a Provider. REST and WorkDir are required; the zero
// value of every other field is useful.
type Config struct {
	// Name is stamped on every Handle and on every Job's
	// computeboard.io/provider label (default "kube"). At most 63
	// characters (a label value).
	Name string
	// REST reaches the cluster (the adapter builds it from a kubeconfig,
	// or in-cluster). Required. Its QPS and Burst, when zero, become 200
	// and 400 (client-go's default of 5 a second would pace the starts).
	REST *rest.Config
	// Namespace holds the Jobs (default "default").
	Namespace string
	// WorkDir holds one small directory per task: its labels and note,
	// and its terminal status once seen. Required; created if missing.
	WorkDir string
	// Image is the container image of a task whose Task.Image is empty
	// (default DefaultImage). Task argv[0] must exist in it.
	Image string
	// AllowCommands runs tasks whose argv came from the allowlist (a
	// request's own command line; Task.Template empty). Off by default:
	// only operator templates run on the cluster.
	AllowCommands bool
	// PriorityClasses maps a task's priority (0..9) to the PriorityClass
	// its Pod gets; a priority not in the map gets none (the cluster's
	// default). The classes must exist.
	PriorityClasses map[int]string
	// Env is the environment every task starts from, before Task.Env.
	Env map[string]string
	// Labels are added to every Job and Pod (the adapter adds
	// computeboard.io/board).
	Labels map[string]string
	// Tolerations are added to every Pod. Nodes lists a node with a
	// NoSchedule or NoExecute taint only when one of them tolerates it.
	Tolerations []corev1.Toleration
	// NodeSelector is a label selector of the nodes Nodes lists (default:
	// every node).
	NodeSelector string
	// ServiceAccount runs the Pods (default: the namespace's default).
	ServiceAccount string
	// AllowRoot lets a task run as user 0 or the image's default user;
	// without it Pods run with runAsNonRoot.
	AllowRoot bool
	// Retention is how long a Job stays after Poll has seen it end
	// (ttlSecondsAfterFinished; default 1h). Its directory in WorkDir
	// stays until the caller prunes it.
	Retention time.Duration
	// KeepDirs is how long a task's directory stays after its end was
	// recorded; Run prunes older ones every hour. Zero: they stay.
	KeepDirs time.Duration
	// Logger gets debug lines (default: discard).
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultName      = "kube"
	DefaultNamespace = "default"
	DefaultImage     = "debian:bookworm-slim"
	DefaultRetention = time.Hour
)

// FileConfig is a kube provider's section of the adapter's config file
// (providers[].kube): what Config takes, in the file's terms. Check fills
// its defaults; Config builds a Config from it.
type FileConfig struct {
	// Kubeconfig is the kubeconfig file that reaches the cluster; empty:
	// the in-cluster config (the adapter runs in a Pod).
	Kubeconfig string `yaml:"kubeconfig"`
	// Context is the kubeconfig's context (default: its current one).
	Context string `yaml:"context"`
	// Namespace holds the Jobs (default "default").
	Namespace string `yaml:"namespace"`
	// WorkDir holds the task records (default: kube-<name> next to the
	// adapter's work_dir).
	WorkDir string `yaml:"work_dir"`
	// Image is the image of a template that names none (default
	// DefaultImage).
	Image string `yaml:"image"`
	// AllowCommands runs allowlisted commands too (default: templates only).
	AllowCommands bool `yaml:"allow_commands"`
	// PriorityClasses maps request priorities (0..9) to PriorityClasses.
	PriorityClasses map[int]string `yaml:"priority_classes"`
	// Tolerations are added to every Pod; nodes with taints none of them
	// tolerates are not offered to the pool.
	Tolerations []Toleration `yaml:"tolerations"`
	// NodeSelector is a label selector of the nodes offered to the pool.
	NodeSelector string `yaml:"node_selector"`
	// ServiceAccount runs the Pods (default: the namespace's default).
	ServiceAccount string `yaml:"service_account"`
	// Retention is how long an ended Job stays once seen (default 1h).
	Retention time.Duration `yaml:"retention"`
	// RefreshInterval is how often the adapter reads the nodes again
	// (default 60s): nodes added are served; a node cordoned, not Ready
	// or tainted goes out of scheduling, and back when it recovers.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
}

// Toleration is a Pod toleration (corev1.Toleration, in the file's terms).
type Toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"` // Equal (default) or Exists
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"` // NoSchedule, PreferNoSchedule, NoExecute, or empty: all
}

// Check fills fc's defaults, with relative paths taken from dir and
// workDir the default WorkDir, and checks what it can without the
// cluster.
func (fc *FileConfig) Check(dir, workDir string) error {
	if fc.WorkDir == "" {
		fc.WorkDir = workDir
	} else if !filepath.IsAbs(fc.WorkDir) {
		fc.WorkDir = filepath.Join(dir, fc.WorkDir)
	}
	if fc.Kubeconfig != "" && !filepath.IsAbs(fc.Kubeconfig) {
		fc.Kubeconfig = filepath.Join(dir, fc.Kubeconfig)
	}
	if fc.Retention < 0 || fc.RefreshInterval < 0 {
		return errors.New("kube.retention and kube.refresh_interval must not be negative")
	}
	for prio, class := range fc.PriorityClasses {
		if prio < 0 || prio > 9 || len(validation.IsDNS1123Subdomain(class)) > 0 {
			return fmt.Errorf("kube.priority_classes: %d: %q: want a priority 0..9 and a PriorityClass name", prio, class)
		}
	}
	for i, t := range fc.Tolerations {
		if _, err := t.toleration(); err != nil {
			return fmt.Errorf("kube.tolerations[%d]: %w", i, err)
		}
	}
	if fc.NodeSelector != "" {
		if _, err := labels.Parse(fc.NodeSelector); err != nil {
			return fmt.Errorf("kube.node_selector: %w", err)
		}
	}
	return nil
}

func (t Toleration) toleration() (corev1.Toleration, error) {
	tol := corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
	switch tol.Operator {
	case "", corev1.TolerationOpEqual:
		if t.Key == "" {
			return tol, errors.New("operator Equal needs a key")
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			return tol, errors.New("operator Exists takes no value")
		}
	default:
		return tol, fmt.Errorf("operator %q: want Equal or Exists", t.Operator)
	}
	switch tol.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return tol, fmt.Errorf("effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
	}
	return tol, nil
}

// Config is the Config fc describes for the provider named name, its
// REST config read from the kubeconfig (or the in-cluster config). The
// caller adds Env, Labels, AllowRoot and Logger.
func (fc FileConfig) Config(name string) (Config, error) {
	var rc *rest.Config
	var err error
	if fc.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: fc.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: fc.Context}).ClientConfig()
	}
	if err != nil {
		return Config{}, fmt.Errorf("kube: cluster config: %w", err)
	}
	cfg := Config{Name: name, REST: rc, Namespace: fc.Namespace, WorkDir: fc.WorkDir, Image: fc.Image,
		AllowCommands: fc.AllowCommands, PriorityClasses: fc.PriorityClasses, NodeSelector: fc.NodeSelector,
		ServiceAccount: fc.ServiceAccount, Retention: fc.Retention}
	for _, t := range fc.Tolerations {
		tol, err := t.toleration()
		if err != nil {
			return Config{}, err
		}
		cfg.Tolerations = append(cfg.Tolerations, tol)
	}
	return cfg, nil
}
