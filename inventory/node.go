package inventory

import (
	"maps"
	"slices"

	"github.com/computeboard/computeboard/engine"
)

// Node is one machine's inventory: what an agent registers for its node and
// renews with heartbeats. It is plain data with JSON tags, so the pool can
// store it as it is; Engine turns it into the engine's view.
type Node struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	CPUs        float64           `json:"cpus"`       // cores offered to jobs (logical CPUs, or the configured cpu_cores)
	MemoryMiB   int64             `json:"memory_mib"` // memory offered to jobs
	NetworkMbps int64             `json:"network_mbps,omitempty"`
	Storage     map[string]int64  `json:"storage_gib,omitempty"` // GiB per tier (engine.TierNVMe, TierSSD, TierHDD)
	NUMA        []NUMADomain      `json:"numa,omitempty"`        // in ID order; empty = one domain (no NUMA information)
	GPUs        []GPU             `json:"gpus,omitempty"`        // in discovery order (NVML index), then declared ones
	// Price is what the node's resources cost per hour: its provider's
	// price list (adapter config providers[].cost); zero = free.
	Price Price `json:"price,omitzero"`
}

// Price is a price list per resource-hour.
type Price struct {
	CoreHour float64 `json:"core_hour,omitempty"` // one CPU core
	GiBHour  float64 `json:"gib_hour,omitempty"`  // one GiB of memory
	GPUHour  float64 `json:"gpu_hour,omitempty"`  // one whole GPU
}

// NUMADomain is one NUMA node with CPUs this process may use. Memory-only
// domains (CXL, HBM without cores) are not listed: nothing NUMA-local can
// run there.
type NUMADomain struct {
	ID        int   `json:"id"`         // the kernel's node number (nodeN)
	CPUs      []int `json:"cpus"`       // logical CPU numbers, ascending: the cpuset of a job placed here
	MemoryMiB int64 `json:"memory_mib"` // MemTotal of the domain
}

// GPU is one device. With MIG instances it is in MIG mode: the engine hands
// out only its instances, never the whole device.
type GPU struct {
	UUID      string        `json:"uuid"`           // "GPU-…"; CUDA_VISIBLE_DEVICES takes it
	Name      string        `json:"name,omitempty"` // NVML's device name ("NVIDIA H100 80GB HBM3"); "" when declared
	Model     string        `json:"model"`          // matched exactly against a job's gpu_model
	MemoryMiB int64         `json:"memory_mib"`     // total device memory
	MIGMode   bool          `json:"mig_mode,omitempty"`
	MIG       []MIGInstance `json:"mig,omitempty"`
	Source    Source        `json:"source"`
}

// MIGInstance is one MIG device of a GPU in MIG mode.
type MIGInstance struct {
	UUID    string `json:"uuid"`    // "MIG-…"; CUDA_VISIBLE_DEVICES takes it
	Profile string `json:"profile"` // "1g.10gb", "3g.40gb", "1c.2g.20gb"; matched exactly against a job's MIG profile
}

// Source says where a GPU's description came from.
type Source string

// GPU sources.
const (
	FromNVML   Source = "nvml"   // discovered through NVML
	FromConfig Source = "config" // declared by hand (or a discovered GPU that config overrode)
)

// Usable reports whether the engine may place work on the GPU: a GPU in MIG
// mode with no instances can run nothing until instances are created.
func (g *GPU) Usable() bool { return !g.MIGMode || len(g.MIG) > 0 }

