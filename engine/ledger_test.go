package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// applyErr returns err's *ApplyError, failing the test if it is another error.
func applyErr(t *testing.T, err error) *engine.ApplyError {
	t.Helper()
	if err == nil {
		return nil
	}
	var ae *engine.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an *ApplyError", err)
	}
	return ae
}

func newLedger(t *testing.T, nodes ...engine.Node) *engine.Ledger {
	t.Helper()
	l := engine.NewLedger()
	for _, n := range nodes {
		if err := l.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func place(id, node string, gpus, mig []string, numa int) engine.Placement {
	return engine.Placement{JobID: id, Node: node, GPUs: gpus, MIG: mig, NUMA: numa}
}

// withCPUs gives a node's NUMA domains consecutive CPU IDs, one per 1000
// millicores of the domain.
func withCPUs(n engine.Node) engine.Node {
	id := 0
	for d := range n.NUMA {
		n.NUMA[d].CPUs = nil
		for range n.NUMA[d].CPU / 1000 {
			n.NUMA[d].CPUs = append(n.NUMA[d].CPUs, id)
			id++
		}
	}
	return n
}

// TestLedgerApply: one placement on a fresh ledger (after the setup
// placements), accepted or refused with the expected code and dimension.
func TestLedgerApply(t *testing.T) {
	full := func() engine.Node {
		return et.Node("n").CPU(8).Mem(32).Net(1000).Storage(engine.TierNVMe, 100).Storage(engine.TierSSD, 200).
			Storage(engine.TierHDD, 300).GPUs("A100", 2, 40).GPUs("H100", 1, 80).
			MIGGPU("A100", 80, "1g.10gb", "3g.40gb").Label("zone", "z1").NUMA(2).Obj()
	}
	type step struct {
		j engine.Job
		p engine.Placement
	}
	noDev := func(id string) engine.Placement { return place(id, "n", nil, nil, -1) }
	tests := []struct {
		name  string
		nodes []engine.Node
		setup []step
		j     engine.Job
		p     engine.Placement
		code  engine.ApplyCode // "" = fits
		dim   engine.Dim
	}{
		{name: "fits", j: et.Job("a").CPU(8).Mem(32).Obj(), p: noDev("a")},
		{name: "cpu short", j: et.Job("a").Request(engine.Resources{engine.DimCPU: 8001}).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimCPU},
		{name: "memory short", j: et.Job("a").MemMiB(32*1024 + 1).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimMemory},
		{name: "network short", j: et.Job("a").Net(1001).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimNetwork},
		{name: "network fits", j: et.Job("a").Net(1000).Obj(), p: noDev("a")},
		{name: "nvme short", j: et.Job("a").Storage(engine.TierNVMe, 101).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimNVMe},
		{name: "ssd short", j: et.Job("a").Storage(engine.TierSSD, 201).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimSSD},
		{name: "hdd short", j: et.Job("a").Storage(engine.TierHDD, 301).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimHDD},
		{name: "hdd fits", j: et.Job("a").Storage(engine.TierHDD, 300).Obj(), p: noDev("a")},
		{
			name: "tier folds the request into its dimension",
			j:    et.Job("a").Request(engine.Resources{engine.DimNVMe: 60, engine.DimSSD: 50}).Obj(),
			p:    noDev("a"),
		},
		{
			name: "gpu count short (anonymous GPUs)", nodes: []engine.Node{et.Node("n").CPU(8).Mem(8).Obj()},
			j: et.Job("a").GPU(1).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimGPU,
		},
		{
			name: "gpu memory short (anonymous GPUs)", nodes: []engine.Node{et.Node("n").CPU(8).Mem(8).Alloc(engine.Resources{}).Obj()},
			j: func() engine.Job { j := et.Job("a").Obj(); j.Request[engine.DimGPUMemory] = 1; return j }(),
			p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimGPUMemory,
		},
		{name: "whole gpus", j: et.Job("a").GPU(2).GPUModel("A100").GPUMem(80).Obj(), p: place("a", "n", []string{"n-gpu0", "n-gpu1"}, nil, -1)},
		{name: "gpu count mismatch", j: et.Job("a").GPU(2).Obj(), p: place("a", "n", []string{"n-gpu0"}, nil, -1), code: engine.ApplyDeviceMismatch},
		{name: "gpu named twice", j: et.Job("a").GPU(2).Obj(), p: place("a", "n", []string{"n-gpu0", "n-gpu0"}, nil, -1), code: engine.ApplyDeviceMismatch},
		{name: "unknown gpu", j: et.Job("a").GPU(1).Obj(), p: place("a", "n", []string{"x"}, nil, -1), code: engine.ApplyUnknownDevice},
		{name: "gpu model mismatch", j: et.Job("a").GPU(1).GPUModel("H100").Obj(), p: place("a", "n", []string{"n-gpu0"}, nil, -1), code: engine.ApplyDeviceMismatch},
		{name: "gpu memory mismatch", j: et.Job("a").GPU(1).GPUMem(80).Obj(), p: place("a", "n", []string{"n-gpu0"}, nil, -1), code: engine.ApplyDeviceMismatch},
		{name: "gpu memory fits", j: et.Job("a").GPU(1).GPUMem(80).Obj(), p: place("a", "n", []string{"n-gpu2"}, nil, -1)},
		{name: "gpu in MIG mode", j: et.Job("a").GPU(1).Obj(), p: place("a", "n", []string{"n-gpu3"}, nil, -1), code: engine.ApplyDeviceMismatch},
		{
			name:  "gpu already in use",
			setup: []step{{et.Job("b").GPU(1).Obj(), place("b", "n", []string{"n-gpu1"}, nil, -1)}},
			j:     et.Job("a").GPU(1).Obj(), p: place("a", "n", []string{"n-gpu1"}, nil, -1), code: engine.ApplyDeviceInUse,
		},
		{
			name:  "gpu dimension short although the device is free",
			setup: []step{{et.Job("b").GPU(2).Obj(), place("b", "n", []string{"n-gpu0", "n-gpu1"}, nil, -1)}},
			j:     et.Job("a").GPU(2).Obj(), p: place("a", "n", []string{"n-gpu2", "n-gpu0"}, nil, -1), code: engine.ApplyDeviceInUse,
		},
		{name: "gpus on a node without", nodes: []engine.Node{et.Node("n").CPU(1).Obj()}, j: et.Job("a").GPU(1).Obj(), p: place("a", "n", []string{"g"}, nil, -1), code: engine.ApplyUnknownDevice},
		{name: "model on a node without gpus", nodes: []engine.Node{et.Node("n").CPU(1).Obj()}, j: et.Job("a").GPUModel("A100").Obj(), p: noDev("a"), code: engine.ApplyDeviceMismatch},
		{name: "mig instance", j: et.Job("a").MIG("3g.40gb", 1).Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig1"}, -1)},
		{name: "mig with model", j: et.Job("a").MIG("1g.10gb", 1).GPUModel("A100").Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig0"}, -1)},
		{name: "mig model mismatch", j: et.Job("a").MIG("1g.10gb", 1).GPUModel("H100").Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig0"}, -1), code: engine.ApplyDeviceMismatch},
		{name: "mig profile mismatch", j: et.Job("a").MIG("1g.10gb", 1).Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig1"}, -1), code: engine.ApplyDeviceMismatch},
		{name: "mig count mismatch", j: et.Job("a").MIG("1g.10gb", 2).Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig0"}, -1), code: engine.ApplyDeviceMismatch},
		{name: "unknown mig", j: et.Job("a").MIG("1g.10gb", 1).Obj(), p: place("a", "n", nil, []string{"n-gpu0"}, -1), code: engine.ApplyUnknownDevice},
		{name: "mig instances for a whole-gpu job", j: et.Job("a").GPU(1).Obj(), p: place("a", "n", []string{"n-gpu0"}, []string{"n-gpu3-mig0"}, -1), code: engine.ApplyDeviceMismatch},
		{name: "whole gpus for a mig job", j: et.Job("a").MIG("1g.10gb", 1).Obj(), p: place("a", "n", []string{"n-gpu0"}, []string{"n-gpu3-mig0"}, -1), code: engine.ApplyDeviceMismatch},
		{
			name:  "mig instance already in use",
			setup: []step{{et.Job("b").MIG("1g.10gb", 1).Obj(), place("b", "n", nil, []string{"n-gpu3-mig0"}, -1)}},
			j:     et.Job("a").MIG("1g.10gb", 1).Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig0"}, -1), code: engine.ApplyDeviceInUse,
		},
		{
			name:  "other mig instance of the same gpu",
			setup: []step{{et.Job("b").MIG("1g.10gb", 1).Obj(), place("b", "n", nil, []string{"n-gpu3-mig0"}, -1)}},
			j:     et.Job("a").MIG("3g.40gb", 1).Obj(), p: place("a", "n", nil, []string{"n-gpu3-mig1"}, -1),
		},
		{name: "numa local", j: et.Job("a").CPU(4).Mem(16).NUMA().Obj(), p: place("a", "n", nil, nil, 1)},
		{name: "numa domain cpu short", j: et.Job("a").CPU(4.5).NUMA().Obj(), p: place("a", "n", nil, nil, 0), code: engine.ApplyNoCapacity, dim: engine.DimCPU},
		{name: "numa domain memory short", j: et.Job("a").Mem(17).NUMA().Obj(), p: place("a", "n", nil, nil, 0), code: engine.ApplyNoCapacity, dim: engine.DimMemory},
		{name: "numa local without a domain", j: et.Job("a").CPU(1).NUMA().Obj(), p: noDev("a"), code: engine.ApplyNUMA},
		{name: "numa unknown domain", j: et.Job("a").CPU(1).NUMA().Obj(), p: place("a", "n", nil, nil, 7), code: engine.ApplyNUMA},
		{name: "numa local on a node without domains", nodes: []engine.Node{et.Node("n").CPU(1).Obj()}, j: et.Job("a").CPU(1).NUMA().Obj(), p: noDev("a")},
		{
			name:  "numa domain taken by an earlier job",
			setup: []step{{et.Job("b").CPU(3).NUMA().Obj(), place("b", "n", nil, nil, 1)}},
			j:     et.Job("a").CPU(2).NUMA().Obj(), p: place("a", "n", nil, nil, 1), code: engine.ApplyNoCapacity, dim: engine.DimCPU,
		},
		{
			name:  "a job that is not numa-local takes nothing from a domain",
			setup: []step{{et.Job("b").CPU(3).Obj(), place("b", "n", nil, nil, 1)}},
			j:     et.Job("a").CPU(4).NUMA().Obj(), p: place("a", "n", nil, nil, 1),
		},
		{name: "selector matches", j: et.Job("a").Selector("zone", "z1").Obj(), p: noDev("a")},
		{name: "selector mismatch", j: et.Job("a").Selector("zone", "z2").Obj(), p: noDev("a"), code: engine.ApplySelector},
		{name: "unhealthy", nodes: []engine.Node{et.Node("n").CPU(1).Unhealthy().Obj()}, j: et.Job("a").Obj(), p: noDev("a"), code: engine.ApplyUnhealthy},
		{name: "unknown node", j: et.Job("a").Obj(), p: place("a", "m", nil, nil, -1), code: engine.ApplyUnknownNode},
		{name: "duplicate", setup: []step{{et.Job("a").CPU(1).Obj(), noDev("a")}}, j: et.Job("a").CPU(1).Obj(), p: noDev("a"), code: engine.ApplyDuplicate},
		{name: "placement of another job", j: et.Job("a").Obj(), p: noDev("b"), code: engine.ApplyInvalid},
		{name: "negative request", j: et.Job("a").CPU(-1).Obj(), p: noDev("a"), code: engine.ApplyInvalid},
		{
			name:  "cpu short after earlier jobs",
			setup: []step{{et.Job("b").CPU(5).Obj(), noDev("b")}, {et.Job("c").CPU(2).Obj(), noDev("c")}},
			j:     et.Job("a").CPU(2).Obj(), p: noDev("a"), code: engine.ApplyNoCapacity, dim: engine.DimCPU,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := tc.nodes
			if nodes == nil {
				nodes = []engine.Node{full()}
			}
			l := newLedger(t, nodes...)
			for _, s := range tc.setup {
				if err := l.Apply(s.j, s.p); err != nil {
					t.Fatalf("setup %s: %v", s.j.ID, err)
				}
			}
			before, allocs := l.Snapshot(), l.Allocations()
			ae := applyErr(t, l.Apply(tc.j, tc.p))
			switch {
			case tc.code == "" && ae != nil:
				t.Fatalf("refused: %v", ae)
			case tc.code == "":
				a, ok := l.Allocation(tc.j.ID)
				if !ok || a.Node != tc.p.Node || !slices.Equal(a.GPUs, tc.p.GPUs) || !slices.Equal(a.MIG, tc.p.MIG) {
					t.Fatalf("allocation %+v, %v", a, ok)
				}
				if want := ledgerFree(t, before, tc.p.Node).Sub(a.Vec); ledgerFree(t, l.Snapshot(), tc.p.Node) != want {
					t.Errorf("free after apply %v, want %v", ledgerFree(t, l.Snapshot(), tc.p.Node), want)
				}
			case ae == nil:
				t.Fatalf("accepted, want %s", tc.code)
			default:
				if ae.Code != tc.code {
					t.Fatalf("code %s (%v), want %s", ae.Code, ae, tc.code)
				}
				if tc.code == engine.ApplyNoCapacity && ae.Dim != tc.dim {
					t.Errorf("dim %s, want %s (%v)", ae.Dim, tc.dim, ae)
				}
				if tc.code != engine.ApplyNoCapacity && ae.Dim != -1 {
					t.Errorf("dim %d, want -1", ae.Dim)
				}
				if ae.JobID != tc.j.ID || ae.Node != tc.p.Node || ae.Error() == "" {
					t.Errorf("error fields %+v", ae)
				}
				if !reflect.DeepEqual(l.Snapshot(), before) || !reflect.DeepEqual(l.Allocations(), allocs) {
					t.Errorf("a refused Apply changed the ledger")
				}
			}
		})
	}
}

func ledgerFree(t *testing.T, nodes []engine.Node, name string) engine.Resources {
	t.Helper()
	for i := range nodes {
		if nodes[i].Name == name {
			return nodes[i].Capacity.Sub(nodes[i].Allocated)
		}
	}
	t.Fatalf("no node %s", name)
	return engine.Resources{}
}

func TestLedgerSnapshotFlags(t *testing.T) {
	l := newLedger(t, et.Node("n").CPU(8).Mem(32).GPUs("A100", 2, 40).MIGGPU("A100", 80, "1g.10gb", "3g.40gb").NUMA(2).Obj())
	jobs := []struct {
		j engine.Job
		p engine.Placement
	}{
		{et.Job("g").GPU(1).CPU(1).Obj(), place("g", "n", []string{"n-gpu1"}, nil, -1)},
		{et.Job("m").MIG("3g.40gb", 1).CPU(1).Obj(), place("m", "n", nil, []string{"n-gpu2-mig1"}, -1)},
		{et.Job("u").CPU(2).Mem(4).NUMA().Obj(), place("u", "n", nil, nil, 1)},
	}
	for _, x := range jobs {
		if err := l.ApplyAt(x.j, x.p, et.Epoch); err != nil {
			t.Fatal(err)
		}
	}
	n := l.Snapshot()[0]
	if want := (engine.Resources{engine.DimCPU: 4000, engine.DimMemory: 4096, engine.DimGPU: 1}); n.Allocated != want {
		t.Errorf("allocated %v, want %v", n.Allocated, want)
	}
	if n.GPUs[0].InUse || !n.GPUs[1].InUse || n.GPUs[2].InUse || n.GPUs[2].MIG[0].InUse || !n.GPUs[2].MIG[1].InUse {
		t.Errorf("device flags %+v", n.GPUs)
	}
	if !reflect.DeepEqual(n.NUMA[0], engine.NUMADomain{ID: 0, CPU: 4000, Memory: 16384}) || n.NUMA[1].CPU != 2000 || n.NUMA[1].Memory != 12288 {
		t.Errorf("numa %+v", n.NUMA)
	}
	a, _ := l.Allocation("g")
	if r := a.Running(); r.Node != "n" || !r.Started.Equal(et.Epoch) || r.ID != "g" || !slices.Equal(r.GPUs, []string{"n-gpu1"}) {
		t.Errorf("running %+v", r)
	}
	if u := l.Utilization(); u[engine.DimCPU] != 0.5 || u[engine.DimGPU] != 0.5 || u[engine.DimNVMe] != 0 {
		t.Errorf("utilization %v", u)
	}
}

func TestLedgerReleaseReapply(t *testing.T) {
	l := newLedger(t, et.Node("n").CPU(4).Mem(8).GPUs("A100", 1, 40).MIGGPU("A100", 80, "1g.10gb").NUMA(2).Obj())
	j := et.Job("a").CPU(2).Mem(4).GPU(1).NUMA().Obj()
	p := place("a", "n", []string{"n-gpu0"}, nil, 0)
	m := et.Job("m").MIG("1g.10gb", 1).Obj()
	pm := place("m", "n", nil, []string{"n-gpu1-mig0"}, -1)
	empty := l.Snapshot()
	for round := range 3 {
		if err := l.Apply(j, p); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := l.Apply(m, pm); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if ae := applyErr(t, l.Apply(et.Job("b").GPU(1).Obj(), place("b", "n", []string{"n-gpu0"}, nil, -1))); ae == nil || ae.Code != engine.ApplyDeviceInUse {
			t.Fatalf("round %d: second holder of the GPU: %v", round, ae)
		}
		if l.NumAllocations() != 2 {
			t.Fatalf("allocations %d", l.NumAllocations())
		}
		a, ok := l.Release("a")
		if !ok || a.Job.ID != "a" || a.NUMA != 0 || !slices.Equal(a.GPUs, []string{"n-gpu0"}) {
			t.Fatalf("release %+v %v", a, ok)
		}
		if _, ok := l.Release("m"); !ok {
			t.Fatal("release m")
		}
		if _, ok := l.Release("a"); ok {
			t.Fatal("released twice")
		}
		if got := l.Snapshot(); !reflect.DeepEqual(got, empty) {
			t.Fatalf("round %d: after release %+v, want %+v", round, got, empty)
		}
	}
}

func TestLedgerOverCommitAfterShrink(t *testing.T) {
	big := et.Node("n").CPU(16).Mem(64).GPUs("A100", 2, 40).NUMA(2).Obj()
	l := newLedger(t, big)
	if err := l.Apply(et.Job("a").CPU(8).Mem(8).GPU(1).Obj(), place("a", "n", []string{"n-gpu1"}, nil, -1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(et.Job("b").CPU(6).Mem(8).NUMA().Obj(), place("b", "n", nil, nil, 1)); err != nil {
		t.Fatal(err)
	}
	// The node shrinks to 4 cores, one GPU (gpu1, the one a holds, is gone)
	// and one NUMA domain: not an error, the allocations stay.
	small := et.Node("n").CPU(4).Mem(64).GPUs("A100", 1, 40).Label("k", "v").NUMA(1).Obj()
	if err := l.SetNode(small); err != nil {
		t.Fatal(err)
	}
	if l.NumAllocations() != 2 {
		t.Fatalf("allocations %d after shrink", l.NumAllocations())
	}
	n, _ := l.Node("n")
	if n.Allocated[engine.DimCPU] != 14000 || n.Free()[engine.DimCPU] != 0 || n.Labels["k"] != "v" {
		t.Errorf("after shrink: allocated %v free %v labels %v", n.Allocated, n.Free(), n.Labels)
	}
	if n.GPUs[0].InUse {
		t.Errorf("gpu0 is free: %+v", n.GPUs)
	}
	if ae := applyErr(t, l.Apply(et.Job("c").CPU(0.5).Obj(), place("c", "n", nil, nil, -1))); ae == nil || ae.Code != engine.ApplyNoCapacity {
		t.Fatalf("placement on an over-committed node: %v", ae)
	}
	l.Release("a")
	if n, _ := l.Node("n"); n.Free()[engine.DimCPU] != 0 {
		t.Errorf("still over-committed: %v", n.Allocated)
	}
	l.Release("b")
	if err := l.Apply(et.Job("c").CPU(4).Obj(), place("c", "n", nil, nil, -1)); err != nil {
		t.Fatalf("after releases: %v", err)
	}
	// Growing back counts the remaining allocation on the bigger inventory.
	if err := l.SetNode(big); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Node("n"); n.Allocated[engine.DimCPU] != 4000 || n.Labels != nil {
		t.Errorf("after growing: %+v", n)
	}
}

func TestLedgerHealthAndRemove(t *testing.T) {
	l := newLedger(t, et.Node("a").CPU(4).Obj(), et.Node("b").CPU(4).Obj())
	if !l.SetHealthy("a", false) || l.SetHealthy("x", false) {
		t.Fatal("SetHealthy")
	}
	if ae := applyErr(t, l.Apply(et.Job("j1").CPU(1).Obj(), place("j1", "a", nil, nil, -1))); ae == nil || ae.Code != engine.ApplyUnhealthy {
		t.Fatalf("unhealthy node: %v", ae)
	}
	if n, _ := l.Node("a"); !n.Unhealthy {
		t.Error("snapshot does not say unhealthy")
	}
	l.SetHealthy("a", true)
	for i, node := range []string{"a", "a", "b"} {
		id := fmt.Sprintf("j%d", i)
		if err := l.Apply(et.Job(id).CPU(1).Obj(), place(id, node, nil, nil, -1)); err != nil {
			t.Fatal(err)
		}
	}
	// An unhealthy node keeps its allocations.
	l.SetHealthy("a", false)
	if l.NumAllocations() != 3 {
		t.Fatal("marking unhealthy dropped allocations")
	}
	gone := l.RemoveNode("a")
	if len(gone) != 2 || gone[0].Job.ID != "j0" || gone[1].Job.ID != "j1" || gone[0].Node != "a" {
		t.Fatalf("RemoveNode returned %+v", gone)
	}
	if l.NumNodes() != 1 || l.NumAllocations() != 1 || l.RemoveNode("a") != nil {
		t.Fatalf("after remove: %d nodes, %d allocations", l.NumNodes(), l.NumAllocations())
	}
	if ae := applyErr(t, l.Apply(et.Job("k").Obj(), place("k", "a", nil, nil, -1))); ae == nil || ae.Code != engine.ApplyUnknownNode {
		t.Fatalf("removed node: %v", ae)
	}
	if _, ok := l.Release("j0"); ok {
		t.Error("an allocation of a removed node is still held")
	}
}

func TestLedgerSetNodeErrors(t *testing.T) {
	twoGPUs := et.Node("n").GPUs("A100", 2, 40).Obj()
	twoGPUs.GPUs[1].ID = twoGPUs.GPUs[0].ID
	mig := et.Node("n").MIGGPU("A100", 80, "1g.10gb", "1g.10gb").Obj()
	mig.GPUs[0].MIG[1].ID = mig.GPUs[0].MIG[0].ID
	numa := et.Node("n").CPU(4).NUMA(2).Obj()
	numa.NUMA[1].ID = 0
	cpus := withCPUs(et.Node("n").CPU(4).NUMA(2).Obj())
	cpus.NUMA[1].CPUs[0] = 0
	some := withCPUs(et.Node("n").CPU(4).NUMA(2).Obj())
	some.NUMA[1].CPUs = nil
	neg := et.Node("n").Obj()
	neg.Capacity[engine.DimSSD] = -1
	for name, n := range map[string]engine.Node{
		"no name": {}, "gpu id twice": twoGPUs, "mig id twice": mig, "numa id twice": numa,
		"cpu twice": cpus, "cpus on some domains": some, "negative capacity": neg,
	} {
		l := newLedger(t, et.Node("n").CPU(1).Obj())
		if err := l.SetNode(n); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if got, _ := l.Node("n"); got.Capacity[engine.DimCPU] != 1000 || l.NumNodes() != 1 {
			t.Errorf("%s: a refused SetNode changed the ledger", name)
		}
	}
}

// TestLedgerSnapshot: nodes by name whatever the insertion order, the same
// snapshot twice, and snapshots independent of the ledger.
func TestLedgerSnapshot(t *testing.T) {
	nodes := []engine.Node{
		withCPUs(et.Node("c").CPU(8).Mem(16).Label("pool", "cpu").NUMA(2).Obj()),
		et.Node("a").CPU(4).Mem(8).GPUs("A100", 2, 40).MIGGPU("A100", 80, "1g.10gb").Obj(),
		et.Node("b").CPU(2).Mem(4).Obj(),
	}
	l1 := newLedger(t, nodes...)
	l2 := newLedger(t, nodes[2], nodes[0], nodes[1])
	s1, s2 := l1.Snapshot(), l2.Snapshot()
	if !reflect.DeepEqual(s1, s2) {
		t.Fatalf("insertion order changes the snapshot:\n%+v\n%+v", s1, s2)
	}
	if names := []string{s1[0].Name, s1[1].Name, s1[2].Name}; !slices.Equal(names, []string{"a", "b", "c"}) || !slices.Equal(l1.Names(), names) {
		t.Fatalf("order %v", names)
	}
	if !reflect.DeepEqual(l1.Snapshot(), s1) {
		t.Fatal("two snapshots differ")
	}
	// Mutate everything reachable from the snapshot.
	s1[0].GPUs[0].InUse = true
	s1[0].GPUs[2].MIG[0].InUse = true
	s1[0].GPUs[2].MIG[0].ID = "x"
	s1[0].Allocated[engine.DimCPU] = 99
	s1[2].Labels["pool"] = "gpu"
	s1[2].NUMA[0].CPU = 0
	s1[2].NUMA[0].CPUs[0] = 42
	s1[1].Name = "z"
	if !reflect.DeepEqual(l1.Snapshot(), s2) {
		t.Fatalf("mutating a snapshot changed the ledger: %+v", l1.Snapshot())
	}
	// So is mutating the node given to SetNode.
	nodes[0].Labels["pool"] = "x"
	nodes[0].NUMA[0].CPUs[0] = 42
	nodes[1].GPUs[0].ID = "y"
	if !reflect.DeepEqual(l1.Snapshot(), s2) {
		t.Fatal("mutating the SetNode argument changed the ledger")
	}
	// SnapshotInto gives the same nodes in the order asked, reusing dst.
	buf := l1.SnapshotInto(nil, []string{"c", "nope", "a"})
	if len(buf) != 2 || !reflect.DeepEqual(buf[0], s2[2]) || !reflect.DeepEqual(buf[1], s2[0]) {
		t.Fatalf("SnapshotInto %+v", buf)
	}
	if err := l1.Apply(et.Job("j").MIG("1g.10gb", 1).Obj(), place("j", "a", nil, []string{"a-gpu2-mig0"}, -1)); err != nil {
		t.Fatal(err)
	}
	again := l1.SnapshotInto(buf, nil)
	if !reflect.DeepEqual(again, l1.Snapshot()) || !again[0].GPUs[2].MIG[0].InUse {
		t.Fatalf("SnapshotInto: %+v", again)
	}
	l1.Release("j")
	again2 := l1.SnapshotInto(again, []string{"c", "b", "a"})
	if &again2[0] != &again[0] || !reflect.DeepEqual(again2, []engine.Node{s2[2], s2[1], s2[0]}) {
		t.Fatalf("SnapshotInto reusing dst: %+v", again2)
	}
}

// TestLedgerExclusiveCPUs: whole-core jobs get exclusive CPU IDs, lowest
// first, from their NUMA domain when NUMA-local; the others share the rest.
func TestLedgerExclusiveCPUs(t *testing.T) {
	node := withCPUs(et.Node("n").CPU(8).Mem(16).NUMA(2).Obj()) // domain 0: CPUs 0-3, domain 1: 4-7
	type step struct {
		j         engine.Job
		numa      int
		cpus      []int
		exclusive bool
		code      engine.ApplyCode
		release   string // instead of applying
	}
	steps := []step{
		{j: et.Job("frac0").CPU(0.5).Obj(), numa: -1, cpus: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{j: et.Job("two").CPU(2).Obj(), numa: -1, cpus: []int{0, 1}, exclusive: true},
		{j: et.Job("frac1").CPU(1.5).Obj(), numa: -1, cpus: []int{2, 3, 4, 5, 6, 7}},
		{j: et.Job("local").CPU(2).NUMA().Obj(), numa: 1, cpus: []int{4, 5}, exclusive: true},
		{j: et.Job("localfrac").CPU(0.5).NUMA().Obj(), numa: 1, cpus: []int{6, 7}},
		// Domain 0 has 2 cores left: "two" holds CPUs 0 and 1.
		{j: et.Job("big0").CPU(3).NUMA().Obj(), numa: 0, code: engine.ApplyNoCapacity},
		{j: et.Job("one").CPU(1).Obj(), numa: -1, cpus: []int{2}, exclusive: true},
		{j: et.Job("zero").Obj(), numa: -1, cpus: []int{3, 6, 7}},
		{release: "two"},
		{j: et.Job("local0").CPU(2).NUMA().Obj(), numa: 0, cpus: []int{0, 1}, exclusive: true},
		{release: "one"},
		{release: "local"},
		{j: et.Job("three").CPU(3).Obj(), numa: -1, cpus: []int{2, 3, 4}, exclusive: true},
	}
	l := newLedger(t, node)
	for _, s := range steps {
		if s.release != "" {
			if _, ok := l.Release(s.release); !ok {
				t.Fatalf("release %s", s.release)
			}
			continue
		}
		ae := applyErr(t, l.Apply(s.j, place(s.j.ID, "n", nil, nil, s.numa)))
		if s.code != "" {
			if ae == nil || ae.Code != s.code {
				t.Fatalf("%s: got %v, want %s", s.j.ID, ae, s.code)
			}
			continue
		}
		if ae != nil {
			t.Fatalf("%s: %v", s.j.ID, ae)
		}
		a, _ := l.Allocation(s.j.ID)
		if !slices.Equal(a.CPUs, s.cpus) || a.Exclusive != s.exclusive {
			t.Fatalf("%s: CPUs %v exclusive %v, want %v %v", s.j.ID, a.CPUs, a.Exclusive, s.cpus, s.exclusive)
		}
	}
	// Held now: local0 {0,1}, three {2,3,4}.
	if got := l.SharedCPUs("n", -1); !slices.Equal(got, []int{5, 6, 7}) {
		t.Errorf("shared %v", got)
	}
	if got := l.SharedCPUs("n", 0); len(got) != 0 {
		t.Errorf("shared in domain 0: %v", got)
	}
	if l.SharedCPUs("n", 9) != nil || l.SharedCPUs("x", -1) != nil {
		t.Error("SharedCPUs of an unknown node or domain")
	}
	// Domain figures: domain 0 = local0 (2 cores, NUMA-local) + three's
	// CPUs 2 and 3; domain 1 = localfrac 0.5 + three's CPU 4.
	n, _ := l.Node("n")
	if n.NUMA[0].CPU != 0 || n.NUMA[1].CPU != 4000-1500 || !slices.Equal(n.NUMA[1].CPUs, []int{4, 5, 6, 7}) {
		t.Errorf("numa %+v", n.NUMA)
	}
	if err := l.Apply(et.Job("four").CPU(3).Obj(), place("four", "n", nil, nil, -1)); applyErr(t, err) == nil {
		t.Errorf("3 cores on 3 free CPUs with fractional jobs: accepted")
	}
	// A job that is not NUMA-local takes its exclusive CPUs where the
	// domains have whole cores left, lowest first, and only then from the
	// others.
	l4 := newLedger(t, node)
	if err := l4.Apply(et.Job("f").CPU(3.5).NUMA().Obj(), place("f", "n", nil, nil, 0)); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		id    string
		cores float64
		cpus  []int
	}{{"s1", 1, []int{4}}, {"s2", 2, []int{5, 6}}, {"s3", 1, []int{7}}} {
		if err := l4.Apply(et.Job(x.id).CPU(x.cores).Obj(), place(x.id, "n", nil, nil, -1)); err != nil {
			t.Fatal(err)
		}
		if a, _ := l4.Allocation(x.id); !slices.Equal(a.CPUs, x.cpus) {
			t.Errorf("%s: CPUs %v, want %v", x.id, a.CPUs, x.cpus)
		}
	}
	l5 := newLedger(t, node)
	for d := range 2 {
		id := fmt.Sprintf("f%d", d)
		if err := l5.Apply(et.Job(id).CPU(3.5).NUMA().Obj(), place(id, "n", nil, nil, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l5.Apply(et.Job("s").CPU(1).Obj(), place("s", "n", nil, nil, -1)); err != nil {
		t.Fatal(err)
	}
	if a, _ := l5.Allocation("s"); !slices.Equal(a.CPUs, []int{0}) {
		t.Errorf("no domain has a whole core: CPUs %v, want [0]", a.CPUs)
	}
	// A node without CPU IDs hands out none.
	l2 := newLedger(t, et.Node("m").CPU(4).NUMA(2).Obj())
	if err := l2.Apply(et.Job("x").CPU(2).NUMA().Obj(), place("x", "m", nil, nil, 0)); err != nil {
		t.Fatal(err)
	}
	if a, _ := l2.Allocation("x"); len(a.CPUs) != 0 || a.Exclusive {
		t.Errorf("CPUs on a node without IDs: %+v", a)
	}
	// Too few free IDs although the millicores fit: a node whose capacity
	// exceeds its listed CPUs.
	wide := withCPUs(et.Node("w").CPU(2).NUMA(1).Obj())
	wide.Capacity[engine.DimCPU] = 4000
	wide.NUMA[0].CPU = 4000
	l3 := newLedger(t, wide)
	if ae := applyErr(t, l3.Apply(et.Job("x").CPU(3).Obj(), place("x", "w", nil, nil, -1))); ae == nil || ae.Code != engine.ApplyNoCPUs {
		t.Errorf("3 cores on 2 CPU IDs: %v", ae)
	}
}

// TestLedgerAgreesWithEngine is the property test: over random clusters
// and workloads, every placement of a plan Schedule makes on the ledger's
// snapshot applies, and the ledger never over-commits a node, a device, a
// NUMA domain or a CPU. Each seed runs several cycles, releasing some jobs
// between them.
func TestLedgerAgreesWithEngine(t *testing.T) {
	seeds := uint64(120)
	if testing.Short() {
		seeds = 30
	}
	var applied, refused [2]int
	for seed := range seeds {
		for k, cpuIDs := range []bool{false, true} {
			a, r := checkLedgerAgreement(t, seed, cpuIDs)
			applied[k] += a
			refused[k] += r
		}
	}
	t.Logf("placements applied %d (with CPU IDs: %d, of which %d refused in the documented case)", applied[0], applied[1], refused[1])
	if applied[0] < 1000 || refused[0] != 0 {
		t.Errorf("applied %d, refused %d without CPU IDs", applied[0], refused[0])
	}
}

// checkLedgerAgreement runs one seed and returns the placements applied and
// refused.
func checkLedgerAgreement(t *testing.T, seed uint64, cpuIDs bool) (applied, refused int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x6c6564676572))
	l := engine.NewLedger()
	nodes := 1 + int(seed%9)
	for i := range nodes {
		n := et.GenNode(rng, fmt.Sprintf("node%02d", nodes-i), false) // inserted in reverse name order
		if cpuIDs {
			n = withCPUs(n)
		}
		if err := l.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	caps := map[string]engine.NUMADomain{} // domain capacities: the empty ledger's snapshot
	for _, n := range l.Snapshot() {
		for _, d := range n.NUMA {
			caps[fmt.Sprintf("%s/%d", n.Name, d.ID)] = d
		}
	}
	accounts := 1 + int(seed%4)
	now := et.Epoch.Add(24 * time.Hour)
	var pending []engine.Job
	var st engine.State
	next := 0
	for cycle := range 6 {
		for range 5 + rng.IntN(40) {
			if rng.IntN(40) == 0 {
				size := 2 + rng.IntN(3)
				base := et.GenJob(rng, "", accounts, now, false)
				base.NodeSelector, base.NUMALocal, base.MIGProfile = nil, false, ""
				for m := range size {
					j := base
					j.ID = fmt.Sprintf("job%05d", next)
					j.GangID, j.GangSize = fmt.Sprintf("gang%05d", next-m), size
					pending = append(pending, j)
					next++
				}
				continue
			}
			pending = append(pending, et.GenJob(rng, fmt.Sprintf("job%05d", next), accounts, now, false))
			next++
		}
		snap := engine.Snapshot{Now: now, Seed: seed + uint64(cycle), Nodes: l.Snapshot(), Pending: pending}
		strats := []engine.Strategy{engine.BestFit, engine.FirstFit, engine.WorstFit, engine.Balanced, engine.MostAllocated, engine.Cheapest}
		snap.Policy.Strategy = strats[int(seed+uint64(cycle))%len(strats)]
		for _, a := range l.Allocations() {
			snap.Running = append(snap.Running, a.Running())
		}
		plan, st2 := engine.Schedule(st, snap)
		st = st2
		placed := map[string]bool{}
		exclusiveOn := map[string]bool{} // nodes where this plan's jobs took exclusive CPUs outside a domain
		for _, p := range plan.Placements {
			j := jobByID(t, pending, p.JobID)
			err := l.ApplyAt(j, p, now)
			if err != nil {
				// The one documented disagreement: a NUMA-local job after
				// a job that took exclusive CPUs from the same node in the
				// same plan (the engine sees their domains next cycle).
				ae := applyErr(t, err)
				if !cpuIDs || !j.NUMALocal || !exclusiveOn[p.Node] || (ae.Code != engine.ApplyNoCPUs && ae.Code != engine.ApplyNoCapacity) {
					t.Fatalf("seed %d cycle %d cpuIDs %v: the engine placed %s on %s, the ledger refused: %v", seed, cycle, cpuIDs, p.JobID, p.Node, err)
				}
				if j.GangID != "" {
					t.Fatalf("seed %d: a gang member refused", seed)
				}
				refused++
				continue
			}
			placed[p.JobID] = true
			applied++
			if a, _ := l.Allocation(p.JobID); a.Exclusive && a.NUMA < 0 {
				exclusiveOn[p.Node] = true
			}
		}
		checkLedgerConsistent(t, l, caps, seed)
		kept := pending[:0]
		for _, j := range pending {
			if !placed[j.ID] {
				kept = append(kept, j)
			}
		}
		pending = kept
		// Some running jobs end.
		for _, a := range l.Allocations() {
			if rng.IntN(3) == 0 {
				if _, ok := l.Release(a.Job.ID); !ok {
					t.Fatal("release")
				}
			}
		}
		checkLedgerConsistent(t, l, caps, seed)
		now = now.Add(10 * time.Minute)
	}
	return applied, refused
}

func jobByID(t *testing.T, jobs []engine.Job, id string) engine.Job {
	t.Helper()
	for _, j := range jobs {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("the plan places %s, which is not pending", id)
	return engine.Job{}
}

// checkLedgerConsistent recomputes every node's use from the allocations
// and checks it against the capacities and against the snapshot.
func checkLedgerConsistent(t *testing.T, l *engine.Ledger, caps map[string]engine.NUMADomain, seed uint64) {
	t.Helper()
	nodes := l.Snapshot()
	byName := map[string]*engine.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	used := map[string]engine.Resources{}
	devices := map[string]string{}
	numaCPU, numaMem := map[string]int64{}, map[string]int64{}
	spreadIn := map[string]bool{} // domains holding exclusive CPUs of jobs that are not NUMA-local
	for _, a := range l.Allocations() {
		n := byName[a.Node]
		if n == nil {
			t.Fatalf("seed %d: %s on unknown node %s", seed, a.Job.ID, a.Node)
		}
		used[a.Node] = used[a.Node].Add(a.Vec)
		for _, id := range slices.Concat(a.GPUs, a.MIG) {
			if other, dup := devices[a.Node+"/"+id]; dup {
				t.Fatalf("seed %d: device %s held by %s and %s", seed, id, other, a.Job.ID)
			}
			devices[a.Node+"/"+id] = a.Job.ID
		}
		if a.NUMA >= 0 {
			key := fmt.Sprintf("%s/%d", a.Node, a.NUMA)
			numaCPU[key] += a.Vec[engine.DimCPU]
			numaMem[key] += a.Vec[engine.DimMemory]
		}
		if a.Exclusive {
			if int64(len(a.CPUs))*1000 != a.Vec[engine.DimCPU] {
				t.Fatalf("seed %d: %s holds CPUs %v for %d millicores", seed, a.Job.ID, a.CPUs, a.Vec[engine.DimCPU])
			}
			for _, c := range a.CPUs {
				key := fmt.Sprintf("%s/cpu%d", a.Node, c)
				if other, dup := devices[key]; dup {
					t.Fatalf("seed %d: CPU %d held by %s and %s", seed, c, other, a.Job.ID)
				}
				devices[key] = a.Job.ID
				if a.NUMA < 0 {
					for _, d := range n.NUMA {
						if slices.Contains(d.CPUs, c) {
							numaCPU[fmt.Sprintf("%s/%d", a.Node, d.ID)] += 1000
							spreadIn[fmt.Sprintf("%s/%d", a.Node, d.ID)] = true
						}
					}
				}
			}
		}
	}
	for i := range nodes {
		n := &nodes[i]
		if n.Allocated != used[n.Name] {
			t.Fatalf("seed %d: %s allocated %v, allocations sum to %v", seed, n.Name, n.Allocated, used[n.Name])
		}
		for d, v := range n.Capacity.Sub(n.Allocated) {
			if v < 0 {
				t.Fatalf("seed %d: %s over-committed in %s: %v of %v", seed, n.Name, engine.Dim(d), n.Allocated, n.Capacity)
			}
		}
		for d, v := range n.Free() {
			if v < 0 {
				t.Fatalf("seed %d: %s free %s negative", seed, n.Name, engine.Dim(d))
			}
		}
		for _, g := range n.GPUs {
			_, h := devices[n.Name+"/"+g.ID]
			if g.InUse != h {
				t.Fatalf("seed %d: %s InUse %v, held %v", seed, g.ID, g.InUse, h)
			}
			for _, m := range g.MIG {
				if _, h := devices[n.Name+"/"+m.ID]; m.InUse != h {
					t.Fatalf("seed %d: %s InUse %v, held %v", seed, m.ID, m.InUse, h)
				}
			}
		}
		for _, d := range n.NUMA {
			// The snapshot's figure is capacity minus use (clamped at 0),
			// and the use never exceeds the capacity.
			// Only exclusive CPUs of jobs that are not NUMA-local may
			// over-commit a domain's CPU, when the node has no other
			// free CPUs left (see pickCPUs).
			key := fmt.Sprintf("%s/%d", n.Name, d.ID)
			c := caps[key]
			if numaCPU[key] > c.CPU && !spreadIn[key] || numaMem[key] > c.Memory || d.CPU != max(c.CPU-numaCPU[key], 0) || d.Memory != c.Memory-numaMem[key] {
				t.Fatalf("seed %d: %s domain %d: free %d/%d, used %d/%d of %d/%d", seed, n.Name, d.ID,
					d.CPU, d.Memory, numaCPU[key], numaMem[key], c.CPU, c.Memory)
			}
		}
	}
}

// TestLedgerRestore: a running job found again is recorded whatever the
// ledger thinks of its node: over-committed, sharing a device, or on a
// node not known yet.
func TestLedgerRestore(t *testing.T) {
	l := newLedger(t, withCPUs(et.Node("n").CPU(4).Mem(8).GPUs("A100", 1, 40).NUMA(2).Obj()))
	if err := l.Apply(et.Job("a").CPU(3).GPU(1).Obj(), place("a", "n", []string{"n-gpu0"}, nil, -1)); err != nil {
		t.Fatal(err)
	}
	// b holds the same GPU and more CPU than is left.
	l.Restore(et.Job("b").CPU(2).GPU(1).Obj(), place("b", "n", []string{"n-gpu0"}, nil, -1), et.Epoch)
	n, _ := l.Node("n")
	if n.Allocated[engine.DimCPU] != 5000 || !n.GPUs[0].InUse {
		t.Fatalf("after restore: %+v", n)
	}
	if a, _ := l.Allocation("b"); a.Exclusive || !slices.Equal(a.CPUs, []int{3}) || !a.Started.Equal(et.Epoch) {
		t.Errorf("b: %+v (3 of 4 CPUs are held: it shares the last)", a)
	}
	l.Release("a")
	if n, _ := l.Node("n"); n.Allocated[engine.DimCPU] != 2000 || !n.GPUs[0].InUse {
		t.Fatalf("after releasing a, b still holds the GPU: %+v", n)
	}
	if ae := applyErr(t, l.Apply(et.Job("c").GPU(1).Obj(), place("c", "n", []string{"n-gpu0"}, nil, -1))); ae == nil || ae.Code != engine.ApplyDeviceInUse {
		t.Fatalf("GPU held by b: %v", ae)
	}
	// Restore replaces the job's allocation.
	l.Restore(et.Job("b").CPU(1).Obj(), place("b", "n", nil, nil, -1), time.Time{})
	if n, _ := l.Node("n"); n.Allocated[engine.DimCPU] != 1000 || n.GPUs[0].InUse || l.NumAllocations() != 1 {
		t.Fatalf("after restoring b again: %+v", n)
	}
	// A job on a node the ledger does not know yet counts once it is added.
	l.Restore(et.Job("d").CPU(1).NUMA().Obj(), place("d", "m", nil, nil, 1), time.Time{})
	if err := l.SetNode(et.Node("m").CPU(2).Mem(2).NUMA(2).Obj()); err != nil {
		t.Fatal(err)
	}
	if m, _ := l.Node("m"); m.Allocated[engine.DimCPU] != 1000 || m.NUMA[1].CPU != 0 || m.NUMA[0].CPU != 1000 {
		t.Fatalf("restored job on a new node: %+v", m)
	}
}
