package enginetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/computeboard/computeboard/engine"
)

// GenConfig sizes a generated snapshot.
type GenConfig struct {
	Seed     uint64
	Nodes    int
	Pending  int
	Running  int // attempted; a running job that does not fit is skipped
	Accounts int // default 29, one per cognitive module
	// Simple makes every job a plain CPU/memory request (no GPUs, MIG,
	// selectors, NUMA, gangs or deadlines).
	Simple bool
	Now    time.Time // default Epoch + 24h
}

// Generate builds a seeded, self-consistent snapshot: node allocations and
// GPU flags match the running jobs. The same config gives the same snapshot.
func Generate(cfg GenConfig) engine.Snapshot {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x656e67696e65))
	if cfg.Accounts <= 0 {
		cfg.Accounts = 29
	}
	if cfg.Now.IsZero() {
		cfg.Now = Epoch.Add(24 * time.Hour)
	}
	snap := engine.Snapshot{Now: cfg.Now, Seed: cfg.Seed}
	for a := range cfg.Accounts {
		snap.Accounts = append(snap.Accounts, engine.Account{Name: fmt.Sprintf("module%02d", a), Shares: float64(1 + a%4)})
	}
	for i := range cfg.Nodes {
		snap.Nodes = append(snap.Nodes, GenNode(rng, fmt.Sprintf("node%05d", i), cfg.Simple))
	}
	for i := range cfg.Running {
		j := GenJob(rng, fmt.Sprintf("run%06d", i), cfg.Accounts, cfg.Now, true)
		placeRunning(rng, &snap, j)
	}
	gang := 0
	for i := 0; i < cfg.Pending; i++ {
		if !cfg.Simple && rng.IntN(50) == 0 && i+4 <= cfg.Pending {
			// A gang of 2..4 identical members.
			size := 2 + rng.IntN(3)
			base := GenJob(rng, "", cfg.Accounts, cfg.Now, true)
			base.NodeSelector, base.NUMALocal, base.MIGProfile = nil, false, ""
			for m := range size {
				j := base
				j.ID = fmt.Sprintf("job%06d", i+m)
				j.GangID, j.GangSize = fmt.Sprintf("gang%d", gang), size
				snap.Pending = append(snap.Pending, j)
			}
			gang++
			i += size - 1
			continue
		}
		snap.Pending = append(snap.Pending, GenJob(rng, fmt.Sprintf("job%06d", i), cfg.Accounts, cfg.Now, cfg.Simple))
	}
	return snap
}

