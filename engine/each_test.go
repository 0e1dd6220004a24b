package engine_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// ScheduleEach hands over the explanations and rejections Schedule keeps,
// one by one and in the same order, and plans the same otherwise. The generated
// snapshots include the regime that reads an earlier explanation back: a
// gang held by its account's quota, whose later members take the first
// member's estimated start.
func TestScheduleEach(t *testing.T) {
	quotaGangs := 0
	for seed := uint64(1); seed <= 300; seed++ {
		snap := genSnap(seed)
		if seed%2 == 0 {
			for i := range snap.Accounts {
				snap.Accounts[i].Quota[engine.DimCPU] = int64(4000 + 2000*(i%3))
			}
		}
		want, wantSt := engine.Schedule(engine.State{}, snap)
		var got []engine.Explanation
		var rejs []engine.Rejection
		plan, st := engine.ScheduleEach(engine.State{}, snap, func(e *engine.Explanation, r *engine.Rejection) {
			got = append(got, *e)
			if (r == nil) != e.Placed {
				t.Fatalf("seed %d: job %s placed %v with rejection %v", seed, e.JobID, e.Placed, r)
			}
			if r != nil {
				if r.JobID != e.JobID || r.Reason != e.Reason || !strings.HasPrefix(e.Message, r.Message) {
					t.Fatalf("seed %d: rejection %+v does not match its explanation %+v", seed, *r, *e)
				}
				rejs = append(rejs, *r)
			}
		})
		if plan.Explanations != nil || plan.Rejected != nil {
			t.Fatalf("seed %d: ScheduleEach kept %d explanations and %d rejections in the plan", seed, len(plan.Explanations), len(plan.Rejected))
		}
		if !reflect.DeepEqual(got, want.Explanations) {
			t.Fatalf("seed %d: explanations differ from Schedule's:\n got %+v\nwant %+v", seed, got, want.Explanations)
		}
		if !reflect.DeepEqual(rejs, want.Rejected) {
			t.Fatalf("seed %d: rejections differ from Schedule's:\n got %+v\nwant %+v", seed, rejs, want.Rejected)
		}
		want.Explanations, want.Rejected = nil, nil
		if !reflect.DeepEqual(plan, want) || !reflect.DeepEqual(st, wantSt) {
			t.Fatalf("seed %d: the plan or state differs from Schedule's", seed)
		}
		gang := map[string]string{}
		for _, j := range snap.Pending {
			gang[j.ID] = j.GangID
		}
		starts := map[string]bool{}
		for _, e := range got {
			if g := gang[e.JobID]; g != "" && e.Reason == engine.ReasonQuota && strings.Contains(e.Message, "counts the quota") {
				if starts[g] && !e.EstStart.IsZero() {
					quotaGangs++
				}
				starts[g] = true
			}
		}
	}
	if quotaGangs == 0 {
		t.Fatal("no later member of a quota-held gang with an estimated start: the regime is not covered")
	}
	t.Logf("%d later members of quota-held gangs", quotaGangs)
}

// A repeated job ID is rejected as invalid after its first occurrence,
// whether the pending jobs come in ID order (as the adapter gives them:
// the engine then checks neighbours) or not (it keeps a set).
func TestDuplicateIDs(t *testing.T) {
	job := func(id string) engine.Job { return et.Job(id).CPU(1).Obj() }
	for _, c := range []struct {
		name string
		ids  []string
	}{
		{"in ID order", []string{"a", "b", "b", "c", "c", "c"}},
		{"out of order", []string{"c", "b", "a", "b", "c", "c"}},
	} {
		snap := engine.Snapshot{Now: et.Epoch, Nodes: []engine.Node{et.Node("n").CPU(64).Mem(64).Obj()}}
		for _, id := range c.ids {
			snap.Pending = append(snap.Pending, job(id))
		}
		plan, _ := engine.Schedule(engine.State{}, snap)
		placed := map[string]int{}
		for _, p := range plan.Placements {
			placed[p.JobID]++
		}
		dups := map[string]int{}
		for _, r := range plan.Rejected {
			if r.Reason != engine.ReasonInvalid || !r.Final || r.Message != "duplicate job ID" {
				t.Errorf("%s: unexpected rejection %+v", c.name, r)
			}
			dups[r.JobID]++
		}
		if want := map[string]int{"a": 1, "b": 1, "c": 1}; !reflect.DeepEqual(placed, want) {
			t.Errorf("%s: placed %v, want each ID once", c.name, placed)
		}
		if want := map[string]int{"b": 1, "c": 2}; !reflect.DeepEqual(dups, want) {
			t.Errorf("%s: duplicates rejected %v, want %v", c.name, dups, want)
		}
	}
}
