package pool

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/providers"
)

// TestReconciliationRound: after the Redis server (re)starts, nothing is
// assigned until every registered node has re-asserted its jobs
// (Reconciled) or the round's timeout has passed; a restart opens a new
// round, and a node's word for the old one does not close it.
func TestReconciliationRound(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{AOF: true})
	rdb := srv.Client(t)
	k := blackboard.NewKeys(redistest.Namespace(t))
	ctx := context.Background()
	e := newElector(t, rdb, k, "s", 10*time.Second)
	l, _, _ := e.TryAcquire(ctx)
	f := Fence{Key: e.FenceKey(), Epoch: l.Epoch}
	reg, ch := NewRegistry(rdb, k), NewChannel(rdb, k)
	if err := reg.Register(ctx, NodeRecord{Node: inventory.Node{Name: "n1", CPUs: 4}}, NodeRecord{Node: inventory.Node{Name: "n2", CPUs: 4}}); err != nil {
		t.Fatal(err)
	}
	pl := providers.Placement{Node: "n1", NUMA: -1}
	assign := func(id string) error {
		putQueued(t, rdb, k, id)
		return ch.Assign(ctx, f, []Assignment{{JobID: id, Placement: pl}})[0]
	}
	if err := assign("j1"); !errors.Is(err, ErrReconciling) {
		t.Fatalf("assign before any node reconciled: %v, want ErrReconciling", err)
	}
	rd, err := reg.BeatRound(ctx, "n1")
	if err != nil || rd.Run == "" || !slices.Equal(rd.Reconcile, []string{"n1"}) {
		t.Fatalf("beat: %+v, %v; want n1 to reconcile", rd, err)
	}
	if err := reg.Reconciled(ctx, rd.Run, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := assign("j2"); !errors.Is(err, ErrReconciling) {
		t.Fatalf("assign with n2 not reconciled: %v, want ErrReconciling", err)
	}
	if err := reg.Reconciled(ctx, rd.Run, "n2"); err != nil {
		t.Fatal(err)
	}
	if err := assign("j3"); err != nil {
		t.Fatalf("assign after the round: %v", err)
	}
	if rd2, _ := reg.BeatRound(ctx, "n1", "n2"); len(rd2.Reconcile) != 0 || rd2.Run != rd.Run {
		t.Fatalf("beat after the round: %+v", rd2)
	}

	// A restart: a new run id, a new round.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := assign("j4"); !errors.Is(err, ErrReconciling) {
		t.Fatalf("assign after a restart: %v, want ErrReconciling", err)
	}
	if err := reg.Reconciled(ctx, rd.Run, "n1", "n2"); !errors.Is(err, ErrReconciling) {
		t.Fatalf("reconciled for the old run: %v, want ErrReconciling", err)
	}
	rd3, err := reg.BeatRound(ctx, "n1", "n2")
	if err != nil || rd3.Run == rd.Run || len(rd3.Reconcile) != 2 {
		t.Fatalf("beat after the restart: %+v, %v; want a new run and both nodes to reconcile", rd3, err)
	}
	if open, _ := reg.RoundOpen(ctx); !open {
		t.Fatal("round not open")
	}
	// n2 is down: the round ends at its timeout without it. (Long enough
	// for the four round trips before the first assign on a loaded CI
	// machine: 300 ms was not.)
	const timeout = 2 * time.Second
	reg.SetRound(timeout, "")
	ch.SetRound(timeout, "")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	rd4, _ := reg.BeatRound(ctx, "n1")
	if err := reg.Reconciled(ctx, rd4.Run, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := assign("j5"); !errors.Is(err, ErrReconciling) {
		t.Fatalf("assign with n2 silent, before the timeout: %v", err)
	}
	time.Sleep(timeout + 100*time.Millisecond)
	if err := assign("j6"); err != nil {
		t.Fatalf("assign after the round's timeout: %v", err)
	}
}

// A board with no registered node has nothing to reconcile.
func TestNoNodesNoRound(t *testing.T) {
	rdb, ns := redistest.New(t)
	k := blackboard.NewKeys(ns)
	if open, err := NewRegistry(rdb, k).RoundOpen(context.Background()); err != nil || open {
		t.Fatalf("round open %v, %v; want closed", open, err)
	}
}

// TestUnregisteredNodeBeats: a node that beats but is not registered
// (its registration lost with Redis's data) is named so its agent
// registers it again; while a round is open it must reconcile too, and the
// round waits for it.
func TestUnregisteredNodeBeats(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{AOF: true})
	rdb := srv.Client(t)
	k := blackboard.NewKeys(redistest.Namespace(t))
	ctx := context.Background()
	reg := NewRegistry(rdb, k)
	if err := reg.Register(ctx, NodeRecord{Node: inventory.Node{Name: "n1", CPUs: 4}}); err != nil {
		t.Fatal(err)
	}
	// (Register's beat opened the board's first round.)
	rd, err := reg.BeatRound(ctx, "n1", "n2")
	if err != nil || !slices.Equal(rd.Unregistered, []string{"n2"}) || !slices.Equal(rd.Reconcile, []string{"n1", "n2"}) {
		t.Fatalf("beat of n1 (registered) and n2 (not): %+v, %v; want n2 unregistered, both to reconcile", rd, err)
	}
	if err := reg.Reconciled(ctx, rd.Run, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	if rd, err := reg.BeatRound(ctx, "n2"); err != nil || len(rd.Reconcile) != 0 || !slices.Equal(rd.Unregistered, []string{"n2"}) {
		t.Fatalf("beat of n2 after the round: %+v, %v; want it unregistered, nothing to reconcile", rd, err)
	}
	if open, _ := reg.RoundOpen(ctx); open {
		t.Fatal("round open after every registered node reconciled")
	}

	// A restart opens a round for n1 only; n2 beats, is not registered,
	// and must reconcile as well.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	rd, err = reg.BeatRound(ctx, "n2")
	if err != nil || !slices.Equal(rd.Reconcile, []string{"n2"}) || !slices.Equal(rd.Unregistered, []string{"n2"}) {
		t.Fatalf("beat of unregistered n2 in an open round: %+v, %v; want it to reconcile and register", rd, err)
	}
	if err := reg.Reconciled(ctx, rd.Run, "n1"); err != nil {
		t.Fatal(err)
	}
	if open, _ := reg.RoundOpen(ctx); !open {
		t.Fatal("round closed before n2 reconciled")
	}
	if err := reg.Reconciled(ctx, rd.Run, "n2"); err != nil {
		t.Fatal(err)
	}
	if open, _ := reg.RoundOpen(ctx); open {
		t.Fatal("round open after n1 and n2 reconciled")
	}
}
