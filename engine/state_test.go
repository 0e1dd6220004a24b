package engine_test

import (
	"bytes"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	et "github.com/computeboard/computeboard/engine/enginetest"
)

// TestStateGolden pins the checkpoint format: testdata/state_v1.json must
// decode, and re-encode to the same bytes.
func TestStateGolden(t *testing.T) {
	want := engine.State{
		Version: 1,
		LastNow: et.Epoch.Add(2 * time.Hour),
		Accounts: map[string]engine.AccountState{
			"planner":   {Usage: 12984.5, UsageAt: et.Epoch.Add(2 * time.Hour), Finish: 9600, Deficit: 1800},
			"reasoning": {Usage: 3600, UsageAt: et.Epoch.Add(time.Hour), Compensation: 2},
		},
		VirtualTime: 4800,
		DRRNext:     "reasoning",
		DRRCredited: true,
	}
	path := "testdata/state_v1.json"
	got, err := engine.MarshalState(want)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, got) {
		t.Errorf("state JSON changed (run with -rewrite and bump StateVersion if intended):\n got %s\nwant %s", got, file)
	}
	back, err := engine.UnmarshalState(file)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip: got %+v, want %+v", back, want)
	}
}

func TestStateVersion(t *testing.T) {
	if _, err := engine.UnmarshalState([]byte(`{"version": 2}`)); err == nil {
		t.Error("a newer version must be refused")
	}
	s, err := engine.UnmarshalState([]byte(`{}`))
	if err != nil || s.Version != engine.StateVersion {
		t.Errorf("empty document: %+v, %v", s, err)
	}
}

// TestStateCarriesOver checks that a State produced by one cycle, passed
// through JSON, gives the same next cycle as the in-memory value.
func TestStateCarriesOver(t *testing.T) {
	snap := et.Generate(et.GenConfig{Seed: 3, Nodes: 20, Pending: 200, Running: 40, Accounts: 5})
	for _, sel := range []engine.Selection{engine.SelectWFQ, engine.SelectDRR, engine.SelectLottery} {
		snap.Policy.Selection = sel
		_, st := engine.Schedule(engine.State{}, snap)
		b, err := engine.MarshalState(st)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := engine.UnmarshalState(b)
		if err != nil {
			t.Fatal(err)
		}
		next := snap
		next.Now = snap.Now.Add(10 * time.Minute)
		p1, s1 := engine.Schedule(st, next)
		p2, s2 := engine.Schedule(st2, next)
		if !samePlan(p1, p2) || !reflect.DeepEqual(s1, s2) {
			t.Errorf("%s: plan or state differs after a JSON round trip", sel)
		}
	}
}
