package inventory

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestDiscoverFakeTree(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, twoSocket)
	lib := &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-0", name: "NVIDIA L4", memMiB: 23034, migErr: errNotSupported}}}
	n, err := Discover(t.Context(), Options{Root: root, nvml: lib})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if n.Name != host || n.CPUs != 16 || n.MemoryMiB <= 0 {
		t.Errorf("name %q, cpus %v, memory %d MiB; want %q, 16 (Cpus_allowed_list 0-15), > 0", n.Name, n.CPUs, n.MemoryMiB, host)
	}
	if len(n.NUMA) != 2 || len(n.NUMA[0].CPUs) != 8 || n.NUMA[1].MemoryMiB != 8192 {
		t.Errorf("NUMA = %+v, want the fake tree's two domains", n.NUMA)
	}
	if len(n.GPUs) != 1 || n.GPUs[0].Model != "L4" || n.GPUs[0].UUID != "GPU-0" {
		t.Errorf("GPUs = %+v, want the fake NVML's L4", n.GPUs)
	}
}

func TestDiscoverNoGPUsSkipsNVML(t *testing.T) {
	lib := &fakeNVML{initErr: errNoLibrary}
	if _, err := Discover(t.Context(), Options{Root: t.TempDir(), NoGPUs: true, nvml: lib}); err != nil {
		t.Fatal(err)
	}
	if lib.initCalls != 0 {
		t.Errorf("NVML Init called %d times with NoGPUs", lib.initCalls)
	}
}

func TestLocal(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, twoSocket)
	lib := &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-0", name: "NVIDIA L4", memMiB: 23034, migErr: errNotSupported}}}

	n, err := Local(t.Context(), Config{Name: "n1", CPUCores: 12, GPUModels: map[string]string{"L4": "L4-24GB"}}, Options{Root: root, nvml: lib})
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "n1" || n.CPUs != 12 || len(n.GPUs) != 1 || n.GPUs[0].Model != "L4-24GB" {
		t.Errorf("got %+v; want config applied over discovery", n)
	}

	lib.initCalls = 0
	n, err = Local(t.Context(), Config{GPUDiscovery: DiscoverOff, GPUs: []GPUConfig{{UUID: "GPU-d", Model: "T4", MemoryGB: 16}}}, Options{Root: root, nvml: lib})
	if err != nil {
		t.Fatal(err)
	}
	if lib.initCalls != 0 || len(n.GPUs) != 1 || n.GPUs[0].UUID != "GPU-d" {
		t.Errorf("gpu_discovery off: NVML init calls %d, GPUs %+v; want 0 and only the declared GPU", lib.initCalls, n.GPUs)
	}

	if _, err := Local(t.Context(), Config{CPUCores: -1}, Options{Root: root, nvml: lib}); err == nil || lib.initCalls != 0 {
		t.Errorf("invalid config: err %v, NVML init calls %d; want an error before any discovery", err, lib.initCalls)
	}
}

// TestDiscoverRealMachine discovers this machine for real, NVML included
// (on a machine without the NVIDIA library: no GPUs and one log line).
func TestDiscoverRealMachine(t *testing.T) {
	log, buf := logBuffer()
	n, err := Discover(t.Context(), Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("name %s, cpus %v, memory %d MiB, numa %+v, gpus %+v; log: %s", n.Name, n.CPUs, n.MemoryMiB, n.NUMA, n.GPUs, buf)
	if runtime.GOOS == "linux" && n.CPUs != float64(runtime.NumCPU()) {
		t.Errorf("cpus %v, runtime.NumCPU %d: both count the CPUs this process may use", n.CPUs, runtime.NumCPU())
	}
	// Within 1%: a balloon driver may move MemTotal between the two reads.
	if want := procMemTotalMiB(t); want > 0 && (n.MemoryMiB < want*99/100 || n.MemoryMiB > want*101/100) {
		t.Errorf("memory %d MiB, /proc/meminfo says %d MiB", n.MemoryMiB, want)
	}
	numaCPUs := 0
	for _, d := range n.NUMA {
		numaCPUs += len(d.CPUs)
	}
	if len(n.NUMA) > 0 && float64(numaCPUs) != n.CPUs {
		t.Errorf("NUMA domains hold %d CPUs, the node %v: every usable CPU is in one domain", numaCPUs, n.CPUs)
	}
	if len(n.GPUs) == 0 {
		if lines := logLines(buf); len(lines) != 1 || !strings.Contains(lines[0], "no GPUs") {
			t.Errorf("no GPUs, and the log is %q; want one line saying why", lines)
		}
	}
	for _, g := range n.GPUs {
		if g.UUID == "" || g.Model == "" || g.MemoryMiB <= 0 {
			t.Errorf("GPU %+v: want UUID, model and memory", g)
		}
	}
}

// TestRealNVMLWithoutLibrary loads NVML through go-nvml from a path with no
// library: the real dlopen fails, and discovery reports no GPUs, no error,
// and one log line.
func TestRealNVMLWithoutLibrary(t *testing.T) {
	log, buf := logBuffer()
	n, err := Discover(t.Context(), Options{Root: t.TempDir(), NVMLLibrary: t.TempDir() + "/libnvidia-ml.so.1", Logger: log})
	if err != nil {
		t.Fatalf("Discover: %v; want no error without NVML", err)
	}
	if n.GPUs != nil {
		t.Errorf("GPUs = %+v, want none", n.GPUs)
	}
	lines := logLines(buf)
	if len(lines) != 1 || !strings.Contains(lines[0], "no GPUs") || !strings.Contains(lines[0], "NVML library not found") || !strings.Contains(lines[0], "libnvidia-ml.so.1") ||
		!strings.Contains(lines[0], "component=inventory") {
		t.Errorf("log = %q; want one line: no GPUs, NVML library not found", lines)
	}
}

func procMemTotalMiB(t *testing.T) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	return 0
}
