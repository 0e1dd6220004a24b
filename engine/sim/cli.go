package sim

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/computeboard/computeboard/engine"
)

const cliUsage = `usage: adapter sim TRACE [--policy NAME | --compare NAME,NAME,...|all | --preemption NAME,...|all] [--json] [--seed N]

Replays the workload trace (JSON; see engine/sim/README.md) through the real
scheduling engine on a virtual clock and reports per-account share versus
target with Jain's fairness index, waits by priority level, utilization per
resource, deadline misses and the engine's decision rate.

  --policy NAME     run under NAME instead of the trace's policy: a selection
                    algorithm (priority, proportional, lottery, wfq, drr, drf)
                    or one of the trace's variants
  --compare LIST    run each policy of the comma-separated LIST on the same
                    trace and compare them; "all" = every selection algorithm
                    and every variant of the trace
  --preemption LIST run the trace once per preemption policy of the
                    comma-separated LIST (off, priority, fair-share,
                    deadline-aware, resource-based, cost-based, hybrid; "all"
                    = off and every policy), under the trace's engine policy
                    and preemption settings, and compare evictions, lost
                    work, urgent jobs' waits and ping-pong
  --json            print the report(s) as JSON
  --seed N          replace the trace's seed (generated jobs, lottery draws)
`

// Main is the "adapter sim" command: Main(os.Args[2:], os.Stdout,
// os.Stderr, time.Now). now measures the engine's wall-clock speed; nil
// leaves those figures out.
func Main(args []string, stdout, stderr io.Writer, now func() time.Time) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, cliUsage) }
	policy := fs.String("policy", "", "")
	compare := fs.String("compare", "", "")
	preempt := fs.String("preemption", "", "")
	asJSON := fs.Bool("json", false, "")
	seed := fs.Uint64("seed", 0, "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("sim: want exactly one TRACE file")
	}
	if *policy != "" && *compare != "" || *preempt != "" && (*policy != "" || *compare != "") {
		return errors.New("sim: --policy, --compare and --preemption exclude each other")
	}
	tr, err := Load(pos[0])
	if err != nil {
		return err
	}
	if *seed != 0 {
		tr.Seed = *seed
	}
	// Progress on stderr, a line per tenth of the jobs ended; the report
	// itself goes to stdout.
	opts := Options{Now: now, Progress: func(p Progress) {
		of := ""
		if p.Horizon > 0 {
			of = fmt.Sprintf(" of %s (%d%%)", fmtDur(p.Horizon.Seconds()), 100*p.SimTime/p.Horizon)
		}
		done := ""
		if p.Done {
			done = ": done"
		}
		fmt.Fprintf(stderr, "sim %s, policy %s: simulated %s%s; %d of %d jobs ended%s\n",
			tr.Name, p.Policy, fmtDur(p.SimTime.Seconds()), of, p.Ended, p.Jobs, done)
	}}
	if *preempt != "" {
		return comparePreemption(tr, *preempt, opts, *asJSON, stdout)
	}
	if *compare == "" {
		r, err := RunWith(tr, *policy, opts)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, r)
		}
		return WriteText(stdout, &r)
	}
	var names []string
	for _, n := range strings.Split(*compare, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case n == "all":
			names = append(names, tr.PolicyNames()...)
		default:
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return errors.New("sim: --compare names no policy")
	}
	for _, n := range names {
		if _, err := tr.policyFor(n); err != nil {
			return err
		}
	}
	rs := make([]Report, 0, len(names))
	for _, n := range names {
		r, err := RunWith(tr, n, opts)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	if *asJSON {
		return writeJSON(stdout, rs)
	}
	if err := WriteComparison(stdout, rs); err != nil {
		return err
	}
	for i := range rs {
		fmt.Fprintln(stdout)
		fmt.Fprintln(stdout, strings.Repeat("─", 78))
		if err := WriteText(stdout, &rs[i]); err != nil {
			return err
		}
	}
	return nil
}

// comparePreemption is --preemption: one run per policy of list.
func comparePreemption(tr *Trace, list string, opts Options, asJSON bool, stdout io.Writer) error {
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case n == "all":
			names = append(names, string(engine.PreemptOff))
			for _, p := range engine.PreemptPolicies {
				names = append(names, string(p))
			}
		case !engine.ValidPreemptPolicy(engine.PreemptPolicy(n)):
			return fmt.Errorf("sim: --preemption: unknown policy %q", n)
		default:
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return errors.New("sim: --preemption names no policy")
	}
	rs, err := ComparePreemptionWith(tr, names, opts)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, rs)
	}
	return WritePreemptionComparison(stdout, rs)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
