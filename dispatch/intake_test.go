package dispatch

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/wire"
)

func resolveAll(wire.Request) (Spec, *wire.Error) { return Spec{Timeout: time.Hour}, nil }

func bareScheduler(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	if cfg.Resolve == nil {
		cfg.Resolve = resolveAll
	}
	s, err := New(cfg, nil, nil, nil, nil, pool.Fence{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pendingScheduler(t *testing.T, maxPending int, accounts []engine.Account, held map[string]int) *Scheduler {
	s := bareScheduler(t, Config{MaxPending: maxPending, Accounts: accounts})
	for a, n := range held {
		for i := range n {
			id := fmt.Sprintf("%s-%d", a, i)
			t := &tracked{jobCore: jobCore{jid: id, acct: a}, phase: PhasePending}
			s.jobs_[id] = t
			s.countPendingLocked(t, 1)
		}
	}
	return s
}

// TestIntakeSharesMaxPending: one account holding all of max_pending
// (requests that can never start) no longer stops another's intake.
func TestIntakeSharesMaxPending(t *testing.T) {
	s := pendingScheduler(t, 10, nil, map[string]int{"flood": 10})
	admit := s.intakeAdmit()
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
	admit = pendingScheduler(t, 10, nil, nil).intakeAdmit()
	taken = 0
	for admit("solo") {
		taken++
	}
	if taken != 10 {
		t.Errorf("a lone account took %d, want 10", taken)
	}
	s = pendingScheduler(t, 8, []engine.Account{{Name: "big", Shares: 3}}, map[string]int{"small": 1})
	admit = s.intakeAdmit()
	taken = 0
	for admit("big") {
		taken++
	}
	if taken != 6 {
		t.Errorf("an account with 3 shares beside one with 1 took %d, want 8×3/4 = 6", taken)
	}
}

func TestIncompleteGangsFail(t *testing.T) {
	s := bareScheduler(t, Config{GangTimeout: time.Minute})
	t0 := time.Unix(1_800_000_000, 0)
	member := func(id, gang string, size int, accepted time.Time) *tracked {
		return &tracked{accepted: float64(accepted.Unix()),
			jobCore: jobCore{jid: id, acct: "a", gangID: gang, gangSize: int32(size)}, phase: PhasePending}
	}
	s.jobs_["lone"] = member("lone", "g1", 2, t0)
	s.jobs_["x1"] = member("x1", "g2", 2, t0)
	s.jobs_["x2"] = member("x2", "g2", 2, t0) // complete: waits for room, never fails
	s.jobs_["late"] = member("late", "g3", 3, t0.Add(50*time.Second))
	s.gangN = len(s.jobs_) // as gangJobsLocked counts them
	if got := s.incompleteGangs(t0.Add(59 * time.Second)); len(got) != 0 {
		t.Fatalf("failed before the gang timeout: %+v", got)
	}
	got := s.incompleteGangs(t0.Add(61 * time.Second))
	if len(got) != 1 || got[0].JobID != "lone" || got[0].Reason != "gang_incomplete" || !got[0].Final || got[0].Message == "" {
		t.Fatalf("after the timeout: %+v, want lone alone failed gang_incomplete", got)
	}
}

// TestFutureTimestampIsClamped: an entry stamped after its acceptance
// waits from its acceptance, and is counted.
func TestFutureTimestampIsClamped(t *testing.T) {
	s := bareScheduler(t, Config{})
	accepted := 1_800_000_000.0
	for _, posted := range []float64{accepted + 5, accepted * 1000} {
		j := jobs.Job{JobData: wire.JobData{JobID: "j", Account: "a"}, AcceptedAt: accepted, Request: wire.Request{Template: "t", Account: "a"}}
		j.SubmittedAt = &posted
		tr, werr := s.track(j)
		if werr != nil {
			t.Fatal(werr)
		}
		if want := epochTime(accepted); !tr.submittedAt().Equal(want) {
			t.Errorf("posted %v: submitted %v, want the acceptance %v", posted, tr.submittedAt(), want)
		}
	}
	if n := s.FutureStamps(); n != 2 {
		t.Errorf("future timestamps counted %d, want 2", n)
	}
	past := accepted - 10
	j := jobs.Job{JobData: wire.JobData{JobID: "k", Account: "a"}, AcceptedAt: accepted, Request: wire.Request{Template: "t", Account: "a"}}
	j.SubmittedAt = &past
	tr, _ := s.track(j)
	if !tr.submittedAt().Equal(epochTime(past)) {
		t.Errorf("a past timestamp was changed: %v", tr.submittedAt())
	}
	// The engine plans backfill by the limit the node enforces.
	if tr.timeLimit != time.Hour {
		t.Errorf("time limit %v, want the resolved 1h", tr.timeLimit)
	}
}

// TestSortedIDs: the snapshot's job order, merged from the last order and
// the ids added since, is always every tracked id once, sorted, through
// adds, deletes, re-adds and duplicate adds (and a key added behind its
// back is still found).
func TestSortedIDs(t *testing.T) {
	s := bareScheduler(t, Config{MaxPending: 10})
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 2000 {
		id := fmt.Sprintf("j%03d", rng.IntN(300))
		switch _, ok := s.jobs_[id]; {
		case !ok || rng.IntN(4) == 0: // add (or add again)
			s.jobs_[id] = &tracked{jobCore: jobCore{jid: id}, phase: PhasePending}
			s.newIDs = append(s.newIDs, id)
		default:
			delete(s.jobs_, id)
			s.idsDropped = true
		}
		if step%500 == 499 { // behind its back
			s.jobs_["zz-hidden"] = &tracked{jobCore: jobCore{jid: "zz-hidden"}}
		}
		if step%7 != 0 {
			continue
		}
		got, want := s.sortedIDsLocked(), slices.Sorted(maps.Keys(s.jobs_))
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: order %v, want %v", step, got, want)
		}
	}
}
