package engine_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of engine/testdata/*.txt")

// TestScenarios runs the scripts in testdata/*.txt. A script is a list of
// commands, one per line; '#' starts a comment. Setup commands:
//
//	policy   key=value…            (selection, strategy, fairshare, deadline, order (deadline order), backfill=off, sharecap, quantum, maxage, aging=off, weights=L/A/F/D, halflife, pool.<name>=<strategy>;
//	                                preemption: preempt=<policy>, preempt.pool.<name>=<policy>, preempt.minrun, preempt.cooldown, preempt.budget, preempt.acctbudget, preempt.maxvictims, preempt.mode, preempt.weights=P/F/D/R/C)
//	account  <name> shares=N parent=P quota=<res> guaranteed=<res>
//	node     <name> cpu=8 mem=32 gpus=<model>x<n>:<GiB> mig=<model>:<GiB>:<p1>+<p2> nvme=… ssd=… hdd=… net=… numa=N label=k=v unhealthy alloc=<res> cost=C price=<core-hour>/<GiB-hour>/<GPU-hour>
//	job      <id> account=a prio=N cpu=… mem=… gpu=N gpumem=GiB model=M mig=<profile>[xN] tier=<t>:<GiB> net=… sel=k=v numa strategy=S gang=<id>/<size> est=1h limit=2h submitted=-10m deadline=+2h nopreempt mode=<eviction mode> modes=<m1>+<m2>
//	running  <id> node=N started=-30m ckpt=-5m (plus job keys)
//	advance  <duration>            move Now forward
//	apply                          apply the last plan: evictions (running → stopped; requeued unless cancelled), then placements (pending → running, node allocations updated)
//	finish   <id>                  end a running job now (frees its node, charges its usage once)
//	forget                         drop the engine State (usage, tags, deficits)
//	reset                          start over: no nodes, jobs, accounts, policy or state
//	schedule [seed=N] [explain] [state]
//
// schedule prints the plan and is followed by "----" and the expected output,
// ending at a blank line. go test ./engine -run Scenarios -rewrite refreshes
// the expected output.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScenario(t, f)
		})
	}
}

type scenario struct {
	ckpt  time.Time // the last parsed job's checkpoint (running only)
	t     *testing.T
	snap  engine.Snapshot
	state engine.State
	plan  engine.Plan
}

func runScenario(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	sc := &scenario{t: t, snap: engine.Snapshot{Now: et.Epoch, Seed: 1}}
	var out []string // the rewritten file
	for k := 0; k < len(lines); k++ {
		line := lines[k]
		out = append(out, line)
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		cmd, args := fields[0], fields[1:]
		if cmd != "schedule" {
			if err := sc.setup(cmd, args); err != nil {
				t.Fatalf("%s:%d: %v", path, k+1, err)
			}
			continue
		}
		got := sc.schedule(args)
		// Expected block: "----" then lines up to a blank line.
		var want []string
		if k+1 < len(lines) && lines[k+1] == "----" {
			k++
			for k+1 < len(lines) && lines[k+1] != "" {
				k++
				want = append(want, lines[k])
			}
		}
		out = append(out, "----")
		out = append(out, got...)
		if !*rewrite && !slices.Equal(got, want) {
			t.Errorf("%s:%d: schedule output differs (-want +got):\n%s", path, k+1, lineDiff(want, got))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func lineDiff(want, got []string) string {
	var b strings.Builder
	for i := 0; i < max(len(want), len(got)); i++ {
		w, g := "", ""
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			fmt.Fprintf(&b, "-%s\n+%s\n", w, g)
		} else {
			fmt.Fprintf(&b, " %s\n", w)
		}
	}
	return b.String()
}

func (sc *scenario) setup(cmd string, args []string) error {
	switch cmd {
	case "policy":
		return sc.policy(args)
	case "account":
		a := engine.Account{Name: args[0], Shares: 1}
		for _, kv := range args[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "shares":
				a.Shares, err = strconv.ParseFloat(v, 64)
			case "parent":
				a.Parent = v
			case "quota":
				a.Quota, err = parseRes(v)
			case "guaranteed":
				a.Guaranteed, err = parseRes(v)
			default:
				err = fmt.Errorf("account: unknown key %q", k)
			}
			if err != nil {
				return err
			}
		}
		sc.snap.Accounts = append(sc.snap.Accounts, a)
	case "node":
		n, err := parseNode(args)
		if err != nil {
			return err
		}
		sc.snap.Nodes = append(sc.snap.Nodes, n)
	case "job":
		j, _, err := sc.parseJob(args)
		if err != nil {
			return err
		}
		sc.snap.Pending = append(sc.snap.Pending, j)
	case "running":
		j, node, err := sc.parseJob(args)
		if err != nil {
			return err
		}
		r := engine.Running{Job: j, Node: node, Started: j.Submitted, LastCheckpoint: sc.ckpt}
		sc.ckpt = time.Time{}
		return sc.start(r)
	case "advance":
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return err
		}
		sc.snap.Now = sc.snap.Now.Add(d)
	case "apply":
		for _, ev := range sc.plan.Evictions {
			var job engine.Job
			for _, r := range sc.snap.Running {
				if r.ID == ev.JobID && r.Ended.IsZero() {
					job = r.Job
				}
			}
			if err := sc.finish(ev.JobID); err != nil {
				return err
			}
			if ev.Mode != engine.ModeCancel {
				sc.snap.Pending = append(sc.snap.Pending, job)
			}
		}
		byID := map[string]engine.Job{}
		for _, j := range sc.snap.Pending {
			byID[j.ID] = j
		}
		for _, p := range sc.plan.Placements {
			r := engine.Running{Job: byID[p.JobID], Node: p.Node, Started: sc.snap.Now, GPUs: p.GPUs, MIG: p.MIG}
			if err := sc.start(r); err != nil {
				return err
			}
			sc.snap.Pending = slices.DeleteFunc(sc.snap.Pending, func(j engine.Job) bool { return j.ID == p.JobID })
		}
		// Drop final rejections: the adapter would fail those requests.
		for _, r := range sc.plan.Rejected {
			if r.Final {
				sc.snap.Pending = slices.DeleteFunc(sc.snap.Pending, func(j engine.Job) bool { return j.ID == r.JobID })
			}
		}
	case "finish":
		return sc.finish(args[0])
	case "forget":
		sc.state = engine.State{}
	case "reset":
		sc.snap = engine.Snapshot{Now: et.Epoch, Seed: 1}
		sc.state = engine.State{}
		sc.plan = engine.Plan{}
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

func (sc *scenario) node(name string) *engine.Node {
	for i := range sc.snap.Nodes {
		if sc.snap.Nodes[i].Name == name {
			return &sc.snap.Nodes[i]
		}
	}
	return nil
}

// start records a running job and updates its node's allocation.
func (sc *scenario) start(r engine.Running) error {
	n := sc.node(r.Node)
	if n == nil {
		return fmt.Errorf("running %s: no node %q", r.ID, r.Node)
	}
	n.Allocated = n.Allocated.Add(vecOf(&r.Job))
	setGPUs(n, r.GPUs, r.MIG, true)
	// Drop the entry of a job that ended, so State charges stay exact.
	sc.snap.Running = slices.DeleteFunc(sc.snap.Running, func(x engine.Running) bool { return !x.Ended.IsZero() })
	sc.snap.Running = append(sc.snap.Running, r)
	return nil
}

func (sc *scenario) finish(id string) error {
	for i := range sc.snap.Running {
		r := &sc.snap.Running[i]
		if r.ID != id || !r.Ended.IsZero() {
			continue
		}
		n := sc.node(r.Node)
		n.Allocated = n.Allocated.Sub(vecOf(&r.Job))
		setGPUs(n, r.GPUs, r.MIG, false)
		r.Ended = sc.snap.Now
		return nil
	}
	return fmt.Errorf("finish: %s is not running", id)
}

// vecOf is the vector a job holds on its node (MIG jobs hold no GPU count).
func vecOf(j *engine.Job) engine.Resources {
	v := j.Request
	if j.MIGProfile != "" {
		v[engine.DimGPU], v[engine.DimGPUMemory] = 0, 0
	}
	return v
}

func setGPUs(n *engine.Node, gpus, mig []string, inUse bool) {
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if slices.Contains(gpus, g.ID) {
			g.InUse = inUse
		}
		for k := range g.MIG {
			if slices.Contains(mig, g.MIG[k].ID) {
				g.MIG[k].InUse = inUse
			}
		}
	}
}

func (sc *scenario) schedule(args []string) []string {
	explain, showState := false, false
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "seed":
			s, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				sc.t.Fatal(err)
			}
			sc.snap.Seed = s
		case "explain":
			explain = true
		case "state":
			showState = true
		default:
			sc.t.Fatalf("schedule: unknown argument %q", a)
		}
	}
	plan, st := engine.Schedule(sc.state, sc.snap)
	// Purity: same input, same plan.
	if again, _ := engine.Schedule(sc.state, sc.snap); !samePlan(plan, again) {
		sc.t.Errorf("schedule is not deterministic")
	}
	sc.plan, sc.state = plan, st
	return formatPlan(plan, st, sc.snap.Now, explain, showState)
}

func rel(t, now time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := t.Sub(now)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

func formatPlan(p engine.Plan, st engine.State, now time.Time, explain, showState bool) []string {
	var out []string
	for _, pl := range p.Placements {
		s := fmt.Sprintf("place %s -> %s", pl.JobID, pl.Node)
		if len(pl.GPUs) > 0 {
			s += " gpus=" + strings.Join(pl.GPUs, ",")
		}
		if len(pl.MIG) > 0 {
			s += " mig=" + strings.Join(pl.MIG, ",")
		}
		if pl.NUMA >= 0 {
			s += fmt.Sprintf(" numa=%d", pl.NUMA)
		}
		if pl.Backfilled {
			s += " backfilled"
		}
		out = append(out, s)
	}
	for _, ev := range p.Evictions {
		out = append(out, fmt.Sprintf("evict %s on %s mode=%s for %s: %s", ev.JobID, ev.Node, ev.Mode, ev.Preemptor, ev.Reason))
	}
	if r := p.Reservation; r != nil {
		out = append(out, fmt.Sprintf("reserve %s at %s on %s", r.JobID, rel(r.Start, now), strings.Join(r.Nodes, ",")))
	}
	for _, r := range p.Rejected {
		s := fmt.Sprintf("reject %s %s", r.JobID, r.Reason)
		if r.Final {
			s += " final"
		}
		out = append(out, s+": "+r.Message)
	}
	if explain {
		for _, e := range p.Explanations {
			f := e.Factors
			slack := "-"
			if f.HasDeadline {
				slack = f.Slack.String()
				if f.DeadlineMiss {
					slack += "(miss)"
				}
			}
			status := "placed"
			if e.Placed && e.Reason != "" {
				status += "(" + string(e.Reason) + ")"
			}
			if !e.Placed {
				status = string(e.Reason)
			}
			g := ""
			if f.Guaranteed {
				g = " guaranteed"
			}
			if len(e.Evicts) > 0 {
				status += " evicts=" + strings.Join(e.Evicts, ",")
			}
			out = append(out, fmt.Sprintf("  #%d %s acct=%s P=%.3f level=%d age=%.3f fs=%.3f urgency=%.3f slack=%s%s start=%s %s",
				e.Position, e.JobID, e.Account, e.Priority, f.Level, f.Age, f.FairShare, f.Urgency, slack, g, rel(e.EstStart, now), status))
		}
	}
	if showState {
		names := make([]string, 0, len(st.Accounts))
		for n := range st.Accounts {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			a := st.Accounts[n]
			out = append(out, fmt.Sprintf("  state %s usage=%.1f finish=%.4g deficit=%.4g comp=%.3g", n, a.Usage, a.Finish, a.Deficit, a.Compensation))
		}
		for _, r := range st.Preemptions {
			out = append(out, fmt.Sprintf("  state evicted %s by %s at %s (account %s, pool %q)", r.Job, r.By, rel(r.At, now), r.Account, r.Pool))
		}
		if st.VirtualTime != 0 || st.DRRNext != "" {
			line := fmt.Sprintf("  state V=%.4g drr_next=%s", st.VirtualTime, st.DRRNext)
			if st.DRRCredited {
				line += " (credited)"
			}
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		out = append(out, "(empty plan)")
	}
	return out
}

func (sc *scenario) policy(args []string) error {
	p := &sc.snap.Policy
	for _, kv := range args {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch {
		case k == "selection":
			p.Selection = engine.Selection(v)
		case k == "strategy":
			p.Strategy = engine.Strategy(v)
		case k == "fairshare":
			p.FairShareMode = engine.FairShareMode(v)
		case k == "deadline":
			p.DeadlineAction = engine.DeadlineAction(v)
		case k == "order":
			p.DeadlineOrder = engine.DeadlineOrder(v)
		case k == "backfill" && v == "off":
			p.NoBackfill = true
		case k == "aging" && v == "off":
			p.NoAging = true
		case k == "sharecap":
			p.ShareCap, err = strconv.ParseFloat(v, 64)
		case k == "quantum":
			p.Quantum, err = strconv.ParseFloat(v, 64)
		case k == "maxage":
			p.MaxAge, err = strconv.ParseFloat(v, 64)
		case k == "halflife":
			p.HalfLife, err = time.ParseDuration(v)
		case k == "weights":
			var w [4]float64
			for i, s := range strings.Split(v, "/") {
				if w[i], err = strconv.ParseFloat(s, 64); err != nil {
					return err
				}
			}
			p.Weights = engine.Weights{Level: w[0], Age: w[1], FairShare: w[2], Deadline: w[3]}
		case strings.HasPrefix(k, "preempt"):
			err = sc.preemptKey(k, v)
		case strings.HasPrefix(k, "pool."):
			if p.PoolStrategy == nil {
				p.PoolStrategy = map[string]engine.Strategy{}
			}
			p.PoolStrategy[strings.TrimPrefix(k, "pool.")] = engine.Strategy(v)
		default:
			err = fmt.Errorf("policy: unknown key %q", k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseRes reads "cpu=2000+memory=4096"-style vectors written as
// "cpu:2000,memory:4096".
func parseRes(s string) (engine.Resources, error) {
	var r engine.Resources
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, ":")
		if !ok {
			return r, fmt.Errorf("resources %q: want dim:amount", s)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return r, err
		}
		found := false
		for d := engine.Dim(0); d < engine.NumDims; d++ {
			if d.String() == k {
				r[d] = n
				found = true
			}
		}
		if !found {
			return r, fmt.Errorf("unknown dimension %q", k)
		}
	}
	return r, nil
}

func parseNode(args []string) (engine.Node, error) {
	b := et.Node(args[0])
	cost := 0.0
	var price engine.Price
	numa := 0
	for _, kv := range args[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "cpu":
			b.CPU(n)
		case "mem":
			b.Mem(n)
		case "net":
			b.Net(n)
		case "nvme", "ssd", "hdd":
			b.Storage(k, n)
		case "gpus": // model x count : GiB
			spec, mem, _ := strings.Cut(v, ":")
			model, cnt, _ := strings.Cut(spec, "x")
			c, _ := strconv.Atoi(cnt)
			m, _ := strconv.ParseInt(mem, 10, 64)
			b.GPUs(model, c, m)
		case "mig": // model : GiB : p1+p2
			parts := strings.SplitN(v, ":", 3)
			m, _ := strconv.ParseInt(parts[1], 10, 64)
			b.MIGGPU(parts[0], m, strings.Split(parts[2], "+")...)
		case "numa":
			numa = int(n)
		case "label":
			lk, lv, _ := strings.Cut(v, "=")
			b.Label(lk, lv)
		case "unhealthy":
			b.Unhealthy()
		case "cost":
			c, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return engine.Node{}, err
			}
			cost = c
		case "price": // per core-hour / GiB-hour / GPU-hour
			var err error
			ps := strings.Split(v, "/")
			if len(ps) != 3 {
				return engine.Node{}, fmt.Errorf("node: price %q: want core/gib/gpu", v)
			}
			for i, f := range []*float64{&price.CoreHour, &price.GiBHour, &price.GPUHour} {
				if *f, err = strconv.ParseFloat(ps[i], 64); err != nil {
					return engine.Node{}, err
				}
			}
		case "alloc":
			r, err := parseRes(v)
			if err != nil {
				return engine.Node{}, err
			}
			b.Alloc(r)
		default:
			return engine.Node{}, fmt.Errorf("node: unknown key %q", k)
		}
	}
	if numa > 0 {
		b.NUMA(numa)
	}
	n := b.Obj()
	n.Cost, n.Price = cost, price
	return n, nil
}

func (sc *scenario) parseJob(args []string) (engine.Job, string, error) {
	b := et.Job(args[0]).Submitted(sc.snap.Now)
	node := ""
	var extra []func(*engine.Job)
	for _, kv := range args[1:] {
		k, v, _ := strings.Cut(kv, "=")
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "account":
			b.Account(v)
		case "prio":
			b.Priority(int(f))
		case "cpu":
			b.CPU(f)
		case "mem":
			b.Mem(f)
		case "gpu":
			b.GPU(int(f))
		case "gpumem":
			b.GPUMem(int64(f))
		case "model":
			b.GPUModel(v)
		case "mig":
			prof, cnt, ok := strings.Cut(v, "x")
			n := 1
			if ok {
				n, _ = strconv.Atoi(cnt)
			}
			b.MIG(prof, n)
		case "tier":
			t, g, _ := strings.Cut(v, ":")
			n, _ := strconv.ParseInt(g, 10, 64)
			b.Storage(t, n)
		case "net":
			b.Net(int64(f))
		case "sel":
			sk, sv, _ := strings.Cut(v, "=")
			b.Selector(sk, sv)
		case "numa":
			b.NUMA()
		case "strategy":
			b.Strategy(engine.Strategy(v))
		case "gang":
			id, size, _ := strings.Cut(v, "/")
			n, _ := strconv.Atoi(size)
			b.Gang(id, n)
		case "est", "limit", "submitted", "started", "deadline":
			d, err := time.ParseDuration(v)
			if err != nil {
				return engine.Job{}, "", err
			}
			switch k {
			case "est":
				b.Est(d)
			case "limit":
				b.Limit(d)
			case "submitted", "started":
				b.Submitted(sc.snap.Now.Add(d))
			case "deadline":
				b.Deadline(sc.snap.Now.Add(d))
			}
		case "node":
			node = v
		case "nopreempt":
			extra = append(extra, func(j *engine.Job) { j.NonPreemptible = true })
		case "mode":
			extra = append(extra, func(j *engine.Job) { j.PreemptMode = engine.EvictionMode(v) })
		case "modes":
			var ms []engine.EvictionMode
			for _, m := range strings.Split(v, "+") {
				ms = append(ms, engine.EvictionMode(m))
			}
			extra = append(extra, func(j *engine.Job) { j.PreemptModes = ms })
		case "ckpt":
			d, err := time.ParseDuration(v)
			if err != nil {
				return engine.Job{}, "", err
			}
			sc.ckpt = sc.snap.Now.Add(d)
		default:
			return engine.Job{}, "", fmt.Errorf("job: unknown key %q", k)
		}
	}
	j := b.Obj()
	for _, f := range extra {
		f(&j)
	}
	return j, node, nil
}

func (sc *scenario) preemptKey(k, v string) error {
	pc := &sc.snap.Preemption
	var err error
	switch {
	case k == "preempt":
		pc.Policy = engine.PreemptPolicy(v)
	case strings.HasPrefix(k, "preempt.pool."):
		if pc.PoolPolicy == nil {
			pc.PoolPolicy = map[string]engine.PreemptPolicy{}
		}
		pc.PoolPolicy[strings.TrimPrefix(k, "preempt.pool.")] = engine.PreemptPolicy(v)
	case k == "preempt.minrun":
		pc.MinRuntime, err = time.ParseDuration(v)
	case k == "preempt.cooldown":
		pc.Cooldown, err = time.ParseDuration(v)
	case k == "preempt.budget":
		pc.BudgetPerHour, err = strconv.Atoi(v)
	case k == "preempt.acctbudget":
		pc.AccountBudgetPerHour, err = strconv.Atoi(v)
	case k == "preempt.maxvictims":
		pc.MaxVictims, err = strconv.Atoi(v)
	case k == "preempt.mode":
		pc.DefaultMode = engine.EvictionMode(v)
	case k == "preempt.weights":
		var w [5]float64
		for i, s := range strings.Split(v, "/") {
			if w[i], err = strconv.ParseFloat(s, 64); err != nil {
				return err
			}
		}
		pc.Weights = engine.HybridWeights{Priority: w[0], FairShare: w[1], Deadline: w[2], Resource: w[3], Cost: w[4]}
	default:
		return fmt.Errorf("policy: unknown key %q", k)
	}
	return err
}
