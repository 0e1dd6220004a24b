package sim

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/computeboard/computeboard/engine"
)

// Trace is a workload: the pool, the fair-share tree, the engine policy and
// the jobs (listed, read from a CSV file, or generated). README.md documents
// the JSON form field by field. Times are seconds since the trace start;
// CPU is in cores, memory, GPU memory and storage in GiB, network in Mbps.
type Trace struct {
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// Seed seeds the generators (unless they carry their own) and the
	// engine's per-cycle seed (lottery).
	Seed uint64 `json:"seed,omitempty"`
	// Policy is the engine policy; zero fields take the engine defaults.
	Policy PolicySpec `json:"policy,omitzero"`
	// Variants are named policy overlays (applied over Policy) that --policy
	// and --compare accept besides the selection algorithm names.
	Variants map[string]json.RawMessage `json:"variants,omitempty"`
	// Cycle says when the engine runs.
	Cycle CycleSpec `json:"cycle,omitzero"`
	// Preemption turns on victim selection (engine.PreemptionConfig) and
	// says how evicted jobs checkpoint; omitted = no preemption.
	Preemption *PreemptionSpec `json:"preemption,omitempty"`
	// Horizon stops the simulation at this time (0 = run until the work is
	// done or nothing more can start).
	Horizon float64 `json:"horizon,omitempty"`
	// Measure is the quantity shares are measured in: "billing", "dominant",
	// or "auto" (default: dominant for drf, billing otherwise).
	Measure string `json:"measure,omitempty"`
	// Window fixes the share-measurement window; by default it is the time
	// during which every account with jobs is backlogged (has a job waiting).
	Window *WindowSpec `json:"window,omitempty"`

	Nodes    []NodeSpec    `json:"nodes"`
	Accounts []AccountSpec `json:"accounts,omitempty"`
	Jobs     []JobSpec     `json:"jobs,omitempty"`
	// JobsCSV names a CSV file of more jobs (relative to the trace file);
	// its header row uses the JobSpec JSON names.
	JobsCSV  string    `json:"jobs_csv,omitempty"`
	Generate []GenSpec `json:"generate,omitempty"`

	dir string // directory of the trace file, for JobsCSV
}

// PolicySpec is engine.Policy in trace units (seconds, trace resource
// units); zero fields take the engine defaults.
type PolicySpec struct {
	Selection       string             `json:"selection,omitempty"`       // priority (default), proportional, lottery, wfq, drr, drf
	Strategy        string             `json:"strategy,omitempty"`        // best-fit (default), first-fit, worst-fit, balanced, most-allocated
	FairShareMode   string             `json:"fair_share_mode,omitempty"` // classic (default), effective-priority
	Weights         *WeightsSpec       `json:"weights,omitempty"`         // given fields replace the engine defaults
	MaxAge          float64            `json:"max_age,omitempty"`
	NoAging         bool               `json:"no_aging,omitempty"`
	Band            float64            `json:"band,omitempty"`
	DeadlineHorizon float64            `json:"deadline_horizon,omitempty"` // seconds
	DeadlineAction  string             `json:"deadline_action,omitempty"`  // run (default), reject
	DeadlineOrder   string             `json:"deadline_order,omitempty"`   // least-slack (default), earliest-deadline
	HalfLife        float64            `json:"half_life,omitempty"`        // seconds
	Billing         map[string]float64 `json:"billing,omitempty"`          // price per trace unit per second, by dimension name; replaces the whole default list
	MIGSlices       int                `json:"mig_slices,omitempty"`
	Quantum         float64            `json:"quantum,omitempty"` // billing-seconds
	DefaultShares   float64            `json:"default_shares,omitempty"`
	ShareCap        float64            `json:"share_cap,omitempty"`
	NoBackfill      bool               `json:"no_backfill,omitempty"`
	DefaultDuration float64            `json:"default_duration,omitempty"` // seconds
	PoolLabel       string             `json:"pool_label,omitempty"`
	PoolStrategy    map[string]string  `json:"pool_strategy,omitempty"`
}

