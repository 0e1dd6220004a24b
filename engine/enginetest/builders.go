// Package enginetest builds engine values for tests, benchmarks and the
// simulator: fluent builders (enginetest.Job("a").Priority(5).CPU(2)) and
// seeded generators of clusters and workloads.
package enginetest

import (
	"fmt"
	"maps"
	"time"

	"github.com/computeboard/computeboard/engine"
)

// Epoch is the fixed time builders use when none is given.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// JobBuilder builds an engine.Job.
type JobBuilder struct{ j engine.Job }

// Job starts a job with ID id, priority 4, account "default", submitted at Epoch.
func Job(id string) *JobBuilder {
	return &JobBuilder{j: engine.Job{ID: id, Account: "default", Priority: 4, Submitted: Epoch}}
}

func (b *JobBuilder) Account(a string) *JobBuilder { b.j.Account = a; return b }
func (b *JobBuilder) Priority(p int) *JobBuilder   { b.j.Priority = p; return b }

// CPU sets the CPU request in cores (fractions allowed).
func (b *JobBuilder) CPU(cores float64) *JobBuilder {
	b.j.Request[engine.DimCPU] = int64(cores * 1000)
	return b
}

// Mem sets the memory request in GiB.
func (b *JobBuilder) Mem(gib float64) *JobBuilder {
	b.j.Request[engine.DimMemory] = int64(gib * 1024)
	return b
}

// MemMiB sets the memory request in MiB.
func (b *JobBuilder) MemMiB(mib int64) *JobBuilder { b.j.Request[engine.DimMemory] = mib; return b }

// GPU asks for n whole GPUs.
func (b *JobBuilder) GPU(n int) *JobBuilder { b.j.Request[engine.DimGPU] = int64(n); return b }

// GPUMem sets the total GPU memory wanted, in GiB.
func (b *JobBuilder) GPUMem(gib int64) *JobBuilder {
	b.j.Request[engine.DimGPUMemory] = gib * 1024
	return b
}

func (b *JobBuilder) GPUModel(m string) *JobBuilder { b.j.GPUModel = m; return b }

// MIG asks for n instances of a MIG profile.
func (b *JobBuilder) MIG(profile string, n int) *JobBuilder {
	b.j.MIGProfile = profile
	b.j.Request[engine.DimGPU] = int64(n)
	return b
}

// Storage asks for gib GiB from a tier ("nvme", "ssd", "hdd").
func (b *JobBuilder) Storage(tier string, gib int64) *JobBuilder {
	d, ok := engine.TierDim(tier)
	if !ok {
		panic(fmt.Sprintf("enginetest: unknown tier %q", tier))
	}
	b.j.StorageTier = tier
	b.j.Request[d] = gib
	return b
}

func (b *JobBuilder) Net(mbps int64) *JobBuilder { b.j.Request[engine.DimNetwork] = mbps; return b }

func (b *JobBuilder) Selector(k, v string) *JobBuilder {
	if b.j.NodeSelector == nil {
		b.j.NodeSelector = map[string]string{}
	}
	b.j.NodeSelector[k] = v
	return b
}

func (b *JobBuilder) NUMA() *JobBuilder                      { b.j.NUMALocal = true; return b }
func (b *JobBuilder) Strategy(s engine.Strategy) *JobBuilder { b.j.Strategy = s; return b }
func (b *JobBuilder) Gang(id string, size int) *JobBuilder {
	b.j.GangID, b.j.GangSize = id, size
	return b
}
func (b *JobBuilder) Submitted(t time.Time) *JobBuilder      { b.j.Submitted = t; return b }
func (b *JobBuilder) Deadline(t time.Time) *JobBuilder       { b.j.Deadline = t; return b }
func (b *JobBuilder) Est(d time.Duration) *JobBuilder        { b.j.EstDuration = d; return b }
func (b *JobBuilder) Limit(d time.Duration) *JobBuilder      { b.j.TimeLimit = d; return b }
func (b *JobBuilder) Request(r engine.Resources) *JobBuilder { b.j.Request = r; return b }

// Obj returns the job (a copy; the builder can be reused).
func (b *JobBuilder) Obj() engine.Job {
	j := b.j
	j.NodeSelector = maps.Clone(b.j.NodeSelector)
	return j
}

