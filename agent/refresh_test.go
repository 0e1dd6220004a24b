package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/slurmtest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers/slurm"
	"github.com/computeboard/computeboard/wire"
)

// TestRefreshSlurmNodes runs an agent whose only node at start is a fake
// one, with a real Slurm partition's inventory read every 200 ms: the
// partition's node is registered and served (a job assigned to it runs
// on Slurm), goes out of scheduling when drained in Slurm, with Slurm's
// reason, and comes back when resumed.
func TestRefreshSlurmNodes(t *testing.T) {
	t.Parallel()
	c := slurmtest.StartT(t, slurmtest.Options{CPUs: 2})
	e := newEnv(t)
	prov, err := slurm.New(slurm.Config{WorkDir: t.TempDir(), SlurmConf: c.Conf, Partition: c.Partition, AllowRoot: true,
		PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	list := func(ctx context.Context) ([]Node, error) {
		pns, err := prov.PartitionNodes(ctx)
		if err != nil {
			return nil, err
		}
		var out []Node
		for _, pn := range pns {
			out = append(out, Node{Record: pool.NodeRecord{Node: pn.Node, Provider: "slurm", Unhealthy: pn.Out}, Provider: prov})
		}
		return out, nil
	}
	a, err := New(Config{
		ID: "agent-1",
		Nodes: []Node{{Record: pool.NodeRecord{Node: inventory.Node{Name: "n1", CPUs: 4, MemoryMiB: 8192},
			Agent: "agent-1", Provider: "fake", Fake: true}, Provider: e.prov}},
		Inventories: map[string]Inventory{"slurm": {Every: 200 * time.Millisecond, List: list}},
		Resolve:     func(r wire.Request) (Command, *wire.Error) { return Command{Argv: r.Command}, nil },
		Jobs:        e.jobs, Channel: e.ch, Registry: e.reg,
		Beat: 50 * time.Millisecond, Poll: 20 * time.Millisecond, Clock: e.clk, Logger: e.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.run(a)

	registered := func() (pool.NodeRecord, bool) {
		states, _, err := e.reg.Nodes(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if s.Name == c.Node {
				return s.NodeRecord, true
			}
		}
		return pool.NodeRecord{}, false
	}
	// Each step below waits on slurmctld (sinfo, sbatch), which can take
	// seconds to answer while the rest of the suite loads the machine.
	const slurmWait = time.Minute
	e.waitWithin(slurmWait, "the Slurm node registered", func() bool { _, ok := registered(); return ok })
	rec, _ := registered()
	if rec.Agent != "agent-1" || rec.Provider != "slurm" || rec.CPUs != 2 || rec.Unhealthy != "" {
		t.Errorf("registered %+v; want agent agent-1, provider slurm, 2 CPUs, healthy", rec)
	}

	j := e.queued(`{"command":["/bin/sh","-c","exit 0"]}`)
	e.assign(j.JobID, c.Node)
	e.waitStatusWithin(j.JobID, wire.JobSucceeded, slurmWait)
	if h := e.rec(j.JobID).Handle; !strings.Contains(h, `"slurm"`) {
		t.Errorf("the job's handle %s is not the Slurm provider's", h)
	}

	scontrol := func(args ...string) {
		t.Helper()
		if out, err := c.Command(e.ctx, "scontrol", args...).CombinedOutput(); err != nil {
			t.Fatalf("scontrol %v: %v: %s", args, err, out)
		}
	}
	scontrol("update", "nodename="+c.Node, "state=drain", "reason=cbtest-maintenance")
	e.waitWithin(slurmWait, "the drained node out of scheduling", func() bool { r, _ := registered(); return r.Unhealthy != "" })
	if r, _ := registered(); !strings.Contains(r.Unhealthy, "drain") || !strings.Contains(r.Unhealthy, "cbtest-maintenance") {
		t.Errorf("drained node's reason %q; want Slurm's state and reason", r.Unhealthy)
	}
	scontrol("update", "nodename="+c.Node, "state=resume")
	e.waitWithin(slurmWait, "the resumed node back in scheduling", func() bool { r, _ := registered(); return r.Unhealthy == "" })
}
