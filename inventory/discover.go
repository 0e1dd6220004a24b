package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/shirou/gopsutil/v4/mem"
)

// Options says where Discover looks. The zero value is the real machine.
type Options struct {
	// Root is the directory sys/devices/system/node and proc/self/status
	// are read under (default "/"); tests point it at a fake tree.
	Root string
	// NVMLLibrary is the NVML library to load (default libnvidia-ml.so.1,
	// found by the dynamic loader).
	NVMLLibrary string
	// NoGPUs skips NVML (Config.GPUDiscovery "off").
	NoGPUs bool
	// Logger receives the one line about GPU discovery (nil = discard).
	Logger *slog.Logger

	nvml nvmlEdge // tests: replaces the real NVML edge
}

// Discover describes the local machine as found, with no config applied:
//   - Name: the hostname;
//   - CPUs: the logical CPUs this process may run on (Cpus_allowed_list of
//     /proc/self/status, else runtime.NumCPU), so a cpuset-limited
//     container is not oversized;
//   - MemoryMiB: total memory (gopsutil);
//   - NUMA: the domains in sysfs with CPUs this process may use;
//   - GPUs: what NVML reports; without the library or driver, none, and one
//     info line on the logger.
func Discover(ctx context.Context, opts Options) (Node, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "inventory")

	var n Node
	var err error
	if n.Name, err = os.Hostname(); err != nil {
		return Node{}, fmt.Errorf("inventory: hostname: %w", err)
	}
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return Node{}, fmt.Errorf("inventory: memory: %w", err)
	}
	n.MemoryMiB = int64(vm.Total >> 20)
	allowed, err := readAllowedCPUs(root)
	if err != nil {
		return Node{}, err
	}
	n.CPUs = float64(runtime.NumCPU())
	if allowed != nil {
		n.CPUs = float64(len(allowed))
	}
	if n.NUMA, err = readNUMA(root, allowed); err != nil {
		return Node{}, err
	}
	if opts.NoGPUs {
		return n, nil
	}
	lib := opts.nvml
	if lib == nil {
		lib = newNVML(opts.NVMLLibrary)
	}
	if n.GPUs, err = discoverGPUs(lib, log); err != nil {
		return Node{}, err
	}
	return n, nil
}

// Local discovers the machine (GPUs as cfg.GPUDiscovery says) and applies
// cfg with Build: what an agent registers for its own node.
func Local(ctx context.Context, cfg Config, opts Options) (Node, error) {
	if err := cfg.Validate(); err != nil {
		return Node{}, err
	}
	opts.NoGPUs = opts.NoGPUs || cfg.gpuDiscovery() == DiscoverOff
	found, err := Discover(ctx, opts)
	if err != nil {
		return Node{}, err
	}
	return Build(found, cfg)
}