// WeightsSpec are the priority formula's weights. Fields left out keep the
// engine defaults (level 1, age 0.5, fair_share 2, deadline 1).
type WeightsSpec struct {
	Level     float64 `json:"level"`
	Age       float64 `json:"age"`
	FairShare float64 `json:"fair_share"`
	Deadline  float64 `json:"deadline"`
}

// UnmarshalJSON overlays the given fields on the current value, or on the
// engine defaults when the value is zero.
func (w *WeightsSpec) UnmarshalJSON(data []byte) error {
	if *w == (WeightsSpec{}) {
		d := engine.DefaultPolicy().Weights
		*w = WeightsSpec{Level: d.Level, Age: d.Age, FairShare: d.FairShare, Deadline: d.Deadline}
	}
	type plain WeightsSpec
	return strictUnmarshal(data, (*plain)(w))
}

// CycleSpec says when the simulator runs a scheduling cycle.
type CycleSpec struct {
	// Interval runs a cycle every Interval seconds while jobs wait (0 = no
	// periodic cycles).
	Interval float64 `json:"interval,omitempty"`
	// OnEvents runs a cycle at every arrival and completion time (default
	// true; false needs an interval).
	OnEvents *bool `json:"on_events,omitempty"`
}

// WindowSpec is an explicit share-measurement window.
type WindowSpec struct {
	From float64 `json:"from"`
	To   float64 `json:"to"` // 0 = the end
}

// NodeSpec is Count identical nodes named Name-0, Name-1, … (Name alone
// when Count is 1).
type NodeSpec struct {
	Name    string            `json:"name"`
	Count   int               `json:"count,omitempty"`   // default 1
	CPU     float64           `json:"cpu"`               // cores
	Memory  float64           `json:"memory"`            // GiB
	GPUs    []GPUSpec         `json:"gpus,omitempty"`    // device groups
	Network int64             `json:"network,omitempty"` // Mbps
	NVMe    int64             `json:"nvme,omitempty"`    // GiB
	SSD     int64             `json:"ssd,omitempty"`     // GiB
	HDD     int64             `json:"hdd,omitempty"`     // GiB
	NUMA    int               `json:"numa,omitempty"`    // domains splitting CPU and memory evenly
	Labels  map[string]string `json:"labels,omitempty"`
}

// GPUSpec is Count GPUs of one model; with MIG set, each is in MIG mode
// with one instance per listed profile (and is never handed out whole).
type GPUSpec struct {
	Model  string   `json:"model"`
	Count  int      `json:"count,omitempty"` // default 1
	Memory float64  `json:"memory"`          // GiB per GPU
	MIG    []string `json:"mig,omitempty"`   // MIG profiles, e.g. ["3g.40gb","2g.20gb","1g.10gb","1g.10gb"]
}

// AccountSpec is one node of the fair-share tree.
type AccountSpec struct {
	Name       string        `json:"name"`
	Parent     string        `json:"parent,omitempty"`
	Shares     float64       `json:"shares"`
	Quota      *ResourceSpec `json:"quota,omitempty"`
	Guaranteed *ResourceSpec `json:"guaranteed,omitempty"`
}

// ResourceSpec is an amount of resources in trace units.
type ResourceSpec struct {
	CPU       float64 `json:"cpu,omitempty"`        // cores
	Memory    float64 `json:"memory,omitempty"`     // GiB
	GPUs      int64   `json:"gpus,omitempty"`       // whole GPUs, or MIG instances when mig is set
	GPUMemory float64 `json:"gpu_memory,omitempty"` // GiB, total over the GPUs
	Network   int64   `json:"network,omitempty"`    // Mbps
	NVMe      int64   `json:"nvme,omitempty"`       // GiB
	SSD       int64   `json:"ssd,omitempty"`        // GiB
	HDD       int64   `json:"hdd,omitempty"`        // GiB
}

