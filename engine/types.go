package engine

import (
	"time"
)

// Snapshot is everything one scheduling cycle may look at. The adapter builds
// it from the blackboard; the simulator builds it from a trace. Schedule
// never modifies it.
type Snapshot struct {
	Now      time.Time // the cycle's time; the engine never reads a clock
	Seed     uint64    // seeds the cycle's random source (lottery); copied into Plan.Seed
	Policy   Policy    // zero value = DefaultPolicy()
	Nodes    []Node
	Pending  []Job     // jobs waiting to be placed
	Running  []Running // jobs holding resources, plus jobs that ended since the last cycle (Ended set)
	Accounts []Account // the fair-share tree; accounts named by jobs but missing here get Policy.DefaultShares under the root
	// Preemption configures victim selection (preempt.go). The zero value
	// is off: no eviction is ever planned.
	Preemption PreemptionConfig `json:",omitzero"`
}

// Node is one machine as the adapter sees it now.
type Node struct {
	Name      string
	Labels    map[string]string
	Capacity  Resources // total
	Allocated Resources // in use now, by running jobs and by anything else; free = Capacity − Allocated
	GPUs      []GPU     // per-device view; when empty, DimGPU counts anonymous GPUs of no model
	NUMA      []NUMADomain
	Unhealthy bool // an unhealthy node gets no placements
	// Cost is the relative price of the node's resources (per billing
	// unit-hour, e.g. its provider's price); cost-based preemption weighs
	// the work an eviction loses by it. 0 = 1.
	Cost float64 `json:",omitempty"`
	// Price is what the node's resources cost per hour (its provider's
	// price list). The Cheapest strategy places a job on the fitting node
	// where its request costs least. The zero value prices everything at 0.
	Price Price `json:",omitzero"`
}

// Price is a price list per resource-hour, in any currency (the same for
// every node of a pool).
type Price struct {
	CoreHour float64 `json:",omitempty"` // one CPU core for an hour
	GiBHour  float64 `json:",omitempty"` // one GiB of memory for an hour
	GPUHour  float64 `json:",omitempty"` // one whole GPU for an hour; a MIG instance costs its share of the GPU's compute slices
}

// Free returns Capacity − Allocated, with negative components clamped to 0.
func (n *Node) Free() Resources {
	f := n.Capacity.Sub(n.Allocated)
	for i := range f {
		f[i] = max(f[i], 0)
	}
	return f
}

// GPU is one device. A GPU with MIG instances is in MIG mode: it is never
// handed out whole, only its instances are.
type GPU struct {
	ID        string
	Model     string // e.g. "A100-80GB"; matched exactly against Job.GPUModel
	MemoryMiB int64
	MIG       []MIGInstance
	InUse     bool
}

// MIGInstance is one MIG slice of a GPU.
type MIGInstance struct {
	ID      string
	Profile string // e.g. "1g.10gb", "3g.40gb"
	InUse   bool
}

// NUMADomain is the free CPU and memory of one NUMA domain of a node.
type NUMADomain struct {
	ID     int
	CPU    int64 // free millicores
	Memory int64 // free MiB
	// CPUs are the domain's CPU IDs (all of them, free or not), when known;
	// the engine ignores them. A Ledger hands them out: exclusively to jobs
	// asking for whole cores, shared by the others.
	CPUs []int `json:",omitempty"`
}

