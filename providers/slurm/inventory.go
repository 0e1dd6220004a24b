package slurm

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/providers"
)

// Labels of the nodes Nodes returns.
const (
	LabelProvider  = "provider"        // the provider's Config.Name ("slurm" by default)
	LabelPartition = "slurm.partition" // the Config.Partition, or the node's partitions, comma-separated
	LabelFeatures  = "slurm.features"  // the node's active features, comma-separated
	LabelState     = "slurm.state"     // sinfo's state: "idle", "mixed", "allocated", ...
)

// usableStates are the node states a job can be placed in; the rest
// (down, drained, draining, fail, future, unknown, ...) are out.
var usableStates = []string{"idle", "mixed", "allocated", "completing"}

// PartitionNode is a node of the partition and, when it cannot take
// jobs, why (Out: "slurm: node drained: test").
type PartitionNode = inventory.Offered

// Nodes lists the partition's usable nodes (every partition's, when
// Config.Partition is empty) as pool nodes: PartitionNodes without those
// Out.
func (p *Provider) Nodes(ctx context.Context) ([]inventory.Node, error) {
	all, err := p.PartitionNodes(ctx)
	return inventory.Usable(all), err
}

// PartitionNodes lists the partition's nodes, usable or not (every
// partition's, when Config.Partition is empty), from one sinfo --json (or
// slurmrestd's nodes): CPUs, memory (RealMemory), GPUs from the node's
// gpu GRES (one GPU per unit, Model its GRES type, UUID from GPUID, so a
// Placement of them turns back into --gres), and labels provider
// (Config.Name), slurm.partition, slurm.features and slurm.state. The
// node's name is Slurm's, which Start passes as --nodelist. A node down,
// drained, draining, failing or not responding is Out, with Slurm's
// state and reason.
func (p *Provider) PartitionNodes(ctx context.Context) ([]PartitionNode, error) {
	infos, err := p.tr.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurm: nodes: %w", err)
	}
	var out []PartitionNode
	for _, ni := range infos {
		if p.partition != "" && !slices.Contains(ni.Partitions, p.partition) {
			continue
		}
		part := p.partition
		if part == "" {
			part = strings.Join(ni.Partitions, ",")
		}
		n := inventory.Node{
			Name:      ni.Name,
			CPUs:      float64(ni.CPUs),
			MemoryMiB: ni.RealMemory,
			Labels:    map[string]string{LabelProvider: p.name, LabelPartition: part, LabelState: ni.State},
		}
		if ni.Features != "" && ni.Features != "(null)" {
			n.Labels[LabelFeatures] = ni.Features
		}
		for _, g := range parseGres(ni.Gres) {
			if g.Name != "gpu" {
				continue
			}
			for i := range g.Count {
				n.GPUs = append(n.GPUs, inventory.GPU{UUID: GPUID(ni.Name, g.Type, i), Model: g.Type, Source: inventory.FromConfig})
			}
		}
		out = append(out, PartitionNode{Node: n, Out: nodeOut(ni)})
	}
	return out, nil
}

// nodeOut says why a node takes no jobs, "" if it does.
func nodeOut(ni NodeInfo) string {
	var flags []string
	for _, f := range ni.StateFlags {
		if f == "DRAIN" || f == "DRAINING" || f == "DRAINED" || f == "NOT_RESPONDING" || f == "FAIL" {
			flags = append(flags, strings.ToLower(f))
		}
	}
	if slices.Contains(usableStates, ni.State) && len(flags) == 0 {
		return ""
	}
	why := "slurm: node " + strings.Join(slices.Concat([]string{ni.State}, flags), "+")
	if ni.Reason != "" {
		why += ": " + ni.Reason
	}
	return why
}

// GPUID names the i-th GPU of GRES type typ ("" for untyped) on a node:
// "slurm:<node>:gpu:<type>:<i>". Slurm hands out GPUs by count, not by
// device, so a Placement naming such IDs becomes --gres=gpu[:type]:N.
func GPUID(node, typ string, i int) string {
	return "slurm:" + node + ":gpu:" + typ + ":" + strconv.Itoa(i)
}

// gresOf returns the --gres of a placement: its GPUs (and MIG instances)
// counted per GRES type named in their GPUID; other IDs count as untyped
// GPUs. Empty when it has none.
func gresOf(pl providers.Placement) string {
	counts := map[string]int{}
	var types []string
	for _, id := range slices.Concat(pl.GPUs, pl.MIG) {
		typ := ""
		if parts := strings.Split(id, ":"); len(parts) == 5 && parts[0] == "slurm" && parts[2] == "gpu" {
			typ = parts[3]
		}
		if counts[typ] == 0 {
			types = append(types, typ)
		}
		counts[typ]++
	}
	var gres []string
	for _, typ := range types {
		if typ == "" {
			gres = append(gres, "gpu:"+strconv.Itoa(counts[typ]))
		} else {
			gres = append(gres, "gpu:"+typ+":"+strconv.Itoa(counts[typ]))
		}
	}
	return strings.Join(gres, ",")
}