func (r ResourceSpec) resources() engine.Resources {
	var v engine.Resources
	v[engine.DimCPU] = int64(math.Round(r.CPU * 1000))
	v[engine.DimMemory] = int64(math.Round(r.Memory * 1024))
	v[engine.DimGPU] = r.GPUs
	v[engine.DimGPUMemory] = int64(math.Round(r.GPUMemory * 1024))
	v[engine.DimNetwork] = r.Network
	v[engine.DimNVMe] = r.NVMe
	v[engine.DimSSD] = r.SSD
	v[engine.DimHDD] = r.HDD
	return v
}

// JobSpec is one job of the trace (one gang, when Gang > 1).
type JobSpec struct {
	ID       string  `json:"id,omitempty"`       // default: "j" + index
	Arrival  float64 `json:"arrival,omitempty"`  // seconds
	Account  string  `json:"account,omitempty"`  // "" = the policy's default account
	Priority int     `json:"priority,omitempty"` // 0..9, 9 most urgent
	ResourceSpec
	GPUModel    string            `json:"gpu_model,omitempty"`
	MIG         string            `json:"mig,omitempty"` // MIG profile; gpus counts instances (default 1)
	StorageTier string            `json:"storage_tier,omitempty"`
	Selector    map[string]string `json:"selector,omitempty"`
	NUMA        bool              `json:"numa,omitempty"`
	Strategy    string            `json:"strategy,omitempty"`
	Gang        int               `json:"gang,omitempty"`     // members, each with the request; 0 or 1 = a single job
	Duration    float64           `json:"duration,omitempty"` // actual run time, seconds (> 0)
	// Estimate is the run time the engine is told: omitted = Duration,
	// 0 = unknown (the policy's default duration for planning).
	Estimate *float64 `json:"estimate,omitempty"`
	Deadline float64  `json:"deadline,omitempty"` // trace seconds; 0 = none
	// TimeLimit stops the job this many seconds after it starts if it is
	// still running (as the adapter does); 0 = none. The engine is told it
	// (engine.Job.TimeLimit) and backfill plans with it.
	TimeLimit float64 `json:"time_limit,omitempty"`
	// NonPreemptible jobs are never evicted.
	NonPreemptible bool `json:"non_preemptible,omitempty"`
	// PreemptMode is how the job is evicted (cancel, requeue, suspend,
	// checkpoint); "" = the trace's preemption default_mode. A job whose
	// mode is checkpoint saves its progress every checkpoint_interval.
	PreemptMode string `json:"preempt_mode,omitempty"`
}

// PreemptionSpec is engine.PreemptionConfig in trace units (seconds), plus
// the simulation's checkpointing. Zero fields take the engine defaults.
type PreemptionSpec struct {
	Policy               string             `json:"policy,omitempty"`      // off (default), priority, fair-share, deadline-aware, resource-based, cost-based, hybrid
	PoolPolicy           map[string]string  `json:"pool_policy,omitempty"` // per pool (policy.pool_label)
	MinRuntime           float64            `json:"min_runtime,omitempty"` // seconds; default 300; negative = none
	Cooldown             float64            `json:"cooldown,omitempty"`    // seconds; default 600; negative = none
	BudgetPerHour        int                `json:"budget_per_hour,omitempty"`
	AccountBudgetPerHour int                `json:"account_budget_per_hour,omitempty"`
	MinPreemptorLevel    int                `json:"min_preemptor_level,omitempty"` // only jobs of at least this level preempt; 0 = any
	MaxVictims           int                `json:"max_victims,omitempty"`
	Weights              map[string]float64 `json:"weights,omitempty"`      // hybrid: priority, fair_share, deadline, resource, cost (given = used, others 0)
	DefaultMode          string             `json:"default_mode,omitempty"` // requeue (default), cancel, suspend, checkpoint
	// CheckpointInterval is how often a job in checkpoint mode saves its
	// progress, seconds; default 60.
	CheckpointInterval float64 `json:"checkpoint_interval,omitempty"`
	// UrgentLevel is the lowest priority the report counts as urgent;
	// default 8 (CRITICAL).
	UrgentLevel int `json:"urgent_level,omitempty"`
}

