package inventory

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
)

// This file maps what NVML reports to GPUs. The NVML calls themselves sit
// behind nvmlEdge, implemented over github.com/NVIDIA/go-nvml in nvml_cgo.go
// and by a hand-written fake in the tests (no driver runs here).

// Errors an nvmlEdge returns for the NVML results discovery treats
// specially. Any other failure is an ordinary error naming the call.
var (
	errNoLibrary    = errors.New("NVML library not found")   // ERROR_LIBRARY_NOT_FOUND: libnvidia-ml.so.1 could not be loaded
	errNoDriver     = errors.New("NVIDIA driver not loaded") // ERROR_DRIVER_NOT_LOADED: the library is there, no kernel driver
	errNotFound     = errors.New("not found")                // ERROR_NOT_FOUND: e.g. an empty MIG device slot
	errNotSupported = errors.New("not supported")            // ERROR_NOT_SUPPORTED: e.g. MIG mode on a GPU without MIG
)

// nvmlEdge is the NVML calls discovery makes, in plain Go types. Shutdown
// is called once after each successful Init, and only then.
type nvmlEdge interface {
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(i int) (nvmlDevice, error)
}

// nvmlDevice is one GPU or MIG device handle.
type nvmlDevice interface {
	UUID() (string, error)
	Name() (string, error)
	MemoryMiB() (int64, error) // total memory
	// MIGMode is the current MIG mode (a pending change needs a GPU reset
	// and does not count); errNotSupported for a GPU without MIG.
	MIGMode() (bool, error)
	MaxMIGDevices() (int, error)
	// MIGDevice is the MIG device in slot i; errNotFound for an empty slot.
	MIGDevice(i int) (nvmlDevice, error)
	// Slices returns a MIG device's GPU-instance and compute-instance slice
	// counts and memory, from NVML's device attributes.
	Slices() (gi, ci int, memMiB int64, err error)
}

// discoverGPUs lists the GPUs NVML reports. Without the library or the
// driver there are no GPUs: that is logged once, at info level, and is not
// an error.
func discoverGPUs(lib nvmlEdge, log *slog.Logger) ([]GPU, error) {
	switch err := lib.Init(); {
	case errors.Is(err, errNoLibrary), errors.Is(err, errNoDriver):
		log.Info("no GPUs: NVML unavailable", "reason", err.Error())
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("inventory: nvml init (gpu_discovery: off runs without it): %w", err)
	}
	defer lib.Shutdown() // a failed shutdown changes nothing discovered
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("inventory: nvml device count: %w", err)
	}
	gpus := make([]GPU, 0, n)
	for i := range n {
		d, err := lib.Device(i)
		if err != nil {
			return nil, fmt.Errorf("inventory: nvml device %d: %w", i, err)
		}
		g, err := readGPU(d)
		if err != nil {
			return nil, fmt.Errorf("inventory: nvml device %d: %w", i, err)
		}
		if !g.Usable() {
			log.Warn("GPU is in MIG mode with no MIG instances; nothing can be placed on it", "gpu", g.UUID)
		}
		gpus = append(gpus, g)
	}
	log.Info("GPUs discovered through NVML", "count", len(gpus))
	return gpus, nil
}

func readGPU(d nvmlDevice) (GPU, error) {
	g := GPU{Source: FromNVML}
	var err error
	if g.UUID, err = d.UUID(); err != nil {
		return GPU{}, fmt.Errorf("uuid: %w", err)
	}
	if g.Name, err = d.Name(); err != nil {
		return GPU{}, fmt.Errorf("%s: name: %w", g.UUID, err)
	}
	g.Model = gpuModel(g.Name)
	if g.MemoryMiB, err = d.MemoryMiB(); err != nil {
		return GPU{}, fmt.Errorf("%s: memory: %w", g.UUID, err)
	}
	g.MIGMode, err = d.MIGMode()
	if errors.Is(err, errNotSupported) {
		return g, nil
	}
	if err != nil {
		return GPU{}, fmt.Errorf("%s: mig mode: %w", g.UUID, err)
	}
	if !g.MIGMode {
		return g, nil
	}
	slots, err := d.MaxMIGDevices()
	if err != nil {
		return GPU{}, fmt.Errorf("%s: mig device count: %w", g.UUID, err)
	}
	for k := range slots {
		md, err := d.MIGDevice(k)
		if errors.Is(err, errNotFound) {
			continue // an empty slot: instances need not be contiguous
		}
		if err != nil {
			return GPU{}, fmt.Errorf("%s: mig device %d: %w", g.UUID, k, err)
		}
		m, err := readMIG(md)
		if err != nil {
			return GPU{}, fmt.Errorf("%s: mig device %d: %w", g.UUID, k, err)
		}
		g.MIG = append(g.MIG, m)
	}
	return g, nil
}

// readMIG names a MIG device's profile from its device name ("NVIDIA
// H100 80GB HBM3 MIG 1g.10gb"), the profile nvidia-smi shows; when the name
// has none, from its slice counts and memory rounded up to whole GB, the
// way NVIDIA's device plugin names them.
func readMIG(d nvmlDevice) (MIGInstance, error) {
	uuid, err := d.UUID()
	if err != nil {
		return MIGInstance{}, fmt.Errorf("uuid: %w", err)
	}
	name, err := d.Name()
	if err != nil {
		return MIGInstance{}, fmt.Errorf("%s: name: %w", uuid, err)
	}
	if _, p, ok := strings.Cut(name, " MIG "); ok {
		if _, err := ParseMIGProfile(p); err == nil {
			return MIGInstance{UUID: uuid, Profile: p}, nil
		}
	}
	gi, ci, mem, err := d.Slices()
	if err != nil {
		return MIGInstance{}, fmt.Errorf("%s: attributes: %w", uuid, err)
	}
	gb := int(math.Ceil(float64(mem) / 1024))
	profile := fmt.Sprintf("%dg.%dgb", gi, gb)
	if ci != gi {
		profile = fmt.Sprintf("%dc.%s", ci, profile)
	}
	if _, err := ParseMIGProfile(profile); err != nil {
		return MIGInstance{}, fmt.Errorf("%s: device %q: %w", uuid, name, err)
	}
	return MIGInstance{UUID: uuid, Profile: profile}, nil
}

// gpuModel derives a model from NVML's device name: the name without its
// "NVIDIA " prefix, spaces turned into dashes ("NVIDIA H100 80GB HBM3" →
// "H100-80GB-HBM3", "NVIDIA A100-SXM4-80GB" → "A100-SXM4-80GB").
// Config.GPUModels renames it.
func gpuModel(name string) string {
	return strings.Join(strings.Fields(strings.TrimPrefix(name, "NVIDIA ")), "-")
}
