package kube

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/computeboard/computeboard/inventory"
)

// Labels Nodes adds to a node's own.
const (
	NodeLabelProvider  = "provider"       // the provider's Config.Name
	NodeLabelNamespace = "kube.namespace" // where its Jobs go
	NodeLabelTaints    = "kube.taints"    // its tolerated taints, key=value:Effect, comma-separated
)

// Node labels of NVIDIA's GPU feature discovery that Nodes reads.
const (
	labelGPUProduct = "nvidia.com/gpu.product" // the GPUs' Model
	labelGPUMemory  = "nvidia.com/gpu.memory"  // MiB per GPU
)

// ClusterNode is a node of the cluster, and whether it can take a task
// (Out: why not, "kube: cordoned").
type ClusterNode = inventory.Offered

// Nodes lists the nodes ClusterNodes lists that can take a task.
func (p *Provider) Nodes(ctx context.Context) ([]inventory.Node, error) {
	all, err := p.ClusterNodes(ctx)
	return inventory.Usable(all), err
}

// ClusterNodes lists the cluster's nodes matching Config.NodeSelector, as
// pool nodes, each Out unless it can take a task (Ready, not cordoned, and
// every NoSchedule or NoExecute taint tolerated by Config.Tolerations):
// allocatable CPU and memory; nvidia.com/gpu as that many GPUs (Model from
// nvidia.com/gpu.product, IDs from GPUID); nvidia.com/mig-<profile> as
// MIG devices of one GPU in MIG mode (IDs from MIGID); the node's labels,
// and provider, kube.namespace and kube.taints. The node's name is the
// one Start pins a task to.
func (p *Provider) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	list, err := p.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: p.nodeSelector})
	if err != nil {
		return nil, fmt.Errorf("kube: nodes: %w", err)
	}
	var out []ClusterNode
	for _, kn := range list.Items {
		alloc := kn.Status.Allocatable
		n := inventory.Node{
			Name:      kn.Name,
			CPUs:      float64(alloc.Cpu().MilliValue()) / 1000,
			MemoryMiB: alloc.Memory().Value() >> 20,
			Labels:    maps.Clone(kn.Labels),
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[NodeLabelProvider] = p.name
		n.Labels[NodeLabelNamespace] = p.namespace
		var taints []string
		for _, t := range kn.Spec.Taints {
			taints = append(taints, t.ToString())
		}
		if len(taints) > 0 {
			n.Labels[NodeLabelTaints] = strings.Join(taints, ",")
		}
		memMiB, _ := strconv.ParseInt(kn.Labels[labelGPUMemory], 10, 64)
		if q, ok := alloc[ResourceGPU]; ok {
			for i := range q.Value() {
				n.GPUs = append(n.GPUs, inventory.GPU{UUID: GPUID(kn.Name, int(i)), Model: kn.Labels[labelGPUProduct],
					MemoryMiB: memMiB, Source: inventory.FromConfig})
			}
		}
		var mig []inventory.MIGInstance
		for _, name := range slices.Sorted(maps.Keys(alloc)) {
			profile, ok := strings.CutPrefix(string(name), ResourceMIGPrefix)
			if !ok {
				continue
			}
			if _, err := inventory.ParseMIGProfile(profile); err != nil {
				p.log.Warn("a MIG resource of a shape the pool does not know; left out", "node", kn.Name, "resource", name)
				continue
			}
			q := alloc[name]
			for i := range q.Value() {
				mig = append(mig, inventory.MIGInstance{UUID: MIGID(kn.Name, profile, int(i)), Profile: profile})
			}
		}
		if len(mig) > 0 {
			n.GPUs = append(n.GPUs, inventory.GPU{UUID: "kube:" + kn.Name + ":mig", Model: kn.Labels[labelGPUProduct],
				MIGMode: true, MIG: mig, Source: inventory.FromConfig})
		}
		out = append(out, ClusterNode{Node: n, Out: p.out(&kn)})
	}
	slices.SortFunc(out, func(a, b ClusterNode) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// out says why no task can be placed on the node, or "".
func (p *Provider) out(n *corev1.Node) string {
	if n.Spec.Unschedulable {
		return "kube: cordoned"
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return "kube: not Ready"
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(p.tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) }) {
			return "kube: taint " + t.ToString() + " not tolerated"
		}
	}
	return ""
}

// tolerates reports whether tol tolerates taint, as the scheduler reads a
// toleration: the same effect (or any), and the same key and value (Equal,
// the default operator), the key alone (Exists), or any key (Exists
// with no key).
func tolerates(tol corev1.Toleration, taint corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != taint.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != taint.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Key != "" && tol.Value == taint.Value
	}
	return false
}

// GPUID names the i-th GPU (nvidia.com/gpu) of a node:
// "kube:<node>:gpu:<i>". Kubernetes hands out GPUs by count, so a
// Placement's GPUs become nvidia.com/gpu: len(GPUs).
func GPUID(node string, i int) string { return "kube:" + node + ":gpu:" + strconv.Itoa(i) }

// MIGID names the i-th MIG device of a profile on a node:
// "kube:<node>:mig-<profile>:<i>"; a Placement's MIG devices become
// nvidia.com/mig-<profile>: their count per profile.
func MIGID(node, profile string, i int) string {
	return "kube:" + node + ":mig-" + profile + ":" + strconv.Itoa(i)
}

// migProfile is the profile a MIGID names.
func migProfile(id string) (string, bool) {
	parts := strings.Split(id, ":")
	if len(parts) != 4 || parts[0] != "kube" || !strings.HasPrefix(parts[2], "mig-") {
		return "", false
	}
	profile := strings.TrimPrefix(parts[2], "mig-")
	if _, err := inventory.ParseMIGProfile(profile); err != nil {
		return "", false
	}
	return profile, true
}
