package inventory

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	"github.com/computeboard/computeboard/engine"
)

// ErrConfig marks an invalid node configuration (errors.Is).
var ErrConfig = errors.New("invalid node config")

// Config is the node section of the adapter's YAML. Zero values are
// discovered; whatever is set overrides discovery. The first six fields
// keep the names and meaning of the adapter's current node section.
type Config struct {
	// Name is the node's name (default: the hostname).
	Name string `yaml:"name"`
	// CPUCores offered to jobs (default: the logical CPUs this process may
	// run on). NUMA domains stay as discovered: a job is then bounded by
	// both its domain and this total.
	CPUCores float64 `yaml:"cpu_cores"`
	// MemoryGB offered to jobs, in GiB (default: the machine's total memory).
	MemoryGB float64           `yaml:"memory_gb"`
	Labels   map[string]string `yaml:"labels"`
	// NetworkMbps offered to jobs (default 0: bandwidth requests are
	// impossible here).
	NetworkMbps float64 `yaml:"network_mbps"`
	// StorageGB of scratch space on StorageTier (tier default "ssd"): the
	// one-tier form of Storage. Naming a tier in both is an error.
	StorageGB   float64 `yaml:"storage_gb"`
	StorageTier string  `yaml:"storage_tier"`
	// Storage is GiB of scratch space per tier: nvme, ssd, hdd.
	Storage map[string]float64 `yaml:"storage"`

	// GPUDiscovery is "nvml" (default: ask NVML, if its library is there)
	// or "off" (only the GPUs declared below).
	GPUDiscovery string `yaml:"gpu_discovery"`
	// GPUModels renames discovered models: NVML's name ("NVIDIA H100 80GB
	// HBM3") or the default model derived from it ("H100-80GB-HBM3") → the
	// model jobs ask for ("H100-80GB").
	GPUModels map[string]string `yaml:"gpu_models"`
	// GPUs are declared by hand: for tests, and for devices NVML can't see.
	// A declared UUID that NVML also reports overrides that device's
	// non-zero fields (and its MIG instances, when listed).
	GPUs []GPUConfig `yaml:"gpus"`
}

// GPUConfig declares one GPU.
type GPUConfig struct {
	UUID     string      `yaml:"uuid"`      // required, unique among GPUs and MIG instances
	Model    string      `yaml:"model"`     // required unless the UUID is discovered
	MemoryGB float64     `yaml:"memory_gb"` // GiB; required unless the UUID is discovered
	MIG      []MIGConfig `yaml:"mig"`       // non-empty = the GPU is in MIG mode with exactly these instances
}

// MIGConfig declares one MIG instance.
type MIGConfig struct {
	UUID    string `yaml:"uuid"`    // required, unique
	Profile string `yaml:"profile"` // e.g. "1g.10gb", "3g.40gb", "1g.10gb+me", "1c.3g.40gb"
}

// GPU discovery modes.
const (
	DiscoverNVML = "nvml"
	DiscoverOff  = "off"
)

func (c *Config) gpuDiscovery() string {
	if c.GPUDiscovery == "" {
		return DiscoverNVML
	}
	return c.GPUDiscovery
}

func (c *Config) storageTier() string {
	if c.StorageTier == "" {
		return engine.TierSSD
	}
	return c.StorageTier
}