// GenSpec generates jobs. With Backlog 0 it is an open workload: Count jobs
// arriving from Start as a Poisson process of Rate jobs per second (all at
// Start when Rate is 0), each for an account drawn by Mix. With Backlog > 0
// it is closed: every account starts with Backlog waiting jobs and submits a
// new one whenever one of its jobs starts, until Count jobs were generated
// or Until has passed; the new job joins the queue at once and is
// considered at the next cycle.
type GenSpec struct {
	Prefix   string    `json:"prefix,omitempty"` // job ID prefix; default "g<index>-"
	Seed     uint64    `json:"seed,omitempty"`   // 0 = derived from the trace seed
	Accounts []string  `json:"accounts"`
	Mix      []float64 `json:"mix,omitempty"` // relative arrival weights of Accounts; default equal
	Count    int       `json:"count"`
	Start    float64   `json:"start,omitempty"`
	Until    float64   `json:"until,omitempty"` // no arrivals after this time; 0 = none
	Rate     float64   `json:"rate,omitempty"`  // jobs per second, all accounts together
	Backlog  int       `json:"backlog,omitempty"`
	Priority *Range    `json:"priority,omitempty"` // integer, uniform; default 4
	Duration Dist      `json:"duration"`
	Estimate *Range    `json:"estimate,omitempty"` // estimate = actual × uniform(lo, hi); default 1
	// NoEstimate is the fraction of jobs submitted with an unknown duration.
	NoEstimate float64      `json:"no_estimate,omitempty"`
	Deadline   *DeadlineGen `json:"deadline,omitempty"`
	// TimeLimit gives every job a time limit of its estimate (its actual
	// duration when the estimate is unknown) × uniform(lo, hi); none when
	// omitted.
	TimeLimit *Range `json:"time_limit,omitempty"`
	// Shapes are the job shapes (resources, GPU model, MIG profile, gang,
	// selector …; ID, arrival, account, duration and deadline are ignored),
	// drawn by Weight.
	Shapes []ShapeSpec `json:"shapes"`
}

// ShapeSpec is one job shape of a generator.
type ShapeSpec struct {
	Weight float64 `json:"weight,omitempty"` // default 1
	JobSpec
}

// DeadlineGen gives a Fraction of the generated jobs a deadline at
// arrival + duration × uniform(Slack[0], Slack[1]).
type DeadlineGen struct {
	Fraction float64 `json:"fraction"`
	Slack    Range   `json:"slack"`
}

// Dist is a duration distribution in seconds: "fixed" (Mean), "uniform"
// (Min..Max), "exp" (mean Mean, clamped to Min..Max when given) or
// "lognormal" (median Mean, shape Sigma, clamped likewise).
type Dist struct {
	Dist  string  `json:"dist,omitempty"` // default fixed
	Mean  float64 `json:"mean,omitempty"`
	Min   float64 `json:"min,omitempty"`
	Max   float64 `json:"max,omitempty"`
	Sigma float64 `json:"sigma,omitempty"`
}

// Range is a number or a [lo, hi] pair.
type Range struct{ Lo, Hi float64 }

// UnmarshalJSON accepts 4 or [3, 5].
func (r *Range) UnmarshalJSON(data []byte) error {
	var x float64
	if err := json.Unmarshal(data, &x); err == nil {
		*r = Range{x, x}
		return nil
	}
	var p []float64
	if err := json.Unmarshal(data, &p); err != nil || len(p) != 2 || p[0] > p[1] {
		return fmt.Errorf("want a number or [lo, hi], got %s", data)
	}
	*r = Range{p[0], p[1]}
	return nil
}

// MarshalJSON writes a number when Lo == Hi.
func (r Range) MarshalJSON() ([]byte, error) {
	if r.Lo == r.Hi {
		return json.Marshal(r.Lo)
	}
	return json.Marshal([]float64{r.Lo, r.Hi})
}

