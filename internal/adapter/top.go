package adapter

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/dispatch"
)

// runTop is `adapter top`: a live terminal view of the inbox, the jobs and
// the nodes, drawn from the adapter's HTTP API (the scheduler's, forwarded
// by any adapter) every --interval until interrupted; --once draws one
// frame without clearing the screen (for scripts, and the test).
func runTop(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := fs.String("api", envOr(getenv, "COMPUTEBOARD_API", "http://127.0.0.1:8377"), "the adapter's HTTP address")
	token := fs.String("token", getenv("COMPUTEBOARD_OPERATOR_TOKEN"), "operator token, if the API's reads need one (default $COMPUTEBOARD_OPERATOR_TOKEN)")
	interval := fs.Duration("interval", time.Second, "time between frames")
	once := fs.Bool("once", false, "draw one frame and exit")
	nodes := fs.Int("nodes", 20, "at most this many nodes listed (the busiest first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interval < 100*time.Millisecond {
		return usageError{"top: --interval under 100ms"}
	}
	c := apiClient{base: strings.TrimRight(*api, "/"), token: *token}
	for {
		var frame bytes.Buffer
		if !*once {
			frame.WriteString("\x1b[H\x1b[2J") // home, clear
		}
		if err := topFrame(ctx, c, &frame, *nodes, time.Now()); err != nil {
			if *once || ctx.Err() != nil {
				return err
			}
			fmt.Fprintf(&frame, "%v\n(retrying every %v; Ctrl-C to quit)\n", err, *interval)
		}
		if _, err := stdout.Write(frame.Bytes()); err != nil {
			return err
		}
		if *once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

// topFrame writes one frame: the pool, jobs and scheduler figures, the
// inbox, and the nodes.
func topFrame(ctx context.Context, c apiClient, w io.Writer, maxNodes int, now time.Time) error {
	var (
		st    dispatch.Stats
		inbox broker.Stats
		nv    struct {
			Nodes []dispatch.NodeView `json:"nodes"`
		}
	)
	for _, g := range []struct {
		path string
		v    any
	}{{"/api/v1/scheduler", &st}, {"/api/v1/inbox/stats", &inbox}, {"/api/v1/nodes", &nv}} {
		if err := c.getJSON(ctx, g.path, g.v); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "computeboard top  %s  %s\n\n", c.base, now.Format("15:04:05"))
	var util []string
	for _, d := range slices.Sorted(maps.Keys(st.Utilization)) {
		util = append(util, fmt.Sprintf("%s %.0f%%", d, 100*st.Utilization[d]))
	}
	fmt.Fprintf(w, "pool       %d nodes, %d healthy   allocated: %s\n", st.Nodes, st.Healthy, strings.Join(util, "  "))
	j := st.Jobs
	fmt.Fprintf(w, "jobs       pending %d  running %d  completed %d  failed %d  cancelled %d   mean wait %.2fs, turnaround %.2fs\n",
		j.PendingJobs, j.RunningJobs, j.CompletedJobs, j.FailedJobs, j.CancelledJobs,
		j.Statistics.AverageWaitTime, j.Statistics.AverageTurnaroundTime)
	m := st.Metrics
	fmt.Fprintf(w, "scheduler  epoch %.0f  cycles %.0f  last cycle %.1f ms  placements %.0f  requeued %.0f  lost %.0f\n",
		m["scheduler_epoch"], m["scheduler_cycles"], m["scheduler_last_cycle_ms"], m["scheduler_placements"],
		m["scheduler_requeued_jobs"], m["scheduler_lost_jobs"])
	fmt.Fprintf(w, "inbox      held %d of %d  leased %d  oldest %.1fs  intake %.1f/s  dead letters %d  accepted %d  rejected %d\n",
		inbox.Held, inbox.Capacity, inbox.Leased, inbox.OldestAgeSeconds, inbox.IntakePerSecond, inbox.DeadLetters,
		inbox.Accepted, sum(inbox.Rejected))
	var prio []string
	for p := len(inbox.ByPriority) - 1; p >= 0; p-- {
		if n := inbox.ByPriority[p]; n > 0 {
			prio = append(prio, fmt.Sprintf("p%d %d", p, n))
		}
	}
	if len(prio) > 0 {
		fmt.Fprintf(w, "           by priority: %s\n", strings.Join(prio, "  "))
	}
	if len(inbox.ByModule) > 0 {
		mods := slices.SortedFunc(maps.Keys(inbox.ByModule), func(a, b string) int {
			if d := inbox.ByModule[b] - inbox.ByModule[a]; d != 0 {
				return d
			}
			return strings.Compare(a, b)
		})
		var top []string
		for _, mod := range mods[:min(len(mods), 5)] {
			top = append(top, fmt.Sprintf("%s %d", mod, inbox.ByModule[mod]))
		}
		fmt.Fprintf(w, "           by module: %s\n", strings.Join(top, "  "))
	}
	fmt.Fprintln(w)
	ns := nv.Nodes
	slices.SortStableFunc(ns, func(a, b dispatch.NodeView) int {
		if a.Jobs != b.Jobs {
			return b.Jobs - a.Jobs
		}
		return strings.Compare(a.Name, b.Name)
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPROVIDER\tSTATE\tCPU (cores)\tMEMORY (GiB)\tGPUS\tJOBS")
	for _, n := range ns[:min(len(ns), maxNodes)] {
		state := "ok"
		switch {
		case n.Lost:
			state = "lost"
		case !n.Healthy:
			state = "unhealthy"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f/%.1f\t%.1f/%.1f\t%d/%d\t%d\n", n.Name, n.Provider, state,
			float64(n.Allocated["cpu"])/1000, float64(n.Capacity["cpu"])/1000,
			float64(n.Allocated["memory"])/1024, float64(n.Capacity["memory"])/1024,
			n.Allocated["gpu"], n.Capacity["gpu"], n.Jobs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ns) > maxNodes {
		fmt.Fprintf(w, "... and %d more nodes\n", len(ns)-maxNodes)
	}
	return nil
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
