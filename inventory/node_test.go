package inventory

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/engine/enginetest"
)

func TestEngineNode(t *testing.T) {
	n := Node{
		Name: "gpu-1", CPUs: 15.5, MemoryMiB: 61952, NetworkMbps: 10000,
		Labels:  map[string]string{"zone": "a"},
		Storage: map[string]int64{"ssd": 100, "nvme": 800},
		NUMA:    []NUMADomain{{ID: 0, CPUs: []int{0, 1}, MemoryMiB: 1000}, {ID: 2, CPUs: []int{2, 3, 4}, MemoryMiB: 2000}},
		GPUs: []GPU{
			{UUID: "GPU-0", Model: "H100", MemoryMiB: 81559},
			{UUID: "GPU-1", Model: "H100", MemoryMiB: 81559, MIGMode: true, MIG: []MIGInstance{{"MIG-a", "3g.40gb"}, {"MIG-b", "1g.10gb"}}},
			{UUID: "GPU-2", Model: "H100", MemoryMiB: 81559, MIGMode: true}, // no instances: left out
			{UUID: "GPU-3", Model: "L4", MemoryMiB: 24576},
		},
	}
	want := engine.Node{
		Name:   "gpu-1",
		Labels: map[string]string{"zone": "a"},
		Capacity: engine.Resources{engine.DimCPU: 15500, engine.DimMemory: 61952, engine.DimNetwork: 10000,
			engine.DimSSD: 100, engine.DimNVMe: 800, engine.DimGPU: 2, engine.DimGPUMemory: 81559 + 24576},
		GPUs: []engine.GPU{
			{ID: "GPU-0", Model: "H100", MemoryMiB: 81559},
			{ID: "GPU-1", Model: "H100", MemoryMiB: 81559, MIG: []engine.MIGInstance{{ID: "MIG-a", Profile: "3g.40gb"}, {ID: "MIG-b", Profile: "1g.10gb"}}},
			{ID: "GPU-3", Model: "L4", MemoryMiB: 24576},
		},
		NUMA: []engine.NUMADomain{{ID: 0, CPU: 2000, Memory: 1000}, {ID: 2, CPU: 3000, Memory: 2000}},
	}
	got := n.Engine()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Engine() (-want +got):\n%s", diff)
	}
	got.Labels["zone"] = "changed"
	if n.Labels["zone"] != "a" {
		t.Error("Engine() shares its labels map with the inventory")
	}
}

// TestEngineSchedulesOnBuiltNode checks the inventory gives the engine
// what it needs: a node declared in config takes whole-GPU, MIG and
// NUMA-local jobs on the right devices, and refuses a model it lacks.
func TestEngineSchedulesOnBuiltNode(t *testing.T) {
	inv, err := Build(Node{
		Name: "gpu-1", CPUs: 16, MemoryMiB: 65536,
		NUMA: []NUMADomain{{ID: 0, CPUs: []int{0, 1, 2, 3}, MemoryMiB: 8192}, {ID: 1, CPUs: []int{4, 5, 6, 7, 8, 9, 10, 11}, MemoryMiB: 16384}},
	}, Config{Storage: map[string]float64{"nvme": 100}, GPUs: []GPUConfig{
		{UUID: "GPU-whole", Model: "A100-80GB", MemoryGB: 80},
		{UUID: "GPU-mig", Model: "A100-80GB", MemoryGB: 80, MIG: []MIGConfig{{"MIG-3g", "3g.40gb"}, {"MIG-1g", "1g.10gb"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	numaJob := enginetest.Job("numa").CPU(6).Mem(8).Obj()
	numaJob.NUMALocal = true
	snap := engine.Snapshot{
		Now:   enginetest.Epoch,
		Nodes: []engine.Node{inv.Engine()},
		Pending: []engine.Job{
			enginetest.Job("whole").Priority(9).CPU(1).GPU(1).GPUModel("A100-80GB").Obj(),
			enginetest.Job("mig").CPU(1).MIG("1g.10gb", 1).Obj(),
			numaJob,
			enginetest.Job("scratch").CPU(1).Storage("nvme", 50).Obj(),
			enginetest.Job("h100").CPU(1).GPU(1).GPUModel("H100").Obj(),
			enginetest.Job("second-whole").CPU(1).GPU(1).Obj(), // the MIG GPU is never handed out whole
		},
	}
	plan, _ := engine.Schedule(engine.State{}, snap)
	type placed struct {
		GPUs, MIG []string
		NUMA      int
	}
	got := map[string]placed{}
	for _, p := range plan.Placements {
		got[p.JobID] = placed{p.GPUs, p.MIG, p.NUMA}
	}
	want := map[string]placed{
		"whole":   {GPUs: []string{"GPU-whole"}, NUMA: -1},
		"mig":     {MIG: []string{"MIG-1g"}, NUMA: -1},
		"numa":    {NUMA: 1},
		"scratch": {NUMA: -1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placements (-want +got):\n%s", diff)
	}
	var rejected []string
	for _, r := range plan.Rejected {
		rejected = append(rejected, r.JobID)
	}
	slices.Sort(rejected)
	if want := []string{"h100", "second-whole"}; !slices.Equal(rejected, want) {
		t.Errorf("rejected %v, want %v", rejected, want)
	}
}

func TestEngineCPUIDsOnlyWhenTheyAreTheNodesCPUs(t *testing.T) {
	n := Node{Name: "n", CPUs: 4, MemoryMiB: 1024, NUMA: []NUMADomain{{ID: 0, CPUs: []int{0, 1}, MemoryMiB: 512}, {ID: 1, CPUs: []int{2, 3}, MemoryMiB: 512}}}
	en := n.Engine()
	if got := en.NUMA[1].CPUs; len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("domain 1 CPUs %v, want [2 3]", got)
	}
	n.CPUs = 64 // configured past the machine: cores are counted, not pinned
	for _, d := range n.Engine().NUMA {
		if len(d.CPUs) != 0 {
			t.Fatalf("CPU IDs %v handed to the engine for a node of 64 configured cores", d.CPUs)
		}
	}
}