// Load reads a JSON trace file.
func Load(path string) (*Trace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tr, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr.dir = filepath.Dir(path)
	if tr.JobsCSV != "" {
		p := tr.JobsCSV
		if !filepath.IsAbs(p) {
			p = filepath.Join(tr.dir, p)
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		jobs, err := ReadJobsCSV(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		tr.Jobs = append(tr.Jobs, jobs...)
		tr.JobsCSV = ""
	}
	if tr.Name == "" {
		tr.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return tr, tr.Validate()
}

// Parse decodes a JSON trace; unknown fields are an error. It does not
// read JobsCSV (Load does).
func Parse(data []byte) (*Trace, error) {
	var tr Trace
	if err := strictUnmarshal(data, &tr); err != nil {
		return nil, err
	}
	return &tr, nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// ReadJobsCSV reads jobs from CSV whose header names JobSpec fields:
// id, arrival, account, priority, cpu, memory, gpus, gpu_memory, network,
// nvme, ssd, hdd, gpu_model, mig, storage_tier, selector (k=v;k=v), numa,
// strategy, gang, duration, estimate (empty = duration), deadline,
// time_limit, non_preemptible, preempt_mode.
func ReadJobsCSV(r io.Reader) ([]JobSpec, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("csv header: %w", err)
	}
	for i := range head {
		head[i] = strings.ToLower(strings.TrimSpace(head[i]))
	}
	var jobs []JobSpec
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return jobs, nil
		}
		if err != nil {
			return nil, err
		}
		var j JobSpec
		for i, v := range rec {
			v = strings.TrimSpace(v)
			if v == "" || i >= len(head) {
				continue
			}
			if err := setCSVField(&j, head[i], v); err != nil {
				return nil, fmt.Errorf("line %d, %s: %w", line, head[i], err)
			}
		}
		jobs = append(jobs, j)
	}
}

func setCSVField(j *JobSpec, name, v string) error {
	f := func() (float64, error) { return strconv.ParseFloat(v, 64) }
	i := func() (int64, error) { return strconv.ParseInt(v, 10, 64) }
	var err error
	switch name {
	case "id":
		j.ID = v
	case "arrival":
		j.Arrival, err = f()
	case "account":
		j.Account = v
	case "priority":
		var n int64
		n, err = i()
		j.Priority = int(n)
	case "cpu":
		j.CPU, err = f()
	case "memory":
		j.Memory, err = f()
	case "gpus":
		j.GPUs, err = i()
	case "gpu_memory":
		j.GPUMemory, err = f()
	case "network":
		j.Network, err = i()
	case "nvme":
		j.NVMe, err = i()
	case "ssd":
		j.SSD, err = i()
	case "hdd":
		j.HDD, err = i()
	case "gpu_model":
		j.GPUModel = v
	case "mig":
		j.MIG = v
	case "storage_tier":
		j.StorageTier = v
	case "selector":
		j.Selector = map[string]string{}
		for _, kv := range strings.Split(v, ";") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("selector %q: want k=v;k=v", v)
			}
			j.Selector[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
	case "numa":
		j.NUMA, err = strconv.ParseBool(v)
	case "strategy":
		j.Strategy = v
	case "gang":
		var n int64
		n, err = i()
		j.Gang = int(n)
	case "duration":
		j.Duration, err = f()
	case "estimate":
		var e float64
		e, err = f()
		j.Estimate = &e
	case "deadline":
		j.Deadline, err = f()
	case "time_limit":
		j.TimeLimit, err = f()
	case "non_preemptible":
		j.NonPreemptible, err = strconv.ParseBool(v)
	case "preempt_mode":
		j.PreemptMode = v
	default:
		return fmt.Errorf("unknown column")
	}
	return err
}

var selections = []engine.Selection{engine.SelectPriority, engine.SelectProportional, engine.SelectLottery, engine.SelectWFQ, engine.SelectDRR, engine.SelectDRF}

// FairShareAlgorithms are the selection algorithms that interleave accounts
// by share.
var FairShareAlgorithms = []string{"proportional", "lottery", "wfq", "drr", "drf"}

func validSelection(s string) bool {
	return s == "" || slices.Contains(selections, engine.Selection(s))
}

func validStrategy(s string) bool {
	switch engine.Strategy(s) {
	case "", engine.BestFit, engine.FirstFit, engine.WorstFit, engine.Balanced, engine.MostAllocated, engine.Cheapest:
		return true
	}
	return false
}

// Validate checks the trace for mistakes the engine would silently accept
// or that would make the simulation meaningless.
func (tr *Trace) Validate() error {
	if len(tr.Nodes) == 0 {
		return errors.New("trace: no nodes")
	}
	if err := tr.Policy.validate(); err != nil {
		return fmt.Errorf("trace: policy: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(tr.Variants)) {
		if validSelection(name) {
			return fmt.Errorf("trace: variant %q shadows a selection algorithm", name)
		}
		if _, err := tr.policyFor(name); err != nil {
			return err
		}
	}
	if err := tr.Preemption.validate(); err != nil {
		return fmt.Errorf("trace: preemption: %w", err)
	}
	if tr.Cycle.Interval < 0 || (tr.Cycle.OnEvents != nil && !*tr.Cycle.OnEvents && tr.Cycle.Interval == 0) {
		return errors.New("trace: cycle: on_events false needs an interval > 0")
	}
	switch tr.Measure {
	case "", "auto", MeasureBilling, MeasureDominant:
	default:
		return fmt.Errorf("trace: measure %q: want billing, dominant or auto", tr.Measure)
	}
	names := map[string]bool{}
	for i, n := range tr.Nodes {
		if n.Name == "" {
			return fmt.Errorf("trace: node %d: no name", i)
		}
		if names[n.Name] {
			return fmt.Errorf("trace: node %q listed twice", n.Name)
		}
		names[n.Name] = true
		if n.Count < 0 {
			return fmt.Errorf("trace: node %q: negative count", n.Name)
		}
		for _, g := range n.GPUs {
			if g.Count < 0 || g.Memory < 0 {
				return fmt.Errorf("trace: node %q: bad gpu group", n.Name)
			}
		}
	}
	acc := map[string]bool{}
	for _, a := range tr.Accounts {
		if a.Name == "" || acc[a.Name] {
			return fmt.Errorf("trace: account %q: empty or listed twice", a.Name)
		}
		if a.Shares < 0 {
			return fmt.Errorf("trace: account %q: negative shares", a.Name)
		}
		acc[a.Name] = true
	}
	ids := map[string]bool{}
	for i := range tr.Jobs {
		j := &tr.Jobs[i]
		id := j.ID
		if id == "" {
			id = fmt.Sprintf("j%d", i)
		}
		if ids[id] {
			return fmt.Errorf("trace: job %q listed twice", id)
		}
		ids[id] = true
		if err := j.validate(); err != nil {
			return fmt.Errorf("trace: job %s: %w", id, err)
		}
	}
	for i := range tr.Generate {
		if err := tr.Generate[i].validate(); err != nil {
			return fmt.Errorf("trace: generate[%d]: %w", i, err)
		}
	}
	if len(tr.Jobs) == 0 && len(tr.Generate) == 0 {
		return errors.New("trace: no jobs")
	}
	return nil
}

func (j *JobSpec) validate() error {
	if j.Duration <= 0 {
		return errors.New("duration must be > 0")
	}
	if j.Arrival < 0 {
		return errors.New("negative arrival")
	}
	if j.Estimate != nil && *j.Estimate < 0 {
		return errors.New("negative estimate")
	}
	if j.TimeLimit < 0 {
		return errors.New("negative time limit")
	}
	return j.validateShape()
}

func (j *JobSpec) validateShape() error {
	if j.Priority < 0 || j.Priority > 9 {
		return fmt.Errorf("priority %d outside 0..9", j.Priority)
	}
	if j.Gang < 0 {
		return errors.New("negative gang")
	}
	if !validStrategy(j.Strategy) {
		return fmt.Errorf("unknown strategy %q", j.Strategy)
	}
	if !validMode(j.PreemptMode) {
		return fmt.Errorf("unknown preempt_mode %q", j.PreemptMode)
	}
	if j.StorageTier != "" {
		if _, ok := engine.TierDim(j.StorageTier); !ok {
			return fmt.Errorf("unknown storage tier %q", j.StorageTier)
		}
	}
	return nil
}

func (g *GenSpec) validate() error {
	if len(g.Accounts) == 0 {
		return errors.New("no accounts")
	}
	if len(g.Mix) != 0 && len(g.Mix) != len(g.Accounts) {
		return errors.New("mix must have one weight per account")
	}
	if g.Count <= 0 {
		return errors.New("count must be > 0")
	}
	if g.Rate < 0 || g.Backlog < 0 {
		return errors.New("negative rate or backlog")
	}
	if len(g.Shapes) == 0 {
		return errors.New("no shapes")
	}
	for k := range g.Shapes {
		if err := g.Shapes[k].validateShape(); err != nil {
			return fmt.Errorf("shape %d: %w", k, err)
		}
	}
	if g.Priority != nil && (g.Priority.Lo < 0 || g.Priority.Hi > 9) {
		return errors.New("priority outside 0..9")
	}
	switch g.Duration.Dist {
	case "", "fixed", "exp", "lognormal":
		if g.Duration.Mean <= 0 {
			return errors.New("duration: mean must be > 0")
		}
	case "uniform":
		if g.Duration.Min <= 0 || g.Duration.Max < g.Duration.Min {
			return errors.New("duration: want 0 < min ≤ max")
		}
	default:
		return fmt.Errorf("duration: unknown dist %q", g.Duration.Dist)
	}
	if g.TimeLimit != nil && g.TimeLimit.Lo <= 0 {
		return errors.New("time limit factor must be > 0")
	}
	if g.Estimate != nil && g.Estimate.Lo < 0 {
		return errors.New("negative estimate factor")
	}
	if g.Deadline != nil && (g.Deadline.Fraction < 0 || g.Deadline.Fraction > 1 || g.Deadline.Slack.Lo <= 0) {
		return errors.New("deadline: want 0 ≤ fraction ≤ 1 and slack > 0")
	}
	return nil
}

func (p *PolicySpec) validate() error {
	if !validSelection(p.Selection) {
		return fmt.Errorf("unknown selection %q", p.Selection)
	}
	if !validStrategy(p.Strategy) {
		return fmt.Errorf("unknown strategy %q", p.Strategy)
	}
	for pool, s := range p.PoolStrategy {
		if !validStrategy(s) || s == "" {
			return fmt.Errorf("pool %q: unknown strategy %q", pool, s)
		}
	}
	switch engine.FairShareMode(p.FairShareMode) {
	case "", engine.FairShareClassic, engine.FairShareEffectivePriority:
	default:
		return fmt.Errorf("unknown fair_share_mode %q", p.FairShareMode)
	}
	switch engine.DeadlineAction(p.DeadlineAction) {
	case "", engine.DeadlineRun, engine.DeadlineReject:
	default:
		return fmt.Errorf("unknown deadline_action %q", p.DeadlineAction)
	}
	switch engine.DeadlineOrder(p.DeadlineOrder) {
	case "", engine.LeastSlackFirst, engine.EarliestDeadlineFirst:
	default:
		return fmt.Errorf("unknown deadline_order %q", p.DeadlineOrder)
	}
	for k := range p.Billing {
		if dimIndex(k) < 0 {
			return fmt.Errorf("billing: unknown dimension %q", k)
		}
	}
	return nil
}

func dimIndex(name string) engine.Dim {
	for d := range engine.NumDims {
		if d.String() == name {
			return d
		}
	}
	return -1
}

// dimUnit is the number of engine units in one trace unit of a dimension.
func dimUnit(d engine.Dim) float64 {
	switch d {
	case engine.DimCPU:
		return 1000
	case engine.DimMemory, engine.DimGPUMemory:
		return 1024
	}
	return 1
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// engine converts the spec to an engine.Policy.
func (p *PolicySpec) engine() engine.Policy {
	ep := engine.Policy{
		MaxAge:          p.MaxAge,
		NoAging:         p.NoAging,
		Band:            p.Band,
		DeadlineHorizon: secs(p.DeadlineHorizon),
		DeadlineAction:  engine.DeadlineAction(p.DeadlineAction),
		DeadlineOrder:   engine.DeadlineOrder(p.DeadlineOrder),
		FairShareMode:   engine.FairShareMode(p.FairShareMode),
		HalfLife:        secs(p.HalfLife),
		MIGSlices:       p.MIGSlices,
		Selection:       engine.Selection(p.Selection),
		Quantum:         p.Quantum,
		DefaultShares:   p.DefaultShares,
		ShareCap:        p.ShareCap,
		Strategy:        engine.Strategy(p.Strategy),
		PoolLabel:       p.PoolLabel,
		NoBackfill:      p.NoBackfill,
		DefaultDuration: secs(p.DefaultDuration),
	}
	if w := p.Weights; w != nil {
		ep.Weights = engine.Weights{Level: w.Level, Age: w.Age, FairShare: w.FairShare, Deadline: w.Deadline}
	}
	for k, v := range p.Billing {
		d := dimIndex(k)
		ep.Billing[d] = v / dimUnit(d)
	}
	if len(p.PoolStrategy) > 0 {
		ep.PoolStrategy = map[string]engine.Strategy{}
		for k, v := range p.PoolStrategy {
			ep.PoolStrategy[k] = engine.Strategy(v)
		}
	}
	return ep
}

// policyFor returns the policy spec for a --policy name: "" = the trace's
// own, a selection algorithm name = the trace's with that selection, else a
// variant (an overlay on the trace's policy).
func (tr *Trace) policyFor(name string) (PolicySpec, error) {
	p := tr.Policy.clone()
	switch {
	case name == "":
	case validSelection(name):
		p.Selection = name
	default:
		raw, ok := tr.Variants[name]
		if !ok {
			return p, fmt.Errorf("unknown policy %q: want one of %s%s", name, selectionNames(), variantList(tr))
		}
		if err := strictUnmarshal(raw, &p); err != nil {
			return p, fmt.Errorf("trace: variant %q: %w", name, err)
		}
		if err := p.validate(); err != nil {
			return p, fmt.Errorf("trace: variant %q: %w", name, err)
		}
	}
	return p, nil
}

func (p PolicySpec) clone() PolicySpec {
	if p.Weights != nil {
		w := *p.Weights
		p.Weights = &w
	}
	if p.Billing != nil {
		b := make(map[string]float64, len(p.Billing))
		for k, v := range p.Billing {
			b[k] = v
		}
		p.Billing = b
	}
	if p.PoolStrategy != nil {
		m := make(map[string]string, len(p.PoolStrategy))
		for k, v := range p.PoolStrategy {
			m[k] = v
		}
		p.PoolStrategy = m
	}
	return p
}

func selectionNames() string {
	s := make([]string, len(selections))
	for i, x := range selections {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

func variantList(tr *Trace) string {
	if len(tr.Variants) == 0 {
		return ""
	}
	return " or a trace variant (" + strings.Join(slices.Sorted(maps.Keys(tr.Variants)), ", ") + ")"
}

// PolicyNames returns the names "all" stands for in a comparison: every
// selection algorithm, then the trace's variants in name order.
func (tr *Trace) PolicyNames() []string {
	out := make([]string, 0, len(selections)+len(tr.Variants))
	for _, s := range selections {
		out = append(out, string(s))
	}
	return append(out, slices.Sorted(maps.Keys(tr.Variants))...)
}
