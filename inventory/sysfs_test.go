package inventory

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeTree writes files (path relative to root → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const nodeDir = "sys/devices/system/node/"

func meminfo(node int, kb string) string {
	// The real file's layout: the MemTotal line is not the only one.
	return "Node " + itoa(node) + " MemTotal:       " + kb + " kB\nNode " + itoa(node) + " MemFree:        1000 kB\n"
}

func itoa(i int) string { return strconv.Itoa(i) }

// twoSocket is a fake tree: two NUMA nodes with CPUs, a memory-only node
// (CXL), and the other entries sysfs has beside node directories.
var twoSocket = map[string]string{
	nodeDir + "online":        "0-2\n",
	nodeDir + "has_cpu":       "0-1\n",
	nodeDir + "possible":      "0-3\n",
	nodeDir + "node0/cpulist": "0-3,8-11\n",
	nodeDir + "node0/meminfo": meminfo(0, "16777216"),
	nodeDir + "node1/cpulist": "4-7,12-15\n",
	nodeDir + "node1/meminfo": meminfo(1, "8388608"),
	nodeDir + "node2/cpulist": "\n",
	nodeDir + "node2/meminfo": meminfo(2, "4194304"),
	"proc/self/status":        "Name:\tinventory.test\nCpus_allowed:\tffff\nCpus_allowed_list:\t0-15\nMems_allowed_list:\t0-2\n",
}

func TestReadNUMAFakeTree(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, twoSocket)
	got, err := readNUMA(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []NUMADomain{
		{ID: 0, CPUs: []int{0, 1, 2, 3, 8, 9, 10, 11}, MemoryMiB: 16384},
		{ID: 1, CPUs: []int{4, 5, 6, 7, 12, 13, 14, 15}, MemoryMiB: 8192},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("domains (-want +got):\n%s", diff)
	}
}

func TestReadNUMAKeepsOnlyAllowedCPUs(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, twoSocket)
	// A cpuset-limited container on socket 0 plus one CPU of socket 1.
	got, err := readNUMA(root, []int{2, 3, 9, 12})
	if err != nil {
		t.Fatal(err)
	}
	want := []NUMADomain{
		{ID: 0, CPUs: []int{2, 3, 9}, MemoryMiB: 16384},
		{ID: 1, CPUs: []int{12}, MemoryMiB: 8192},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("domains (-want +got):\n%s", diff)
	}
	got, err = readNUMA(root, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != 0 {
		t.Errorf("domains = %+v, want only node 0 (node 1 has none of our CPUs)", got)
	}
}

func TestReadNUMANodesSortedNumerically(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for n := range 11 { // node10 sorts before node2 by name
		files[nodeDir+"node"+itoa(n)+"/cpulist"] = itoa(n) + "\n"
		files[nodeDir+"node"+itoa(n)+"/meminfo"] = meminfo(n, itoa(1024*(n+1)))
	}
	writeTree(t, root, files)
	got, err := readNUMA(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, d := range got {
		ids = append(ids, d.ID)
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(ids, want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	if got[10].MemoryMiB != 11 {
		t.Errorf("node10 memory = %d MiB, want 11", got[10].MemoryMiB)
	}
}

func TestReadNUMAWithoutSysfsIsNoDomains(t *testing.T) {
	got, err := readNUMA(t.TempDir(), nil)
	if err != nil || got != nil {
		t.Errorf("readNUMA(empty root) = %v, %v; want nil, nil", got, err)
	}
}

func TestReadNUMABadFilesAreErrors(t *testing.T) {
	tests := map[string]struct {
		files    map[string]string
		wantText string
	}{
		"bad cpulist":     {map[string]string{nodeDir + "node0/cpulist": "0-x\n", nodeDir + "node0/meminfo": meminfo(0, "1")}, "numa node 0: cpulist"},
		"missing cpulist": {map[string]string{nodeDir + "node0/meminfo": meminfo(0, "1")}, "numa node 0"},
		"missing meminfo": {map[string]string{nodeDir + "node3/cpulist": "0\n"}, "numa node 3"},
		"no MemTotal":     {map[string]string{nodeDir + "node0/cpulist": "0\n", nodeDir + "node0/meminfo": "Node 0 MemFree: 1 kB\n"}, "no MemTotal"},
		"bad MemTotal":    {map[string]string{nodeDir + "node0/cpulist": "0\n", nodeDir + "node0/meminfo": "Node 0 MemTotal: -5 kB\n"}, "bad MemTotal"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			_, err := readNUMA(root, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.wantText)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []int
		wantErr bool
	}{
		"empty":          {in: "\n", want: nil},
		"one":            {in: "0\n", want: []int{0}},
		"range":          {in: "0-3", want: []int{0, 1, 2, 3}},
		"mixed":          {in: "0-1,4,6-7\n", want: []int{0, 1, 4, 6, 7}},
		"unsorted, dups": {in: "8,0-2,1", want: []int{0, 1, 2, 8}},
		"reversed range": {in: "3-1", wantErr: true},
		"negative":       {in: "-1", wantErr: true},
		"garbage":        {in: "a", wantErr: true},
		"empty part":     {in: "0,,1", wantErr: true},
		"huge":           {in: "0-99999999", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseCPUList(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadAllowedCPUs(t *testing.T) {
	root := t.TempDir()
	if got, err := readAllowedCPUs(root); got != nil || err != nil {
		t.Errorf("no /proc: got %v, %v; want nil, nil", got, err)
	}
	writeTree(t, root, map[string]string{"proc/self/status": "Name:\tx\nCpus_allowed_list:\t1,3-4\n"})
	got, err := readAllowedCPUs(root)
	if err != nil || !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("got %v, %v; want [1 3 4]", got, err)
	}
}

// TestReadNUMARealMachine reads this machine's own /sys and /proc: whatever
// it has must be self-consistent.
func TestReadNUMARealMachine(t *testing.T) {
	allowed, err := readAllowedCPUs("/")
	if err != nil {
		t.Fatal(err)
	}
	domains, err := readNUMA("/", allowed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("allowed CPUs %v; NUMA domains %+v", allowed, domains)
	if _, err := os.Stat("/sys/devices/system/node/node0"); err == nil && len(domains) == 0 {
		t.Error("sysfs has node0 but no domain was read")
	}
	seen := map[int]bool{}
	for _, d := range domains {
		if len(d.CPUs) == 0 || d.MemoryMiB <= 0 {
			t.Errorf("domain %d: %d CPUs, %d MiB; want both > 0", d.ID, len(d.CPUs), d.MemoryMiB)
		}
		for _, c := range d.CPUs {
			if allowed != nil && !slices.Contains(allowed, c) {
				t.Errorf("domain %d lists CPU %d, which this process may not use", d.ID, c)
			}
			if seen[c] {
				t.Errorf("CPU %d is in two domains", c)
			}
			seen[c] = true
		}
	}
}
