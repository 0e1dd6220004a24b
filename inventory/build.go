package inventory

import (
	"errors"
	"fmt"
	"maps"
	"math"
)

// Build applies cfg to a discovered node: every value cfg sets overrides
// what was found, labels are added (cfg wins on a clash), discovered GPU
// models are renamed by cfg.GPUModels, and declared GPUs override the
// discovered GPU with the same UUID or are added after the discovered ones.
// It validates cfg first and the result last (names, UUIDs unique across
// GPUs and MIG instances); every such error wraps ErrConfig. found is not
// modified.
func Build(found Node, cfg Config) (Node, error) {
	if err := cfg.Validate(); err != nil {
		return Node{}, err
	}
	n := found.Clone()
	if cfg.Name != "" {
		n.Name = cfg.Name
	}
	if cfg.CPUCores > 0 {
		n.CPUs = cfg.CPUCores
	}
	if cfg.MemoryGB > 0 {
		n.MemoryMiB = int64(math.Round(cfg.MemoryGB * 1024))
	}
	if cfg.NetworkMbps > 0 {
		n.NetworkMbps = int64(math.Round(cfg.NetworkMbps))
	}
	if len(cfg.Labels) > 0 {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		maps.Copy(n.Labels, cfg.Labels)
	}
	setStorage := func(tier string, gb float64) {
		if gb <= 0 {
			return
		}
		if n.Storage == nil {
			n.Storage = map[string]int64{}
		}
		n.Storage[tier] = int64(gb) // whole GiB, as the engine counts storage
	}
	for tier, gb := range cfg.Storage {
		setStorage(tier, gb)
	}
	setStorage(cfg.storageTier(), cfg.StorageGB)

	for i := range n.GPUs {
		g := &n.GPUs[i]
		if m, ok := cfg.GPUModels[g.Name]; ok && g.Name != "" {
			g.Model = m
		} else if m, ok := cfg.GPUModels[g.Model]; ok {
			g.Model = m
		}
	}
	byUUID := map[string]int{}
	for i, g := range n.GPUs {
		byUUID[g.UUID] = i
	}
	var errs []error
	for i, d := range cfg.GPUs {
		k, found := byUUID[d.UUID]
		if !found {
			if d.Model == "" || d.MemoryGB <= 0 {
				errs = append(errs, fmt.Errorf("%w: gpus[%d] (%s): model and memory_gb are required for a GPU NVML does not report", ErrConfig, i, d.UUID))
				continue
			}
			n.GPUs = append(n.GPUs, GPU{UUID: d.UUID})
			k = len(n.GPUs) - 1
			byUUID[d.UUID] = k
		}
		g := &n.GPUs[k]
		g.Source = FromConfig
		if d.Model != "" {
			g.Model = d.Model
		}
		if d.MemoryGB > 0 {
			g.MemoryMiB = int64(math.Round(d.MemoryGB * 1024))
		}
		if len(d.MIG) > 0 {
			g.MIGMode = true
			g.MIG = g.MIG[:0:0]
			for _, m := range d.MIG {
				g.MIG = append(g.MIG, MIGInstance(m))
			}
		}
	}
	if n.Name == "" {
		errs = append(errs, fmt.Errorf("%w: name: none configured and none discovered", ErrConfig))
	}
	errs = append(errs, checkUnique(&n))
	if err := errors.Join(errs...); err != nil {
		return Node{}, err
	}
	return n, nil
}

// checkUnique fails when a UUID names two devices (a declared MIG instance
// reusing a discovered GPU's UUID, say): a placement names devices by UUID.
func checkUnique(n *Node) error {
	seen := map[string]bool{}
	var errs []error
	dup := func(u string) {
		if seen[u] {
			errs = append(errs, fmt.Errorf("%w: uuid %q names two devices", ErrConfig, u))
		}
		seen[u] = true
	}
	for _, g := range n.GPUs {
		dup(g.UUID)
		for _, m := range g.MIG {
			dup(m.UUID)
		}
	}
	return errors.Join(errs...)
}
