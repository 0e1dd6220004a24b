// Package inventory describes one machine as a node of the pool: what an
// agent registers for its node and renews with heartbeats, and, through
// Node.Engine, exactly the engine.Node the scheduler places work on.
//
// Discovered (Discover), from the local machine:
//   - CPUs: the logical CPUs this process may run on (Cpus_allowed_list in
//     /proc/self/status, else runtime.NumCPU); memory: total, via gopsutil;
//     name: the hostname.
//   - NUMA domains: /sys/devices/system/node/node*/cpulist and meminfo
//     (MemTotal), each cut to the CPUs this process may use; domains left
//     with no CPU (memory-only nodes, or a cpuset elsewhere) are dropped.
//     No node directory means no NUMA information (one domain).
//   - GPUs: NVML through github.com/NVIDIA/go-nvml, which dlopens
//     libnvidia-ml.so.1 at run time: UUID, model (NVML's name less
//     "NVIDIA ", spaces as dashes), memory, and, for a GPU in MIG mode, its
//     MIG devices with their UUIDs and profiles ("3g.40gb", taken from the
//     MIG device's name, else from its slice counts and memory). Without the
//     library or the driver there are no GPUs and one info log line; any
//     other NVML failure is an error. Builds without cgo compile a stand-in
//     that reports no library.
//
// Declared (Config, the node section of the adapter's YAML) and applied by
// Build: every value the config sets overrides discovery (name, cpu_cores,
// memory_gb), network bandwidth, storage tiers and labels come only from it,
// gpu_models renames discovered models, and gpus declares devices by hand,
// for tests and for devices NVML can't see: a declared UUID that NVML also
// reports overrides that device, any other is added. Validate reports every
// problem at once (negative sizes, unknown tiers, unknown MIG profile
// shapes, MIG slices over a GPU's 7, duplicate or missing UUIDs), each
// wrapping ErrConfig. Local is Discover then Build.
//
// The package is top level, beside engine, rather than under
// providers/local: it imports engine to build engine.Node (providers import
// nothing of ours), and every agent needs it whichever provider runs its
// tasks. It does no I/O after discovery and keeps no state.
package inventory