// Job is one pending request (one member, for a gang).
type Job struct {
	ID          string
	Account     string        // fair-share account; "" = Policy.DefaultAccount
	Priority    int           // 0..9, 9 most urgent
	Submitted   time.Time     // when the job started waiting (ageing starts here)
	Deadline    time.Time     // zero = none
	EstDuration time.Duration // estimated run time; 0 = unknown (Policy.DefaultDuration for planning)
	// TimeLimit is when the job is stopped if still running (the adapter
	// kills it then); 0 = none. Backfill and reservations plan the job's
	// end at Started + TimeLimit whenever it has one, estimate or not (the
	// latest it can end), as Slurm's backfill does; see backfill.go.
	TimeLimit time.Duration
	// Request is the amount to allocate. Request[DimGPU] is a count of whole
	// GPUs, or of MIG instances when MIGProfile is set; Request[DimGPUMemory]
	// is the total GPU memory wanted, spread evenly over the GPUs (each chosen
	// GPU must have at least GPUMemory/GPU). Storage dims are exact per tier.
	Request      Resources
	GPUModel     string            // "" = any model
	MIGProfile   string            // "" = whole GPUs; else e.g. "1g.10gb"
	StorageTier  string            // "" = as Request says; else all requested storage comes from this tier
	NodeSelector map[string]string // every pair must equal a node label
	NUMALocal    bool              // CPU and memory from one NUMA domain
	Strategy     Strategy          // "" = the pool's or Policy.Strategy
	GangID       string            // members of a gang share it; "" = not a gang
	GangSize     int               // total members of the gang
	// NonPreemptible jobs are never evicted (set by the caller, from the
	// job's template).
	NonPreemptible bool `json:",omitempty"`
	// PreemptMode is how this job is evicted if it is a victim; "" = the
	// PreemptionConfig's DefaultMode. PreemptModes are the modes its
	// provider supports (empty = all); when the wanted mode is not among
	// them the fallback order applies (see ResolveMode).
	PreemptMode  EvictionMode   `json:",omitempty"`
	PreemptModes []EvictionMode `json:",omitempty"`
}

// Running is a job that holds (or, with Ended set, held) resources.
type Running struct {
	Job
	Node    string
	Started time.Time
	Ended   time.Time // zero = still running; set once for a job that ended since State.LastNow, so its usage is charged
	GPUs    []string  // GPU IDs held (informational; Node.GPUs[].InUse is authoritative)
	MIG     []string  // MIG instance IDs held
	// LastCheckpoint is when the job last saved its progress (zero = never):
	// an eviction loses the work since max(Started, LastCheckpoint).
	LastCheckpoint time.Time `json:",omitzero"`
}

// Account is one node of the fair-share tree.
type Account struct {
	Name       string
	Parent     string    // "" = child of the root
	Shares     float64   // relative to siblings; 0 = never favoured
	Quota      Resources // max concurrent resources of the subtree; a zero component = no limit in that dimension
	Guaranteed Resources // jobs that keep the subtree within this go ahead of every other job
}

// Plan is the outcome of one cycle. It is data: the adapter applies it and
// re-checks each placement against fresh state.
type Plan struct {
	Seed         uint64
	Now          time.Time
	Placements   []Placement   // in decision order
	Rejected     []Rejection   // every pending job not placed, in order position
	Explanations []Explanation // every pending job, in order position
	Reservation  *Reservation  // the EASY-backfill reservation, if a job holds one
	// Evictions are the running jobs to stop so that this plan's
	// preemptors fit (preempt.go), in decision order. Apply them before
	// the placements: each preemptor's Placement is on its victims' node.
	Evictions []Eviction `json:",omitempty"`
}

// Placement starts one job on one node.
type Placement struct {
	JobID      string
	Node       string
	GPUs       []string // whole GPUs chosen, by ID
	MIG        []string // MIG instances chosen, by ID
	NUMA       int      // NUMA domain ID for a NUMALocal job; -1 = none
	Backfilled bool     // started ahead of the reserved job
}

// Rejection says why a pending job was not placed this cycle.
type Rejection struct {
	JobID   string
	Reason  Code
	Message string
	Final   bool   // the job can never run as asked: drop it, don't retry
	NoFit   *NoFit `json:",omitempty"` // for ReasonNoFit and friends: per-dimension node counts
}

// Reservation is the start time and nodes promised to the first blocked job
// (EASY backfill): no backfilled job may delay it.
type Reservation struct {
	JobID string
	Start time.Time
	Nodes []string
}

// Strategy names a placement strategy.
type Strategy string

// Placement strategies.
const (
	BestFit       Strategy = "best-fit"       // the fitting node with the least free capacity left (default)
	FirstFit      Strategy = "first-fit"      // the first fitting node in index order
	WorstFit      Strategy = "worst-fit"      // spread: the fitting node with the most free capacity
	Balanced      Strategy = "balanced"       // the fitting node whose utilisation is most even across dimensions afterwards
	MostAllocated Strategy = "most-allocated" // bin-pack: the fitting node with the highest utilisation
	Cheapest      Strategy = "cheapest"       // the fitting node where the job's request costs least per hour (Node.Price); ties by best-fit, then node order
)

