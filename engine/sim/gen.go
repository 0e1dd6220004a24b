package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// generator draws the jobs of one GenSpec from its own seeded source. The
// draws for one job are always made in the same order (shape, priority,
// duration, estimate, deadline), so a trace and seed give the same jobs.
type generator struct {
	spec   *GenSpec
	prefix string
	rng    *rand.Rand
	n      int // jobs generated so far
	shapeW []float64
	mixW   []float64
}

func newGenerator(tr *Trace, i int) *generator {
	g := &tr.Generate[i]
	seed := g.Seed
	if seed == 0 {
		seed = splitmix(tr.Seed ^ (0x67656e0000 + uint64(i)))
	}
	gen := &generator{spec: g, prefix: g.Prefix, rng: rand.New(rand.NewPCG(seed, 0x73696d756c61746f))}
	if gen.prefix == "" {
		gen.prefix = fmt.Sprintf("g%d-", i)
	}
	for _, s := range g.Shapes {
		w := s.Weight
		if w <= 0 {
			w = 1
		}
		gen.shapeW = append(gen.shapeW, w)
	}
	for k := range g.Accounts {
		w := 1.0
		if len(g.Mix) > 0 {
			w = max(g.Mix[k], 0)
		}
		gen.mixW = append(gen.mixW, w)
	}
	return gen
}

func (g *generator) closed() bool { return g.spec.Backlog > 0 }

// more reports whether the generator may still submit a job at time t.
func (g *generator) more(t float64) bool {
	return g.n < g.spec.Count && (g.spec.Until == 0 || t <= g.spec.Until)
}

// open returns every job of an open workload.
func (g *generator) open() []JobSpec {
	var out []JobSpec
	t := g.spec.Start
	for g.n < g.spec.Count {
		if g.spec.Rate > 0 && g.n > 0 {
			t += g.rng.ExpFloat64() / g.spec.Rate
		}
		if g.spec.Until > 0 && t > g.spec.Until {
			break
		}
		acct := g.spec.Accounts[pickWeighted(g.rng, g.mixW)]
		out = append(out, g.job(t, acct))
	}
	return out
}

// initial returns the starting backlog of a closed workload, account by
// account in list order.
func (g *generator) initial() []JobSpec {
	var out []JobSpec
	for _, a := range g.spec.Accounts {
		for range g.spec.Backlog {
			if !g.more(g.spec.Start) {
				return out
			}
			out = append(out, g.job(g.spec.Start, a))
		}
	}
	return out
}

// job draws one job arriving at t for account.
func (g *generator) job(t float64, account string) JobSpec {
	sp := g.spec
	shape := sp.Shapes[pickWeighted(g.rng, g.shapeW)].JobSpec
	j := shape
	j.ID = fmt.Sprintf("%s%06d", g.prefix, g.n)
	g.n++
	j.Arrival = t
	j.Account = account
	j.Priority = 4
	if sp.Priority != nil {
		lo, hi := int(math.Round(sp.Priority.Lo)), int(math.Round(sp.Priority.Hi))
		j.Priority = lo + g.rng.IntN(hi-lo+1)
	}
	j.Duration = g.duration()
	f := 1.0
	if sp.Estimate != nil {
		f = sp.Estimate.Lo + g.rng.Float64()*(sp.Estimate.Hi-sp.Estimate.Lo)
	}
	est := j.Duration * f
	if sp.NoEstimate > 0 && g.rng.Float64() < sp.NoEstimate {
		est = 0
	}
	j.Estimate = &est
	j.Deadline = 0
	if d := sp.Deadline; d != nil && g.rng.Float64() < d.Fraction {
		slack := d.Slack.Lo + g.rng.Float64()*(d.Slack.Hi-d.Slack.Lo)
		j.Deadline = t + j.Duration*slack
	}
	j.TimeLimit = 0
	if r := sp.TimeLimit; r != nil {
		base := est
		if base == 0 {
			base = j.Duration
		}
		j.TimeLimit = base * (r.Lo + g.rng.Float64()*(r.Hi-r.Lo))
	}
	return j
}

func (g *generator) duration() float64 {
	d := g.spec.Duration
	var x float64
	switch d.Dist {
	case "", "fixed":
		return d.Mean
	case "uniform":
		return d.Min + g.rng.Float64()*(d.Max-d.Min)
	case "exp":
		x = d.Mean * g.rng.ExpFloat64()
	case "lognormal":
		x = d.Mean * math.Exp(d.Sigma*g.rng.NormFloat64())
	}
	if d.Min > 0 {
		x = max(x, d.Min)
	}
	if d.Max > 0 {
		x = min(x, d.Max)
	}
	return max(x, 1e-3)
}

func pickWeighted(rng *rand.Rand, w []float64) int {
	if len(w) == 1 {
		return 0
	}
	total := 0.0
	for _, x := range w {
		total += x
	}
	x := rng.Float64() * total
	for i, v := range w {
		x -= v
		if x < 0 {
			return i
		}
	}
	return len(w) - 1
}

// splitmix is SplitMix64's finalizer: a good 64-bit mix of a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
