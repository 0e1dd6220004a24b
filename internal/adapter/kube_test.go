package adapter

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/providers/kube"
	"github.com/computeboard/computeboard/wire"
)

// TestKubeProviderConfig: a kube provider's section, its defaults filled
// and paths taken from the config's directory; a template's image reaches
// the resolved command.
func TestKubeProviderConfig(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`
work_dir: /srv/cb/jobs
templates:
  train: {command: [/opt/train], image: registry.example/train:2}
  plain: {command: [/bin/true]}
providers:
  - name: k8s
    kind: kube
    kube:
      kubeconfig: kube.yaml
      namespace: batch
      priority_classes: {9: urgent}
      tolerations: [{key: dedicated, value: batch, effect: NoSchedule}, {key: gpu, operator: Exists}]
      node_selector: pool=ml
      retention: 30m
  - name: bare
    kind: kube
`), "/srv/cb", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &KubeProviderConfig{Kubeconfig: "/srv/cb/kube.yaml", Namespace: "batch", WorkDir: "/srv/cb/kube-k8s",
		PriorityClasses: map[int]string{9: "urgent"}, NodeSelector: "pool=ml", Retention: 30 * time.Minute,
		Tolerations: []kube.Toleration{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}, {Key: "gpu", Operator: "Exists"}}}
	if diff := cmp.Diff(want, cfg.Providers[0].Kube); diff != "" {
		t.Errorf("kube section (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&KubeProviderConfig{WorkDir: "/srv/cb/kube-bare"}, cfg.Providers[1].Kube); diff != "" {
		t.Errorf("a kube provider without a section (-want +got):\n%s", diff)
	}
	for tpl, image := range map[string]string{"train": "registry.example/train:2", "plain": ""} {
		cmd, werr := cfg.Resolve(wire.Request{Template: tpl})
		if werr != nil || cmd.Image != image {
			t.Errorf("Resolve(%s): image %q, %v; want %q", tpl, cmd.Image, werr, image)
		}
	}
}

func TestKubeProviderConfigRejects(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ body, want string }{
		"kube on slurm":         {"providers:\n  - {name: a, kind: slurm, kube: {namespace: x}}\n", "kube section"},
		"unknown kube key":      {"providers:\n  - {name: a, kind: kube, kube: {namespaces: x}}\n", "namespaces"},
		"bad toleration":        {"providers:\n  - {name: a, kind: kube, kube: {tolerations: [{key: k, operator: Is}]}}\n", "operator \"Is\""},
		"equal without key":     {"providers:\n  - {name: a, kind: kube, kube: {tolerations: [{value: v}]}}\n", "needs a key"},
		"bad effect":            {"providers:\n  - {name: a, kind: kube, kube: {tolerations: [{key: k, effect: Never}]}}\n", "effect \"Never\""},
		"bad node selector":     {"providers:\n  - {name: a, kind: kube, kube: {node_selector: 'a=(b'}}\n", "node_selector"},
		"priority out of range": {"providers:\n  - {name: a, kind: kube, kube: {priority_classes: {10: top}}}\n", "priority 0..9"},
		"negative retention":    {"providers:\n  - {name: a, kind: kube, kube: {retention: -1s}}\n", "retention"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.body), t.TempDir(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config:\n%s\nerr %v; want one saying %q", tc.body, err, tc.want)
			}
		})
	}
}
