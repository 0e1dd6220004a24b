package pool

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/providers"
)

// TestServerRun: a real Redis names its run id (read inside the steps); a
// user refused INFO gets RunUnknown and an error, and its steps still
// work; a server without a run id (miniredis, as the embedded blackboard)
// gets RunStatic, with which a round opens once and is never reopened.
func TestServerRun(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartT(t, redistest.Options{})
	rdb := srv.Client(t)
	if fixed, err := ServerRun(ctx, rdb); err != nil || fixed != "" {
		t.Fatalf("real Redis: %q, %v; want \"\" (read in the steps)", fixed, err)
	}
	if err := rdb.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.ClientOptions()
	opts.Username, opts.Password = "noinfo", "pw"
	limited := redis.NewClient(opts)
	t.Cleanup(func() { _ = limited.Close() })
	fixed, err := ServerRun(ctx, limited)
	if fixed != RunUnknown || err == nil {
		t.Fatalf("user without INFO: %q, %v; want RunUnknown and an error", fixed, err)
	}
	k := blackboard.NewKeys(redistest.Namespace(t))
	reg := NewRegistry(limited, k)
	reg.SetRound(time.Second, fixed)
	if err := reg.Register(ctx, NodeRecord{Node: inventory.Node{Name: "n1", CPUs: 1}}); err != nil {
		t.Fatalf("register without INFO: %v", err)
	}
	rd, err := reg.BeatRound(ctx, "n1")
	if err != nil || rd.Run != RunUnknown {
		t.Fatalf("beat without INFO: %+v, %v", rd, err)
	}

	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = mc.Close() })
	// Plain miniredis answers INFO without a run id, or not at all; the
	// embedded blackboard's INFO has none: never RunID "" (INFO inside a
	// script would hang miniredis).
	if fixed, _ := ServerRun(ctx, mc); fixed == "" {
		t.Fatal("miniredis: ServerRun wants the steps to read a run id it does not have")
	}
	mreg, mch := NewRegistry(mc, k), NewChannel(mc, k)
	mreg.SetRound(time.Minute, RunStatic)
	mch.SetRound(time.Minute, RunStatic)
	if err := mreg.Register(ctx, NodeRecord{Node: inventory.Node{Name: "n1", CPUs: 1}}); err != nil {
		t.Fatal(err)
	}
	rd, err = mreg.BeatRound(ctx, "n1")
	if err != nil || rd.Run != RunStatic || len(rd.Reconcile) != 1 {
		t.Fatalf("miniredis beat: %+v, %v", rd, err)
	}
	if err := mreg.Reconciled(ctx, rd.Run, "n1"); err != nil {
		t.Fatal(err)
	}
	e, err := NewElector(mc, k, ElectorConfig{ID: "s", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := e.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.HSet(ctx, k.Job("j1"), "job_id", "j1", "status", "queued").Err(); err != nil {
		t.Fatal(err)
	}
	errs := mch.Assign(ctx, Fence{Key: e.FenceKey(), Epoch: l.Epoch}, []Assignment{{JobID: "j1", Placement: providers.Placement{Node: "n1", NUMA: -1}}})
	if errs[0] != nil {
		t.Fatalf("assign on miniredis after the round: %v", errs[0])
	}
}
