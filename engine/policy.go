package engine

import (
	"strconv"
	"strings"
	"time"
)

// DefaultHalfLife reproduces the original's decay of 0.9 per hour:
// 0.9^h = 2^(−h/H) ⇔ H = ln 2 / −ln 0.9 hours ≈ 6 h 34 m 44 s (6.579 h).
const DefaultHalfLife = 23683728524258 * time.Nanosecond

// defaultBilling prices one second of each resource unit: a core 1, a GiB of
// memory 0.25, a GPU 8; GPU memory, network and storage are free. A MIG
// instance costs its compute slices / Policy.MIGSlices of a GPU.
func defaultBilling() [NumDims]float64 {
	return [NumDims]float64{DimCPU: 1.0 / 1000, DimMemory: 0.25 / 1024, DimGPU: 8}
}

// defaultWeights are the priority formula's default coefficients.
func defaultWeights() Weights { return Weights{Level: 1, Age: 0.5, FairShare: 2, Deadline: 1} }

// DefaultPolicy returns the policy a zero Policy stands for.
func DefaultPolicy() Policy { return Policy{}.withDefaults() }

func (p Policy) withDefaults() Policy {
	if p.Weights == (Weights{}) {
		p.Weights = defaultWeights()
	}
	if p.MaxAge == 0 {
		p.MaxAge = -1 // no cap: the starvation bound (queue.go) needs ageing to keep growing
	}
	if p.Band <= 0 {
		p.Band = 1
	}
	if p.DeadlineHorizon <= 0 {
		p.DeadlineHorizon = time.Hour
	}
	if p.DeadlineAction == "" {
		p.DeadlineAction = DeadlineRun
	}
	if p.DeadlineOrder != EarliestDeadlineFirst {
		p.DeadlineOrder = LeastSlackFirst
	}
	if p.FairShareMode == "" {
		p.FairShareMode = FairShareClassic
	}
	if p.HalfLife <= 0 {
		p.HalfLife = DefaultHalfLife
	}
	if p.Billing == ([NumDims]float64{}) {
		p.Billing = defaultBilling()
	}
	if p.MIGSlices <= 0 {
		p.MIGSlices = 7
	}
	if p.Selection == "" {
		p.Selection = SelectPriority
	}
	if p.Quantum <= 0 {
		p.Quantum = 3600
	}
	if p.DefaultShares <= 0 {
		p.DefaultShares = 1
	}
	if p.DefaultAccount == "" {
		p.DefaultAccount = "default"
	}
	if p.Strategy == "" {
		p.Strategy = BestFit
	}
	if p.PoolLabel == "" {
		p.PoolLabel = "pool"
	}
	if p.DefaultDuration <= 0 {
		p.DefaultDuration = time.Hour
	}
	if p.MaxEstimates == 0 {
		p.MaxEstimates = 1024
	}
	return p
}

// strategyFor returns the strategy of a job: its own, else its pool's, else
// the policy's.
func (p *Policy) strategyFor(j *Job) Strategy {
	if validStrategy(j.Strategy) {
		return j.Strategy
	}
	if pool, ok := j.NodeSelector[p.PoolLabel]; ok {
		if s, ok := p.PoolStrategy[pool]; ok && validStrategy(s) {
			return s
		}
	}
	if validStrategy(p.Strategy) {
		return p.Strategy
	}
	return BestFit
}

func validStrategy(s Strategy) bool {
	switch s {
	case BestFit, FirstFit, WorstFit, Balanced, MostAllocated, Cheapest:
		return true
	}
	return false
}

// MIGSlices parses the compute slices of a MIG profile ("3g.40gb" → 3); 1
// when the profile has no such prefix. Billing prices a MIG instance at
// MIGSlices/Policy.MIGSlices of a GPU.
func MIGSlices(profile string) int {
	g, _, ok := strings.Cut(profile, "g.")
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(g)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// billingRate is a job's price per second of running, in billing units.
func (p *Policy) billingRate(r *jobReq) float64 {
	rate := 0.0
	for d := range NumDims {
		rate += p.Billing[d] * float64(r.vec[d])
	}
	if r.nMIG > 0 {
		rate += float64(r.nMIG) * float64(MIGSlices(r.mig)) / float64(p.MIGSlices) * p.Billing[DimGPU]
	}
	return rate
}

// duration is the planning duration of a job: its estimate, else
// DefaultDuration (usage cost, the proportional key).
func (p *Policy) duration(j *Job) time.Duration {
	if j.EstDuration > 0 {
		return j.EstDuration
	}
	return p.DefaultDuration
}

// expected is how long a job is expected to run: its planning duration,
// but no longer than its time limit (it is stopped then). Estimated starts
// of jobs other than the reserved one use it.
func (p *Policy) expected(j *Job) time.Duration {
	if j.TimeLimit > 0 {
		return min(j.TimeLimit, p.duration(j))
	}
	return p.duration(j)
}

// latest is how long backfill plans a job to run: its time limit when it
// has one (the latest it can end, estimate or not, as Slurm's backfill),
// else its planning duration. Reservations and the "ends before the
// reservation" test of backfill use it.
func (p *Policy) latest(j *Job) time.Duration {
	if j.TimeLimit > 0 {
		return j.TimeLimit
	}
	return p.duration(j)
}
