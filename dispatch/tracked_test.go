package dispatch

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/computeboard/computeboard/engine"
)

// TestCompactJob: a tracked job gives back the engine job it was made
// from, field for field, plain or using every field; jobs that ask alike
// share one shape, and a tracked job stays in the 288-byte size class
// (TestPendingMemory measures the whole).
func TestCompactJob(t *testing.T) {
	var it internTable
	var req engine.Resources
	req[engine.DimCPU], req[engine.DimMemory], req[engine.DimGPU] = 1500, 2048, 2
	rich := engine.Job{
		ID: "j1", Account: "acct", Priority: 7, Submitted: epochTime(1767225600.25),
		Deadline: epochTime(1767229200.5), EstDuration: 90 * time.Second, TimeLimit: time.Hour,
		Request: req, GPUModel: "A100", MIGProfile: "1g.10gb", StorageTier: "ssd",
		NodeSelector: map[string]string{"zone": "a", "provider": "local"}, NUMALocal: true,
		Strategy: engine.WorstFit, GangID: "g", GangSize: 3,
		NonPreemptible: true, PreemptMode: engine.ModeSuspend,
	}
	plain := engine.Job{ID: "j2", Account: "acct", Priority: 0, Submitted: epochTime(1767225601), Request: req}
	for _, j := range []engine.Job{rich, plain} {
		c := it.compactJob(j)
		if got := c.job(); !reflect.DeepEqual(got, j) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", j.ID, got, j)
		}
	}
	if c := it.compactJob(plain); c.shape != nil {
		t.Errorf("a plain job has a shape %+v", c.shape)
	}
	other := rich
	other.ID, other.GangID, other.Deadline = "j3", "", time.Time{}
	other.NodeSelector = map[string]string{"provider": "local", "zone": "a"} // equal, another map
	a, b := it.compactJob(rich), it.compactJob(other)
	if a.shape != b.shape {
		t.Error("two jobs that ask alike do not share a shape")
	}
	other.PreemptMode = engine.ModeRequeue
	if c := it.compactJob(other); c.shape == a.shape {
		t.Error("a job that asks otherwise shares a shape")
	}
	if got := unsafe.Sizeof(tracked{}); got > 288 {
		t.Errorf("tracked is %d B, over the 288 B size class", got)
	}
}

// TestHeldExplanations: a full plan's explanations, kept compact, come
// back as the engine gave them (placed with node and victims, waiting
// with a deadline and an estimate, guaranteed), and by job ID through
// the scheduler's index.
func TestHeldExplanations(t *testing.T) {
	es := []engine.Explanation{
		{JobID: "p", Account: "a", Position: 1, Priority: 9.25, Placed: true, Node: "n1",
			Factors:  engine.Factors{Level: 9, AgeHours: 0.5, Age: 0.05, FairShare: 0.75, Guaranteed: true},
			EstStart: time.Unix(0, 1767225600250000000), Evicts: []string{"v1", "v2"},
			Reason: engine.ReasonDeadlineInfeasible, Message: "evicts v1, v2 on n1"},
		{JobID: "w", Account: "b", Position: 2, Priority: 3.5, Reason: engine.ReasonNoFit, Message: "no node has room",
			Factors: engine.Factors{Level: 3, AgeHours: 2, Age: 0.2, FairShare: 0.25, Urgency: 0.9,
				Slack: -90 * time.Second, HasDeadline: true, DeadlineMiss: true},
			EstStart: time.Unix(0, 1767229200000000001)},
		{JobID: "u", Account: "b", Position: 3, Reason: engine.ReasonQuota}, // no estimate
	}
	var x explanations
	for i := range es {
		x.add(&es[i])
	}
	for i, want := range es {
		if got := x.at(i); !reflect.DeepEqual(got, want) {
			t.Errorf("explanation %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if got := unsafe.Sizeof(heldExpl{}); got > 128 {
		t.Errorf("heldExpl is %d B, want at most 128", got)
	}
}