// Running returns the job as running on node since started.
func (b *JobBuilder) Running(node string, started time.Time) engine.Running {
	return engine.Running{Job: b.Obj(), Node: node, Started: started}
}

// NodeBuilder builds an engine.Node.
type NodeBuilder struct{ n engine.Node }

// Node starts an empty, healthy node.
func Node(name string) *NodeBuilder { return &NodeBuilder{n: engine.Node{Name: name}} }

// CPU sets the capacity in cores.
func (b *NodeBuilder) CPU(cores int64) *NodeBuilder {
	b.n.Capacity[engine.DimCPU] = cores * 1000
	return b
}

// Mem sets the memory capacity in GiB.
func (b *NodeBuilder) Mem(gib int64) *NodeBuilder {
	b.n.Capacity[engine.DimMemory] = gib * 1024
	return b
}

func (b *NodeBuilder) Net(mbps int64) *NodeBuilder { b.n.Capacity[engine.DimNetwork] = mbps; return b }

// Storage sets a tier's capacity in GiB.
func (b *NodeBuilder) Storage(tier string, gib int64) *NodeBuilder {
	d, ok := engine.TierDim(tier)
	if !ok {
		panic(fmt.Sprintf("enginetest: unknown tier %q", tier))
	}
	b.n.Capacity[d] = gib
	return b
}

// GPUs adds n whole GPUs of a model with memGiB each (IDs <node>-gpu<k>).
func (b *NodeBuilder) GPUs(model string, n int, memGiB int64) *NodeBuilder {
	for range n {
		id := fmt.Sprintf("%s-gpu%d", b.n.Name, len(b.n.GPUs))
		b.n.GPUs = append(b.n.GPUs, engine.GPU{ID: id, Model: model, MemoryMiB: memGiB * 1024})
		b.n.Capacity[engine.DimGPU]++
		b.n.Capacity[engine.DimGPUMemory] += memGiB * 1024
	}
	return b
}

// MIGGPU adds one GPU in MIG mode with the given instance profiles.
func (b *NodeBuilder) MIGGPU(model string, memGiB int64, profiles ...string) *NodeBuilder {
	id := fmt.Sprintf("%s-gpu%d", b.n.Name, len(b.n.GPUs))
	g := engine.GPU{ID: id, Model: model, MemoryMiB: memGiB * 1024}
	for k, p := range profiles {
		g.MIG = append(g.MIG, engine.MIGInstance{ID: fmt.Sprintf("%s-mig%d", id, k), Profile: p})
	}
	b.n.GPUs = append(b.n.GPUs, g)
	return b
}

// NUMA splits the node's CPU and memory evenly over n domains.
func (b *NodeBuilder) NUMA(n int) *NodeBuilder {
	b.n.NUMA = nil
	for k := range n {
		b.n.NUMA = append(b.n.NUMA, engine.NUMADomain{
			ID: k, CPU: b.n.Capacity[engine.DimCPU] / int64(n), Memory: b.n.Capacity[engine.DimMemory] / int64(n),
		})
	}
	return b
}

func (b *NodeBuilder) Label(k, v string) *NodeBuilder {
	if b.n.Labels == nil {
		b.n.Labels = map[string]string{}
	}
	b.n.Labels[k] = v
	return b
}

func (b *NodeBuilder) Unhealthy() *NodeBuilder { b.n.Unhealthy = true; return b }

// Alloc marks resources as already in use.
func (b *NodeBuilder) Alloc(r engine.Resources) *NodeBuilder {
	b.n.Allocated = b.n.Allocated.Add(r)
	return b
}

// Obj returns the node (a deep copy).
func (b *NodeBuilder) Obj() engine.Node {
	n := b.n
	n.Labels = maps.Clone(b.n.Labels)
	n.GPUs = append([]engine.GPU(nil), b.n.GPUs...)
	for i := range n.GPUs {
		n.GPUs[i].MIG = append([]engine.MIGInstance(nil), n.GPUs[i].MIG...)
	}
	n.NUMA = append([]engine.NUMADomain(nil), b.n.NUMA...)
	return n
}
