package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// found is a discovered machine: two NUMA domains, one whole GPU and one
// in MIG mode.
func found() Node {
	return Node{
		Name: "host-a", CPUs: 16, MemoryMiB: 64 * 1024,
		NUMA: []NUMADomain{{ID: 0, CPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, MemoryMiB: 32768}, {ID: 1, CPUs: []int{8, 9, 10, 11, 12, 13, 14, 15}, MemoryMiB: 32768}},
		GPUs: []GPU{
			{UUID: "GPU-0", Name: "NVIDIA H100 80GB HBM3", Model: "H100-80GB-HBM3", MemoryMiB: 81559, Source: FromNVML},
			{UUID: "GPU-1", Name: "NVIDIA H100 80GB HBM3", Model: "H100-80GB-HBM3", MemoryMiB: 81559, Source: FromNVML, MIGMode: true,
				MIG: []MIGInstance{{"MIG-1a", "3g.40gb"}, {"MIG-1b", "1g.10gb"}}},
		},
	}
}

func TestBuildWithEmptyConfigIsWhatWasFound(t *testing.T) {
	got, err := Build(found(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(found(), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBuildConfigOverridesDiscovery(t *testing.T) {
	in := found()
	in.Labels = map[string]string{"zone": "discovered", "keep": "yes"}
	cfg := Config{
		Name: "gpu-1", CPUCores: 14, MemoryGB: 60.5, NetworkMbps: 10000,
		Labels:    map[string]string{"zone": "a"},
		StorageGB: 100, Storage: map[string]float64{"nvme": 800.9, "hdd": 0},
		GPUModels: map[string]string{"NVIDIA H100 80GB HBM3": "H100-80GB"},
		GPUs: []GPUConfig{
			// Overrides the discovered GPU-1: new MIG layout, memory kept.
			{UUID: "GPU-1", MIG: []MIGConfig{{"MIG-x", "7g.80gb"}}},
			// A GPU NVML cannot see.
			{UUID: "GPU-declared", Model: "L4", MemoryGB: 24},
		},
	}
	got, err := Build(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := Node{
		Name: "gpu-1", CPUs: 14, MemoryMiB: 61952, NetworkMbps: 10000,
		Labels:  map[string]string{"zone": "a", "keep": "yes"},
		Storage: map[string]int64{"ssd": 100, "nvme": 800},
		NUMA:    found().NUMA,
		GPUs: []GPU{
			{UUID: "GPU-0", Name: "NVIDIA H100 80GB HBM3", Model: "H100-80GB", MemoryMiB: 81559, Source: FromNVML},
			{UUID: "GPU-1", Name: "NVIDIA H100 80GB HBM3", Model: "H100-80GB", MemoryMiB: 81559, Source: FromConfig, MIGMode: true,
				MIG: []MIGInstance{{"MIG-x", "7g.80gb"}}},
			{UUID: "GPU-declared", Model: "L4", MemoryMiB: 24 * 1024, Source: FromConfig},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"zone": "discovered", "keep": "yes"}, in.Labels); diff != "" {
		t.Errorf("Build modified its input's labels:\n%s", diff)
	}
	if len(in.GPUs[1].MIG) != 2 || in.GPUs[0].Model != "H100-80GB-HBM3" {
		t.Errorf("Build modified its input's GPUs: %+v", in.GPUs)
	}
}

func TestBuildRenamesByDefaultModelToo(t *testing.T) {
	got, err := Build(found(), Config{GPUModels: map[string]string{"H100-80GB-HBM3": "H100"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got.GPUs {
		if g.Model != "H100" {
			t.Errorf("%s: model %q, want H100", g.UUID, g.Model)
		}
	}
}

func TestBuildDeclaredOnlyMachine(t *testing.T) {
	// What a test agent or a machine without discovery looks like: nothing
	// found but a name, everything declared.
	got, err := Build(Node{}, Config{Name: "fake-0", CPUCores: 8, MemoryGB: 32, GPUs: []GPUConfig{
		{UUID: "GPU-f0", Model: "A100-80GB", MemoryGB: 80, MIG: []MIGConfig{{"MIG-f0a", "3g.40gb"}, {"MIG-f0b", "3g.40gb"}}},
		{UUID: "GPU-f1", Model: "A100-80GB", MemoryGB: 80},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "fake-0" || got.CPUs != 8 || got.MemoryMiB != 32768 || len(got.GPUs) != 2 || !got.GPUs[0].MIGMode || got.GPUs[1].MIGMode {
		t.Errorf("got %+v", got)
	}
}

func TestBuildRejects(t *testing.T) {
	tests := map[string]struct {
		found    Node
		cfg      Config
		wantText string
	}{
		"invalid config": {found(), Config{MemoryGB: -1}, "memory_gb -1 is negative"},
		"new gpu without model": {found(), Config{GPUs: []GPUConfig{{UUID: "GPU-new", MemoryGB: 24}}},
			"gpus[0] (GPU-new): model and memory_gb are required"},
		"new gpu without memory": {found(), Config{GPUs: []GPUConfig{{UUID: "GPU-new", Model: "L4"}}},
			"gpus[0] (GPU-new): model and memory_gb are required"},
		"declared MIG reuses a discovered GPU's uuid": {found(), Config{GPUs: []GPUConfig{
			{UUID: "GPU-new", Model: "L4", MemoryGB: 24, MIG: []MIGConfig{{"GPU-0", "1g.10gb"}}}}}, `uuid "GPU-0" names two devices`},
		"declared GPU reuses a discovered MIG uuid": {found(), Config{GPUs: []GPUConfig{
			{UUID: "MIG-1a", Model: "L4", MemoryGB: 24}}}, `uuid "MIG-1a" names two devices`},
		"no name anywhere": {Node{}, Config{CPUCores: 1}, "name: none configured and none discovered"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Build(tc.found, tc.cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("err = %v, want ErrConfig containing %q", err, tc.wantText)
			}
		})
	}
}