// GenNode returns a node of one of a few common shapes.
func GenNode(rng *rand.Rand, name string, simple bool) engine.Node {
	b := Node(name).Net(25000).Storage(engine.TierSSD, 2000)
	kind := rng.IntN(10)
	if simple {
		kind = kind % 6
	}
	switch {
	case kind < 4:
		b.CPU(32).Mem(128).Label("pool", "cpu").NUMA(2)
	case kind < 6:
		b.CPU(64).Mem(256).Label("pool", "cpu").Storage(engine.TierNVMe, 4000).NUMA(4)
	case kind < 8:
		b.CPU(64).Mem(512).GPUs("A100-80GB", 4, 80).Label("pool", "gpu")
	case kind < 9:
		b.CPU(96).Mem(1024).GPUs("H100", 8, 80).Label("pool", "gpu").Storage(engine.TierNVMe, 8000)
	default:
		b.CPU(32).Mem(256).Label("pool", "gpu").
			MIGGPU("A100-80GB", 80, "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "3g.40gb").
			MIGGPU("A100-80GB", 80, "3g.40gb", "3g.40gb")
	}
	b.Label("zone", fmt.Sprintf("z%d", rng.IntN(3)))
	if rng.IntN(200) == 0 {
		b.Unhealthy()
	}
	return b.Obj()
}

// GenJob returns a job from a small set of shapes, as modules post them.
func GenJob(rng *rand.Rand, id string, accounts int, now time.Time, simple bool) engine.Job {
	b := Job(id).Account(fmt.Sprintf("module%02d", rng.IntN(accounts))).Priority(rng.IntN(10)).
		Submitted(now.Add(-time.Duration(rng.IntN(24*60)) * time.Minute)).
		Est(time.Duration(10+rng.IntN(230)) * time.Minute)
	cores := []float64{0.5, 1, 2, 4, 8, 16}
	b.CPU(cores[rng.IntN(len(cores))]).Mem(float64(int(1) << rng.IntN(6)))
	if simple {
		return b.Obj()
	}
	switch k := rng.IntN(20); {
	case k < 2:
		b.GPU(1 + rng.IntN(2)).GPUModel("A100-80GB")
	case k < 3:
		b.GPU(1 << rng.IntN(3)).GPUModel("H100").GPUMem(80)
	case k < 4:
		b.MIG("1g.10gb", 1)
	case k < 5:
		b.Storage(engine.TierNVMe, int64(100*(1+rng.IntN(10))))
	case k < 6:
		b.Selector("zone", fmt.Sprintf("z%d", rng.IntN(3)))
	case k < 7:
		b.NUMA()
	}
	if rng.IntN(10) == 0 {
		b.Deadline(now.Add(time.Duration(rng.IntN(8*60)-60) * time.Minute))
	}
	return b.Obj()
}

// placeRunning puts j on the first node (from a random start) that has room,
// updating the node's allocation and devices.
func placeRunning(rng *rand.Rand, snap *engine.Snapshot, j engine.Job) {
	n := len(snap.Nodes)
	if n == 0 {
		return
	}
	j.Deadline = time.Time{}
	start := rng.IntN(n)
	for k := range n {
		node := &snap.Nodes[(start+k)%n]
		if node.Unhealthy || !j.Request.Fits(node.Free()) {
			continue
		}
		var gpus, mig []string
		if j.Request[engine.DimGPU] > 0 && j.MIGProfile == "" {
			for g := range node.GPUs {
				if len(gpus) < int(j.Request[engine.DimGPU]) && !node.GPUs[g].InUse && len(node.GPUs[g].MIG) == 0 &&
					(j.GPUModel == "" || node.GPUs[g].Model == j.GPUModel) {
					gpus = append(gpus, node.GPUs[g].ID)
				}
			}
			if len(gpus) < int(j.Request[engine.DimGPU]) {
				continue
			}
		}
		if j.MIGProfile != "" {
			for g := range node.GPUs {
				for m := range node.GPUs[g].MIG {
					if len(mig) == 0 && !node.GPUs[g].MIG[m].InUse && node.GPUs[g].MIG[m].Profile == j.MIGProfile {
						mig = append(mig, node.GPUs[g].MIG[m].ID)
					}
				}
			}
			if len(mig) == 0 {
				continue
			}
		}
		vec := j.Request
		if j.MIGProfile != "" {
			vec[engine.DimGPU], vec[engine.DimGPUMemory] = 0, 0
		}
		node.Allocated = node.Allocated.Add(vec)
		for g := range node.GPUs {
			for _, id := range gpus {
				if node.GPUs[g].ID == id {
					node.GPUs[g].InUse = true
				}
			}
			for m := range node.GPUs[g].MIG {
				for _, id := range mig {
					if node.GPUs[g].MIG[m].ID == id {
						node.GPUs[g].MIG[m].InUse = true
					}
				}
			}
		}
		// NUMA: take from the first domain with room, else leave as is.
		for d := range node.NUMA {
			if node.NUMA[d].CPU >= vec[engine.DimCPU] && node.NUMA[d].Memory >= vec[engine.DimMemory] {
				node.NUMA[d].CPU -= vec[engine.DimCPU]
				node.NUMA[d].Memory -= vec[engine.DimMemory]
				break
			}
		}
		started := snap.Now.Add(-time.Duration(rng.IntN(120)) * time.Minute)
		snap.Running = append(snap.Running, engine.Running{Job: j, Node: node.Name, Started: started, GPUs: gpus, MIG: mig})
		return
	}
}
