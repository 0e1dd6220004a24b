package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// The YAML keys are those of the adapter's node section (snake_case, units
// in the name), and unknown keys are errors as in adapter.LoadConfig.
func TestConfigYAML(t *testing.T) {
	const doc = `
name: gpu-1
cpu_cores: 14
memory_gb: 120
labels: {zone: a}
network_mbps: 10000
storage: {nvme: 800, hdd: 4000}
storage_gb: 100
storage_tier: ssd
gpu_discovery: "off"
gpu_models: {"NVIDIA H100 80GB HBM3": H100-80GB}
gpus:
  - uuid: GPU-1
    model: H100-80GB
    memory_gb: 80
    mig:
      - {uuid: MIG-1a, profile: 3g.40gb}
      - {uuid: MIG-1b, profile: 1g.10gb}
`
	var got Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Name: "gpu-1", CPUCores: 14, MemoryGB: 120, Labels: map[string]string{"zone": "a"}, NetworkMbps: 10000,
		Storage: map[string]float64{"nvme": 800, "hdd": 4000}, StorageGB: 100, StorageTier: "ssd",
		GPUDiscovery: "off", GPUModels: map[string]string{"NVIDIA H100 80GB HBM3": "H100-80GB"},
		GPUs: []GPUConfig{{UUID: "GPU-1", Model: "H100-80GB", MemoryGB: 80,
			MIG: []MIGConfig{{UUID: "MIG-1a", Profile: "3g.40gb"}, {UUID: "MIG-1b", Profile: "1g.10gb"}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	dec = yaml.NewDecoder(strings.NewReader("gpus: [{uuid: G, modle: x}]"))
	dec.KnownFields(true)
	if err := dec.Decode(&Config{}); err == nil || !strings.Contains(err.Error(), "modle") {
		t.Errorf("misspelt key: err = %v, want one naming it", err)
	}
}

func TestValidateRejects(t *testing.T) {
	gpu := func(uuid string, mig ...MIGConfig) GPUConfig {
		return GPUConfig{UUID: uuid, Model: "A100", MemoryGB: 80, MIG: mig}
	}
	tests := map[string]struct {
		cfg      Config
		wantText []string
	}{
		"negative cpu":         {Config{CPUCores: -1}, []string{"cpu_cores -1 is negative"}},
		"negative memory":      {Config{MemoryGB: -0.5}, []string{"memory_gb -0.5 is negative"}},
		"negative network":     {Config{NetworkMbps: -10}, []string{"network_mbps -10 is negative"}},
		"negative storage_gb":  {Config{StorageGB: -1}, []string{"storage_gb -1 is negative"}},
		"negative tier size":   {Config{Storage: map[string]float64{"ssd": -2}}, []string{"storage.ssd -2 is negative"}},
		"negative gpu memory":  {Config{GPUs: []GPUConfig{{UUID: "G", MemoryGB: -1}}}, []string{"gpus[0]: memory_gb -1 is negative"}},
		"unknown tier key":     {Config{Storage: map[string]float64{"tape": 1}}, []string{`unknown tier "tape"`}},
		"unknown storage_tier": {Config{StorageGB: 1, StorageTier: "floppy"}, []string{`storage_tier "floppy"`}},
		"tier sized twice":     {Config{StorageGB: 1, Storage: map[string]float64{"ssd": 2}}, []string{"storage.ssd and storage_gb"}},
		"gpu discovery mode":   {Config{GPUDiscovery: "auto"}, []string{`gpu_discovery "auto"`}},
		"empty rename":         {Config{GPUModels: map[string]string{"NVIDIA H200": ""}}, []string{`gpu_models["NVIDIA H200"] is empty`}},
		"gpu without uuid":     {Config{GPUs: []GPUConfig{gpu("")}}, []string{"gpus[0]: uuid is required"}},
		"mig without uuid":     {Config{GPUs: []GPUConfig{gpu("G", MIGConfig{Profile: "1g.10gb"})}}, []string{"gpus[0].mig[0]: uuid is required"}},
		"duplicate gpu uuid":   {Config{GPUs: []GPUConfig{gpu("G"), gpu("G")}}, []string{`gpus[1]: uuid "G" already declared at gpus[0]`}},
		"mig reuses gpu uuid": {Config{GPUs: []GPUConfig{gpu("G"), gpu("H", MIGConfig{"G", "1g.10gb"})}},
			[]string{`gpus[1].mig[0]: uuid "G" already declared at gpus[0]`}},
		"unknown mig shape": {Config{GPUs: []GPUConfig{gpu("G", MIGConfig{"M", "half"})}}, []string{`gpus[0].mig[0]`, `"half"`}},
		"too many slices": {Config{GPUs: []GPUConfig{gpu("G", MIGConfig{"M1", "4g.40gb"}, MIGConfig{"M2", "4g.40gb"})}},
			[]string{"gpus[0]: MIG instances take 8 slices, a GPU has 7"}},
		"every error at once": {Config{CPUCores: -1, Storage: map[string]float64{"tape": 1}},
			[]string{"cpu_cores", "tape"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for name, cfg := range map[string]Config{
		"zero value": {},
		"full MIG split": {GPUs: []GPUConfig{{UUID: "G", Model: "A100", MemoryGB: 40, MIG: []MIGConfig{
			{"M1", "3g.20gb"}, {"M2", "2g.10gb"}, {"M3", "1g.5gb"}, {"M4", "1g.5gb"}}}}},
		// Compute instances share a GPU instance: their slices are not added.
		"compute instances": {GPUs: []GPUConfig{{UUID: "G", Model: "A100", MemoryGB: 40, MIG: []MIGConfig{
			{"M1", "7g.40gb"}, {"M2", "1c.7g.40gb"}, {"M3", "1c.7g.40gb"}}}}},
		"storage in two forms, two tiers": {StorageGB: 100, Storage: map[string]float64{"nvme": 10}},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseMIGProfile(t *testing.T) {
	tests := map[string]struct {
		want    MIGProfile
		wantErr bool
	}{
		"1g.10gb":     {want: MIGProfile{GPUSlices: 1, MemoryGB: 10}},
		"7g.141gb":    {want: MIGProfile{GPUSlices: 7, MemoryGB: 141}},
		"1g.10gb+me":  {want: MIGProfile{GPUSlices: 1, MemoryGB: 10, Suffix: "+me"}},
		"1g.24gb-me":  {want: MIGProfile{GPUSlices: 1, MemoryGB: 24, Suffix: "-me"}},
		"1g.18gb+gfx": {want: MIGProfile{GPUSlices: 1, MemoryGB: 18, Suffix: "+gfx"}},
		"1c.3g.40gb":  {want: MIGProfile{ComputeSlices: 1, GPUSlices: 3, MemoryGB: 40}},
		"4c.3g.40gb":  {wantErr: true}, // more compute slices than the instance has
		"8g.80gb":     {wantErr: true},
		"0g.10gb":     {wantErr: true},
		"1g.0gb":      {wantErr: true},
		"1g.10GB":     {wantErr: true},
		"3g":          {wantErr: true},
		"":            {wantErr: true},
		" 1g.10gb":    {wantErr: true},
		"1g.10gb+":    {wantErr: true},
	}
	for in, tc := range tests {
		got, err := ParseMIGProfile(in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseMIGProfile(%q): err = %v, wantErr %v", in, err, tc.wantErr)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseMIGProfile(%q) = %+v, want %+v", in, got, tc.want)
		}
	}
}