// Engine returns the node as the engine sees it, with nothing allocated:
//   - capacity in engine units: millicores, MiB, Mbps, GiB per storage tier;
//   - whole GPUs (not in MIG mode) in DimGPU and their memory summed in
//     DimGPUMemory, as engine/sim and enginetest build nodes; GPUs in MIG
//     mode add nothing there (their instances are placed by profile);
//   - GPU and MIG IDs are their UUIDs, so a Placement names the devices to
//     make visible to the task;
//   - NUMA domains as free CPU (millicores) and memory (MiB), all free.
//
// GPUs that cannot be used (MIG mode with no instances) are left out.
// A priced node gets its Price, and as its Cost (what cost-based
// preemption weighs lost work by) the price of its whole capacity per
// billing unit of it (engine.DefaultPolicy's billing: a core 1, a GiB
// 0.25, a GPU 8), so the same job costs more on a dearer node.
func (n *Node) Engine() engine.Node {
	en := engine.Node{Name: n.Name, Labels: maps.Clone(n.Labels),
		Price: engine.Price{CoreHour: n.Price.CoreHour, GiBHour: n.Price.GiBHour, GPUHour: n.Price.GPUHour}}
	en.Capacity[engine.DimCPU] = millicores(n.CPUs)
	en.Capacity[engine.DimMemory] = n.MemoryMiB
	en.Capacity[engine.DimNetwork] = n.NetworkMbps
	for _, tier := range slices.Sorted(maps.Keys(n.Storage)) {
		if d, ok := engine.TierDim(tier); ok {
			en.Capacity[d] = n.Storage[tier]
		}
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.Usable() {
			continue
		}
		eg := engine.GPU{ID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB}
		for _, m := range g.MIG {
			eg.MIG = append(eg.MIG, engine.MIGInstance{ID: m.UUID, Profile: m.Profile})
		}
		if len(eg.MIG) == 0 {
			en.Capacity[engine.DimGPU]++
			en.Capacity[engine.DimGPUMemory] += g.MemoryMiB
		}
		en.GPUs = append(en.GPUs, eg)
	}
	ids := 0
	for _, d := range n.NUMA {
		ids += len(d.CPUs)
	}
	// CPU IDs go to the engine (so the ledger hands out cpusets) only when
	// they are the node's CPUs: a node configured with more or fewer cores
	// than it has IDs keeps counting cores without pinning them.
	withIDs := int64(ids)*1000 == en.Capacity[engine.DimCPU]
	for _, d := range n.NUMA {
		dom := engine.NUMADomain{ID: d.ID, CPU: int64(len(d.CPUs)) * 1000, Memory: d.MemoryMiB}
		if withIDs {
			dom.CPUs = slices.Clone(d.CPUs)
		}
		en.NUMA = append(en.NUMA, dom)
	}
	if n.Price != (Price{}) {
		gpus := float64(len(n.GPUs))
		price := n.Price.CoreHour*n.CPUs + n.Price.GiBHour*float64(n.MemoryMiB)/1024 + n.Price.GPUHour*gpus
		if units := n.CPUs + 0.25*float64(n.MemoryMiB)/1024 + 8*gpus; units > 0 {
			en.Cost = price / units
		}
	}
	return en
}

// Clone returns a deep copy.
func (n *Node) Clone() Node {
	c := *n
	c.Labels = maps.Clone(n.Labels)
	c.Storage = maps.Clone(n.Storage)
	c.NUMA = slices.Clone(n.NUMA)
	for i := range c.NUMA {
		c.NUMA[i].CPUs = slices.Clone(c.NUMA[i].CPUs)
	}
	c.GPUs = slices.Clone(n.GPUs)
	for i := range c.GPUs {
		c.GPUs[i].MIG = slices.Clone(c.GPUs[i].MIG)
	}
	return c
}

func millicores(cores float64) int64 { return int64(cores*1000 + 0.5) }

// Offered is a node a backend lists (a Slurm partition's, a Kubernetes
// cluster's) and, when it cannot take work now, why: Out ("slurm: node
// drained: maintenance", "kube: cordoned"), "" when it can.
type Offered struct {
	Node
	Out string
}

// Usable returns the nodes of all that are not Out.
func Usable(all []Offered) []Node {
	var out []Node
	for _, n := range all {
		if n.Out == "" {
			out = append(out, n.Node)
		}
	}
	return out
}
