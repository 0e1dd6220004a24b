package local

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/shirou/gopsutil/v4/mem"
)

// Capacity is what the local machine offers, as Discover finds it.
type Capacity struct {
	Hostname        string
	CPUs            int   // logical CPUs this process may run on
	MemoryTotal     int64 // bytes
	MemoryAvailable int64 // bytes free for new work right now (MemAvailable)
}

// Discover sizes the local node for the adapter: memory through gopsutil,
// CPUs and hostname from the standard library.
//
// CPUs is runtime.NumCPU, which honours the process's CPU affinity (a
// cpuset-limited container sees its own share); gopsutil's cpu.Counts(true)
// counts every CPU in /proc/cpuinfo, which would oversize such a node. The
// hostname is os.Hostname, which is what gopsutil's host.Info reports too,
// without host.Info failing when unrelated probes (platform,
// virtualisation) do.
func Discover(ctx context.Context) (Capacity, error) {
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return Capacity{}, fmt.Errorf("local: discover memory: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return Capacity{}, fmt.Errorf("local: discover hostname: %w", err)
	}
	return Capacity{
		Hostname:        host,
		CPUs:            runtime.NumCPU(),
		MemoryTotal:     int64(vm.Total),
		MemoryAvailable: int64(vm.Available),
	}, nil
}