// Validate checks the config alone, before anything is discovered: sizes
// are not negative, tiers and MIG profiles are known shapes, declared UUIDs
// are unique. Every error wraps ErrConfig and names the offending key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...))
	}
	for key, v := range map[string]float64{"cpu_cores": c.CPUCores, "memory_gb": c.MemoryGB,
		"network_mbps": c.NetworkMbps, "storage_gb": c.StorageGB} {
		if v < 0 {
			bad("%s %v is negative", key, v)
		}
	}
	if _, ok := engine.TierDim(c.storageTier()); !ok {
		bad("storage_tier %q: want nvme, ssd or hdd", c.StorageTier)
	}
	for _, tier := range slices.Sorted(maps.Keys(c.Storage)) {
		if _, ok := engine.TierDim(tier); !ok {
			bad("storage: unknown tier %q: want nvme, ssd or hdd", tier)
		}
		if v := c.Storage[tier]; v < 0 {
			bad("storage.%s %v is negative", tier, v)
		}
		if c.StorageGB > 0 && tier == c.storageTier() {
			bad("storage.%s and storage_gb both size tier %s", tier, tier)
		}
	}
	switch c.GPUDiscovery {
	case "", DiscoverNVML, DiscoverOff:
	default:
		bad("gpu_discovery %q: want nvml or off", c.GPUDiscovery)
	}
	for _, from := range slices.Sorted(maps.Keys(c.GPUModels)) {
		if c.GPUModels[from] == "" {
			bad("gpu_models[%q] is empty", from)
		}
	}
	seen := map[string]string{} // UUID → where it was declared
	uuid := func(u, where string) {
		switch {
		case u == "":
			bad("%s: uuid is required", where)
		case seen[u] != "":
			bad("%s: uuid %q already declared at %s", where, u, seen[u])
		default:
			seen[u] = where
		}
	}
	for i, g := range c.GPUs {
		where := fmt.Sprintf("gpus[%d]", i)
		uuid(g.UUID, where)
		if g.MemoryGB < 0 {
			bad("%s: memory_gb %v is negative", where, g.MemoryGB)
		}
		used := 0
		for k, m := range g.MIG {
			mw := fmt.Sprintf("%s.mig[%d]", where, k)
			uuid(m.UUID, mw)
			p, err := ParseMIGProfile(m.Profile)
			if err != nil {
				bad("%s: %v", mw, err)
				continue
			}
			if p.ComputeSlices == 0 { // a GPU instance of its own; compute-instance profiles share one
				used += p.GPUSlices
			}
		}
		if used > MaxMIGSlices {
			bad("%s: MIG instances take %d slices, a GPU has %d", where, used, MaxMIGSlices)
		}
	}
	return errors.Join(errs...)
}

// MaxMIGSlices is the number of GPU-instance slices of a MIG-capable GPU
// (A100, H100, H200, B200 all have 7); engine.Policy.MIGSlices prices
// instances against the same number by default.
const MaxMIGSlices = 7

// MIGProfile is a parsed MIG profile name.
type MIGProfile struct {
	ComputeSlices int    // the "c" count of a compute-instance profile ("1c.3g.40gb" → 1); 0 = the whole GPU instance
	GPUSlices     int    // "3g" → 3
	MemoryGB      int    // "40gb" → 40
	Suffix        string // "+me", "+gfx", … ("" when none)
}

var migProfileRE = regexp.MustCompile(`^(?:([1-7])c\.)?([1-7])g\.([1-9][0-9]{0,3})gb((?:[+-][a-z]+(?:\.[a-z]+)*)*)$`)

// ParseMIGProfile parses the shapes NVIDIA names MIG devices with:
// "<g>g.<mem>gb" (a GPU instance), "<c>c.<g>g.<mem>gb" (a compute instance
// sharing one), each optionally followed by attributes such as "+me".
func ParseMIGProfile(s string) (MIGProfile, error) {
	m := migProfileRE.FindStringSubmatch(s)
	if m == nil {
		return MIGProfile{}, fmt.Errorf("MIG profile %q: want a shape like 1g.10gb, 3g.40gb or 1c.3g.40gb", s)
	}
	var p MIGProfile
	if m[1] != "" {
		p.ComputeSlices, _ = strconv.Atoi(m[1])
	}
	p.GPUSlices, _ = strconv.Atoi(m[2])
	p.MemoryGB, _ = strconv.Atoi(m[3])
	p.Suffix = m[4]
	if p.ComputeSlices > p.GPUSlices {
		return MIGProfile{}, fmt.Errorf("MIG profile %q: %d compute slices in a %d-slice GPU instance", s, p.ComputeSlices, p.GPUSlices)
	}
	return p, nil
}
