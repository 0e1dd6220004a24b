package sim

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// WriteText writes one report as readable tables.
func WriteText(w io.Writer, r *Report) error {
	b := &strings.Builder{}
	p := r.Policy
	fmt.Fprintf(b, "trace %s — policy %s (selection %s, %s, %s fair share, weights level/age/fair-share/deadline %g/%g/%g/%g, backfill %s, deadlines: %s)\n",
		r.Trace, p.Name, p.Selection, p.Strategy, p.FairShareMode, p.Weights.Level, p.Weights.Age, p.Weights.FairShare, p.Weights.Deadline, onOff(p.Backfill), p.DeadlineAction)
	fmt.Fprintf(b, "%s; %s: %d finished, %d dropped, %d never started, %d still running",
		plural(r.Nodes, "node"), plural(r.Jobs.Submitted, "job"), r.Jobs.Finished, r.Jobs.Dropped, r.Jobs.Waiting, r.Jobs.Running)
	if r.Jobs.NotYet > 0 {
		fmt.Fprintf(b, ", %d arriving after the horizon", r.Jobs.NotYet)
	}
	if r.Jobs.Stopped > 0 {
		fmt.Fprintf(b, " (%d finished jobs stopped at their time limit)", r.Jobs.Stopped)
	}
	fmt.Fprintf(b, "; makespan %s\n", fmtDur(r.Makespan))
	e := r.Engine
	fmt.Fprintf(b, "engine: %d cycles, %s decisions, %d placements (%d backfilled) in %.2fs (%s decisions/s); simulated %s in %.2fs (%s× real time)\n",
		e.Cycles, si(float64(e.Decisions)), e.Placements, e.Backfilled, e.Seconds, si(e.DecisionsPerSec), fmtDur(r.Makespan), e.WallSeconds, si(e.Speedup))
	if len(r.Jobs.DroppedBy) > 0 {
		fmt.Fprintf(b, "dropped: %s\n", fmtCounts(r.Jobs.DroppedBy))
	}

	b.WriteString("\n")
	switch r.Window.Kind {
	case "whole run":
		fmt.Fprintf(b, "Shares by %s over the whole run (no time when every account had a job waiting):\n", r.Measure)
	default:
		fmt.Fprintf(b, "Shares by %s over the %s window %s–%s (%s, %.0f%% of the makespan):\n",
			r.Measure, r.Window.Kind, fmtDur(r.Window.From), fmtDur(r.Window.To), fmtDur(r.Window.Seconds), 100*r.Window.Fraction)
	}
	other := "DOMINANT"
	if r.Measure == MeasureDominant {
		other = "BILLING"
	}
	tw := &table{}
	fmt.Fprintf(tw, "ACCOUNT\tSHARES\tTARGET\tACHIEVED\tRATIO\tBY %s\tFINISHED\tMEAN WAIT\t\n", other)
	for _, a := range r.Shares {
		o := a.Dominant
		if r.Measure == MeasureDominant {
			o = a.Billing
		}
		target, ratio := pct(a.Target), fmt.Sprintf("%.3f", a.Ratio)
		if a.Inner {
			target, ratio = "(inner)", "-"
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%s\t%d\t%s\t\n", a.Account, a.Shares, target, pct(a.Achieved), ratio, pct(o), a.Finished, fmtDur(a.MeanWait))
	}
	tw.write(b)
	fmt.Fprintf(b, "Jain's fairness index %.4f; largest deviation from target %.1f%%\n", r.Jain, 100*r.MaxDeviation)

	if len(r.Waits) > 0 {
		fmt.Fprintf(b, "\nWait (start − arrival): mean %s, p50 %s, p99 %s, max %s over %d jobs; by priority level:\n",
			fmtDur(r.Wait.Mean), fmtDur(r.Wait.P50), fmtDur(r.Wait.P99), fmtDur(r.Wait.Max), r.Wait.Jobs)
		tw = &table{}
		fmt.Fprintf(tw, "LEVEL\tJOBS\tMEAN\tP50\tP90\tP99\tMAX\t\n")
		for _, x := range r.Waits {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", x.Priority, x.Jobs, fmtDur(x.Mean), fmtDur(x.P50), fmtDur(x.P90), fmtDur(x.P99), fmtDur(x.Max))
		}
		tw.write(b)
	}

	b.WriteString("\nUtilization over the makespan:\n")
	tw = &table{}
	fmt.Fprintf(tw, "RESOURCE\tCAPACITY\tMEAN IN USE\tUTILIZATION\t\n")
	for _, u := range r.Utilization {
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t\n", u.Resource, num(u.Capacity), u.Unit, num(u.MeanUsed), pct(u.Fraction))
	}
	tw.write(b)

	d := r.Deadlines
	b.WriteString("\n")
	if d.Jobs == 0 {
		b.WriteString("Deadlines: no job had one.\n")
	} else {
		fmt.Fprintf(b, "Deadlines: %s had one: %d met, %d late, %d dropped, %d unfinished; missed %d (%.1f%%)",
			plural(d.Jobs, "job"), d.Met, d.Late, d.Dropped, d.Unfinished, d.Missed, 100*d.MissRate)
		if d.Late > 0 {
			fmt.Fprintf(b, "; lateness mean %s, max %s", fmtDur(d.MeanLateness), fmtDur(d.MaxLateness))
		}
		b.WriteString("\n")
	}
	if pr := r.Preemption; pr != nil {
		writePreemption(b, pr)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writePreemption(b *strings.Builder, p *PreemptionReport) {
	fmt.Fprintf(b, "\nPreemption %s: %s (%.2f an hour)", p.Policy, plural(p.Evictions, "eviction"), p.PerHour)
	if len(p.ByMode) > 0 {
		fmt.Fprintf(b, " by mode %s", fmtCounts(p.ByMode))
	}
	fmt.Fprintf(b, "; lost work %s billing-seconds; urgent (level ≥ %d) jobs: %d, wait mean %s, p95 %s; a job evicted at most %d times; ping-pong %d\n",
		num(p.LostWork), p.UrgentLevel, p.UrgentJobs, fmtDur(p.UrgentMeanWait), fmtDur(p.UrgentP95Wait), p.MaxEvictionsPerJob, p.PingPong)
}

// WritePreemptionComparison writes ComparePreemption's results side by
// side.
func WritePreemptionComparison(w io.Writer, rs []PolicyResult) error {
	b := &strings.Builder{}
	tw := &table{}
	fmt.Fprintf(tw, "PREEMPTION\tEVICTIONS\tPER HOUR\tLOST WORK\tURGENT\tURGENT MEAN WAIT\tURGENT P95 WAIT\tMAX/JOB\tPING-PONG\t\n")
	for _, r := range rs {
		p := r.Preemption
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%d\t%s\t%s\t%d\t%d\t\n", r.Policy, p.Evictions, p.PerHour, num(p.LostWork),
			p.UrgentJobs, fmtDur(p.UrgentMeanWait), fmtDur(p.UrgentP95Wait), p.MaxEvictionsPerJob, p.PingPong)
	}
	tw.write(b)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteComparison writes several reports of one trace side by side.
func WriteComparison(w io.Writer, rs []Report) error {
	if len(rs) == 0 {
		return nil
	}
	b := &strings.Builder{}
	r0 := &rs[0]
	measures := map[string][]string{}
	for i := range rs {
		measures[rs[i].Measure] = append(measures[rs[i].Measure], rs[i].Policy.Name)
	}
	how := "by " + r0.Measure
	if len(measures) > 1 {
		how = "by billing, by dominant share for " + strings.Join(measures[MeasureDominant], ", ")
	}
	fmt.Fprintf(b, "trace %s: %s, %s, %s; achieved shares %s over each run's %s window\n\n",
		r0.Trace, plural(r0.Nodes, "node"), plural(r0.Jobs.Submitted, "job"), plural(len(r0.Shares), "account"), how, r0.Window.Kind)
	// Resources worth a column: cpu, gpu, mig.
	var res []string
	for _, u := range r0.Utilization {
		switch u.Resource {
		case "cpu", "gpu", "mig":
			res = append(res, u.Resource)
		}
	}
	tw := &table{}
	fmt.Fprintf(tw, "POLICY\tJAIN\tMAX DEV\t")
	for _, a := range r0.Shares {
		fmt.Fprintf(tw, "%s (%s)\t", a.Account, pct(a.Target))
	}
	fmt.Fprintf(tw, "P50 WAIT\tP99 WAIT\t")
	for _, x := range res {
		fmt.Fprintf(tw, "%s UTIL\t", strings.ToUpper(x))
	}
	fmt.Fprintf(tw, "DL MISSED\tMAKESPAN\tDECISIONS/S\t\n")
	for i := range rs {
		r := &rs[i]
		fmt.Fprintf(tw, "%s\t%.4f\t%.1f%%\t", r.Policy.Name, r.Jain, 100*r.MaxDeviation)
		for _, a0 := range r0.Shares {
			cell := "-"
			for _, a := range r.Shares {
				if a.Account == a0.Account {
					cell = pct(a.Achieved)
				}
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintf(tw, "%s\t%s\t", fmtDur(r.Wait.P50), fmtDur(r.Wait.P99))
		for _, x := range res {
			cell := "-"
			for _, u := range r.Utilization {
				if u.Resource == x {
					cell = pct(u.Fraction)
				}
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		dl := "-"
		if r.Deadlines.Jobs > 0 {
			dl = fmt.Sprintf("%d/%d", r.Deadlines.Missed, r.Deadlines.Jobs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", dl, fmtDur(r.Makespan), si(r.Engine.DecisionsPerSec))
	}
	tw.write(b)
	b.WriteString("\nWait p50 / p99 by priority level:\n")
	levels := map[int]bool{}
	for i := range rs {
		for _, x := range rs[i].Waits {
			levels[x.Priority] = true
		}
	}
	tw = &table{}
	fmt.Fprintf(tw, "POLICY\t")
	for l := 9; l >= 0; l-- {
		if levels[l] {
			fmt.Fprintf(tw, "LEVEL %d\t", l)
		}
	}
	fmt.Fprintf(tw, "\n")
	for i := range rs {
		r := &rs[i]
		fmt.Fprintf(tw, "%s\t", r.Policy.Name)
		for l := 9; l >= 0; l-- {
			if !levels[l] {
				continue
			}
			cell := "-"
			for _, x := range r.Waits {
				if x.Priority == l {
					cell = fmtDur(x.P50) + " / " + fmtDur(x.P99)
				}
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintf(tw, "\n")
	}
	tw.write(b)
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func pct(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }

func num(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// si formats a count with a k/M/G suffix.
func si(x float64) string {
	switch {
	case x >= 1e9:
		return fmt.Sprintf("%.2fG", x/1e9)
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

// fmtDur formats seconds compactly: 0.4s, 42s, 12m05s, 3h07m, 2d04h.
func fmtDur(s float64) string {
	switch {
	case s <= 0:
		return "0s"
	case s < 10:
		return fmt.Sprintf("%.1fs", s)
	case s < 60:
		return fmt.Sprintf("%.0fs", s)
	}
	t := int64(math.Round(s))
	switch {
	case t < 3600:
		return fmt.Sprintf("%dm%02ds", t/60, t%60)
	case t < 86400:
		return fmt.Sprintf("%dh%02dm", t/3600, t%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", t/86400, t%86400/3600)
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// table collects tab-separated cells (each row ends with "\n") and writes
// them aligned: the first column left, the others right.
type table struct{ buf strings.Builder }

func (t *table) Write(p []byte) (int, error) { return t.buf.Write(p) }

func (t *table) write(b *strings.Builder) {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(t.buf.String(), "\n"), "\n") {
		rows = append(rows, strings.Split(strings.TrimSuffix(line, "\t"), "\t"))
	}
	var w []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(w) {
				w = append(w, 0)
			}
			w[i] = max(w[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		b.WriteString("  ")
		for i, c := range r {
			pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
}
