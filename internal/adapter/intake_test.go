package adapter

import (
	"fmt"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

func pendingDispatcher(maxPending int, accounts []engine.Account, held map[string]int) *dispatcher {
	cfg := &Config{}
	cfg.Scheduler.MaxPending = maxPending
	d := &dispatcher{cfg: cfg, accounts: accounts, pending: map[string]*tracked{}}
	for a, n := range held {
		for i := range n {
			id := fmt.Sprintf("%s-%d", a, i)
			d.pending[id] = &tracked{rec: jobs.Job{JobData: wire.JobData{JobID: id, Account: a}}}
		}
	}
	return d
}

// TestIntakeSharesMaxPending: one account holding all of max_pending
// (requests that can never start) no longer stops another's intake.
func TestIntakeSharesMaxPending(t *testing.T) {
	d := pendingDispatcher(10, nil, map[string]int{"flood": 10})
	admit := d.intakeAdmit()
	if admit("flood") {
		t.Error("the flooding account took more while holding all of max_pending")
	}
	taken := 0
	for admit("quiet") {
		taken++
	}
	if taken != 5 {
		t.Errorf("a newly arrived account took %d, want its share 10×1/2 = 5", taken)
	}
	if admit("flood") {
		t.Error("the flooding account took more while over its share")
	}

	// Alone, an account may use all of max_pending.
	admit = pendingDispatcher(10, nil, nil).intakeAdmit()
	taken = 0
	for admit("solo") {
		taken++
	}
	if taken != 10 {
		t.Errorf("a lone account took %d, want 10", taken)
	}

	// Shares weigh: 3:1.
	d = pendingDispatcher(8, []engine.Account{{Name: "big", Shares: 3}}, map[string]int{"small": 1})
	admit = d.intakeAdmit()
	taken = 0
	for admit("big") {
		taken++
	}
	if taken != 6 {
		t.Errorf("an account with 3 shares beside one with 1 took %d, want 8×3/4 = 6", taken)
	}
}

func TestIncompleteGangsFail(t *testing.T) {
	cfg := &Config{}
	cfg.Scheduler.GangTimeout = Duration(time.Minute)
	t0 := time.Unix(1_800_000_000, 0)
	d := &dispatcher{cfg: cfg, pending: map[string]*tracked{}, running: map[string]*tracked{}}
	member := func(id, gang string, size int, accepted time.Time) *tracked {
		return &tracked{rec: jobs.Job{JobData: wire.JobData{JobID: id, Account: "a"}, AcceptedAt: float64(accepted.Unix())},
			ej: engine.Job{ID: id, Account: "a", GangID: gang, GangSize: size}}
	}
	d.pending["lone"] = member("lone", "g1", 2, t0)
	d.pending["x1"] = member("x1", "g2", 2, t0)
	d.pending["x2"] = member("x2", "g2", 2, t0) // complete: waits for room, never fails
	d.pending["late"] = member("late", "g3", 3, t0.Add(50*time.Second))
	if got := d.incompleteGangs(t0.Add(59 * time.Second)); len(got) != 0 {
		t.Fatalf("failed before the gang timeout: %+v", got)
	}
	got := d.incompleteGangs(t0.Add(61 * time.Second))
	if len(got) != 1 || got[0].JobID != "lone" || got[0].Reason != "gang_incomplete" || !got[0].Final || got[0].Message == "" {
		t.Fatalf("after the timeout: %+v, want lone alone failed gang_incomplete", got)
	}
}

// TestFutureTimestampIsClamped: an entry stamped after its acceptance (a
// poster's clock ahead, or milliseconds sent as seconds) waits from its
// acceptance, and is counted; the average wait never goes negative.
func TestFutureTimestampIsClamped(t *testing.T) {
	cfg, err := parseConfigAs([]byte("templates:\n  t: {command: [/bin/true]}\n"), t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	d := &dispatcher{cfg: cfg}
	accepted := 1_800_000_000.0
	for _, posted := range []float64{accepted + 5, accepted * 1000} {
		j := jobs.Job{JobData: wire.JobData{JobID: "j", Account: "a"}, AcceptedAt: accepted,
			Request: wire.Request{Template: "t", Account: "a"}}
		j.SubmittedAt = &posted
		tr, werr := d.track(j)
		if werr != nil {
			t.Fatal(werr)
		}
		if want := epochTime(accepted); !tr.ej.Submitted.Equal(want) {
			t.Errorf("posted %v: submitted %v, want the acceptance %v", posted, tr.ej.Submitted, want)
		}
	}
	if n := d.futureStamps.Load(); n != 2 {
		t.Errorf("future timestamps counted %d, want 2", n)
	}
	past := accepted - 10
	j := jobs.Job{JobData: wire.JobData{JobID: "k", Account: "a"}, AcceptedAt: accepted, Request: wire.Request{Template: "t", Account: "a"}}
	j.SubmittedAt = &past
	tr, _ := d.track(j)
	if !tr.ej.Submitted.Equal(epochTime(past)) {
		t.Errorf("a past timestamp was changed: %v", tr.ej.Submitted)
	}
	// The engine plans backfill by the limit the provider enforces.
	if tr.ej.TimeLimit != time.Hour {
		t.Errorf("time limit %v, want the template's default 1h", tr.ej.TimeLimit)
	}
}