// Selection names the algorithm that interleaves accounts.
type Selection string

// Account selection algorithms (see fairshare.go).
const (
	SelectPriority     Selection = "priority"     // one order by the priority formula (fair share is one factor); default
	SelectProportional Selection = "proportional" // the account furthest below its share (lowest usage/share) goes next
	SelectLottery      Selection = "lottery"      // seeded lottery over shares, with compensation tickets
	SelectWFQ          Selection = "wfq"          // weighted fair queuing: smallest virtual finish tag
	SelectDRR          Selection = "drr"          // deficit round-robin, quantum ∝ shares
	SelectDRF          Selection = "drf"          // dominant resource fairness: lowest weighted dominant share
)

// FairShareMode names the fair-share factor formula.
type FairShareMode string

// Fair-share factor formulas.
const (
	FairShareClassic           FairShareMode = "classic"            // Slurm classic: 2^(−U_E/S); default
	FairShareEffectivePriority FairShareMode = "effective-priority" // the original's boost/max(usage/shares, 0.1), scaled to [0,1]
)

// DeadlineAction says what happens to a job whose deadline can no longer be met.
type DeadlineAction string

// Deadline actions.
const (
	DeadlineRun    DeadlineAction = "run"    // flag it and keep it, ordered by lateness (default)
	DeadlineReject DeadlineAction = "reject" // reject it (Final)
)

// DeadlineOrder says how jobs with a deadline are ordered within a band.
type DeadlineOrder string

// Deadline orders.
const (
	LeastSlackFirst       DeadlineOrder = "least-slack"       // slack = deadline − now − estimated duration, ascending (default); overdue jobs latest first
	EarliestDeadlineFirst DeadlineOrder = "earliest-deadline" // deadline ascending, whatever the estimated duration
)

// Weights are the coefficients of the priority formula, in priority levels:
// a weight of 1 lets its factor move a job by at most one level.
type Weights struct {
	Level     float64 // × Priority (0..9); default 1
	Age       float64 // × waited hours, uncapped unless MaxAge > 0 (default 0.5 level per hour)
	FairShare float64 // × fair-share factor in [0,1]; default 2
	Deadline  float64 // × deadline urgency in [0,1]; default 1
}

// Policy is the configuration of the engine. Zero fields take the defaults
// listed on each field (see DefaultPolicy).
type Policy struct {
	Weights         Weights       // zero value = defaults; otherwise used as given
	MaxAge          float64       // cap on the age term, in levels; ≤ 0 = no cap (default: see StarvationBound); a cap > 0 lets a backlog of higher levels starve a job
	NoAging         bool          // ignore waiting time: like a cap, lets low levels starve
	Band            float64       // width of a "comparable priority" band, in levels; default 1
	DeadlineHorizon time.Duration // slack at which urgency is 1/2; default 1h
	DeadlineAction  DeadlineAction
	DeadlineOrder   DeadlineOrder // within a band; default LeastSlackFirst

	FairShareMode  FairShareMode
	HalfLife       time.Duration       // usage half-life; default ln(0.5)/ln(0.9) hours ≈ 6h35m (the original's 0.9 per hour)
	Billing        [NumDims]float64    // billing units per unit per second; zero value = core 1, GiB memory 0.25, GPU 8, others 0
	MIGSlices      int                 // compute slices of a full GPU, to price MIG profiles; default 7
	Selection      Selection           // default SelectPriority
	Quantum        float64             // DRR quantum of a 1-share account and lottery quantum, in billing-seconds; default 3600
	DefaultShares  float64             // shares of accounts not in Snapshot.Accounts; default 1
	DefaultAccount string              // account of jobs with none; default "default"
	ShareCap       float64             // hold an account whose dominant share exceeds ShareCap × its normalized share (ReasonOverShare); 0 = no cap
	Strategy       Strategy            // default BestFit
	PoolLabel      string              // node label naming a node's pool; default "pool"
	PoolStrategy   map[string]Strategy // strategy per pool, for jobs whose NodeSelector names a pool

	NoBackfill      bool          // disable EASY backfill (strict order: nothing starts after the first blocked job)
	DefaultDuration time.Duration // planning duration of jobs with EstDuration 0; default 1h
	MaxEstimates    int           // distinct request shapes that get an estimated start; default 1024; negative = none
}
