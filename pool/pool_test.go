package pool

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/providers"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newElector(t *testing.T, rdb redis.UniversalClient, k blackboard.Keys, id string, ttl time.Duration) *Elector {
	t.Helper()
	e, err := NewElector(rdb, k, ElectorConfig{ID: id, URL: "http://" + id, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLeaseOneHolderAndEpochs(t *testing.T) {
	rdb, ns := redistest.New(t)
	k := blackboard.NewKeys(ns)
	ctx := context.Background()
	a := newElector(t, rdb, k, "a", time.Second)
	b := newElector(t, rdb, k, "b", time.Second)

	la, ok, err := a.TryAcquire(ctx)
	if err != nil || !ok || la.Epoch != 1 {
		t.Fatalf("a acquire: %+v %v %v", la, ok, err)
	}
	lb, ok, err := b.TryAcquire(ctx)
	if err != nil || ok {
		t.Fatalf("b acquired a held lease: %+v %v %v", lb, ok, err)
	}
	if lb.Holder != "a" || lb.URL != "http://a" || lb.Epoch != 1 {
		t.Fatalf("b sees holder %+v, want a at epoch 1", lb)
	}
	// Re-acquiring is a refresh at the same epoch.
	if la2, ok, _ := a.TryAcquire(ctx); !ok || la2.Epoch != 1 {
		t.Fatalf("a refresh: %+v %v", la2, ok)
	}
	// The lease expires: b takes it at a new epoch, a's renewal fails.
	rdb.PExpire(ctx, k.PoolLease(), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	lb, ok, err = b.TryAcquire(ctx)
	if err != nil || !ok || lb.Epoch != 2 {
		t.Fatalf("b after expiry: %+v %v %v", lb, ok, err)
	}
	if ok, err := a.Renew(ctx, 1); err != nil || ok {
		t.Fatalf("deposed a renewed: %v %v", ok, err)
	}
	// A deposed scheduler's release does not free b's lease.
	_ = a.Release(ctx, 1)
	if cur, ok, _ := b.Current(ctx); !ok || cur.Holder != "b" {
		t.Fatalf("after a's release the holder is %+v %v", cur, ok)
	}
	if ok, err := b.Renew(ctx, 2); err != nil || !ok {
		t.Fatalf("b renew: %v %v", ok, err)
	}
	if err := b.Release(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Current(ctx); ok {
		t.Fatal("lease still held after release")
	}
}

// A queued job record, as the job store writes it (only the fields the
// assignment reads).
func putQueued(t *testing.T, rdb redis.UniversalClient, k blackboard.Keys, id string) {
	t.Helper()
	if err := rdb.HSet(context.Background(), k.Job(id), "job_id", id, "status", "queued").Err(); err != nil {
		t.Fatal(err)
	}
}

func TestAssignIsFenced(t *testing.T) {
	rdb, ns := redistest.New(t)
	k := blackboard.NewKeys(ns)
	ctx := context.Background()
	a := newElector(t, rdb, k, "a", time.Second)
	b := newElector(t, rdb, k, "b", time.Second)
	la, _, _ := a.TryAcquire(ctx)
	ch := NewChannel(rdb, k)
	putQueued(t, rdb, k, "j1")
	putQueued(t, rdb, k, "j2")

	fa := Fence{Key: a.FenceKey(), Epoch: la.Epoch}
	pl := providers.Placement{Node: "n1", NUMA: -1, GPUs: []string{"GPU-1"}}
	if errs := ch.Assign(ctx, fa, []Assignment{{JobID: "j1", Placement: pl}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// b is elected; a's next assignment changes nothing.
	rdb.Del(ctx, k.PoolLease())
	lb, ok, _ := b.TryAcquire(ctx)
	if !ok {
		t.Fatal("b not elected")
	}
	errs := ch.Assign(ctx, fa, []Assignment{{JobID: "j2", Placement: pl}})
	if !errors.Is(errs[0], ErrFenced) {
		t.Fatalf("stale epoch assign: %v, want ErrFenced", errs[0])
	}
	if node := rdb.HGet(ctx, k.Job("j2"), "node").Val(); node != "" {
		t.Fatalf("fenced assign set node %q", node)
	}
	if n := rdb.XLen(ctx, k.NodeAssign("n1")).Val(); n != 1 {
		t.Fatalf("node stream has %d orders, want 1 (the fenced one not written)", n)
	}
	if err := ch.Stop(ctx, fa, "n1", "j1", "x"); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale stop: %v", err)
	}
	fb := Fence{Key: b.FenceKey(), Epoch: lb.Epoch}
	errs = ch.Assign(ctx, fb, []Assignment{{JobID: "j2", Placement: pl}, {JobID: "nope", Placement: pl}})
	if errs[0] != nil || !errors.Is(errs[1], ErrNoJob) {
		t.Fatalf("current epoch: %v", errs)
	}
	rdb.HSet(ctx, k.Job("j1"), "status", "running")
	if errs := ch.Assign(ctx, fb, []Assignment{{JobID: "j1", Placement: pl}}); !errors.Is(errs[0], ErrNotQueued) {
		t.Fatalf("running job assigned: %v", errs[0])
	}
}

func TestChannelDeliversAndRedeliversUnacked(t *testing.T) {
	rdb, ns := redistest.New(t)
	k := blackboard.NewKeys(ns)
	ctx := context.Background()
	e := newElector(t, rdb, k, "s", time.Second)
	l, _, _ := e.TryAcquire(ctx)
	f := Fence{Key: e.FenceKey(), Epoch: l.Epoch}
	ch := NewChannel(rdb, k)
	for _, id := range []string{"j1", "j2", "j3"} {
		putQueued(t, rdb, k, id)
	}
	// Orders written before the agent's group exists are still read.
	errs := ch.Assign(ctx, f, []Assignment{
		{JobID: "j1", Placement: providers.Placement{Node: "n1", NUMA: 0, CPUs: []int{2, 3}}},
		{JobID: "j2", Placement: providers.Placement{Node: "n2", NUMA: -1, MIG: []string{"MIG-a"}}},
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	nodes := []string{"n1", "n2"}
	if err := ch.EnsureGroups(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	if err := ch.EnsureGroups(ctx, nodes); err != nil {
		t.Fatalf("second EnsureGroups: %v", err)
	}
	msgs, err := ch.Read(ctx, "agent-1", nodes, 10, 0, false)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("read: %v %+v", err, msgs)
	}
	byJob := map[string]Message{}
	for _, m := range msgs {
		byJob[m.JobID] = m
	}
	if m := byJob["j1"]; m.Node != "n1" || m.Kind != KindStart || !slices.Equal(m.Placement.CPUs, []int{2, 3}) || m.Placement.NUMA != 0 {
		t.Fatalf("j1 order: %+v", m)
	}
	if m := byJob["j2"]; m.Node != "n2" || !slices.Equal(m.Placement.MIG, []string{"MIG-a"}) {
		t.Fatalf("j2 order: %+v", m)
	}
	if got := rdb.HGet(ctx, k.Job("j2"), "node").Val(); got != "n2" {
		t.Fatalf("record node %q", got)
	}
	if ids, _ := ch.NodeJobs(ctx, "n1"); !slices.Equal(ids, []string{"j1"}) {
		t.Fatalf("n1 jobs %v", ids)
	}
	// The agent acks j1 only, reporting its start in the same round trip,
	// then "restarts": j2 comes back as pending.
	last, err := ch.LastReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rt := redistest.CountRoundTrips(rdb)
	if err := ch.ReportAck(ctx, []Report{{JobID: "j1", Node: "n1", Event: EventStarted, Status: "running"}}, []Message{byJob["j1"]}); err != nil {
		t.Fatal(err)
	}
	if n := rt.N(); n != 1 {
		t.Errorf("ReportAck took %d round trips, want 1", n)
	}
	if rs, err := ch.Reports(ctx, last, 10, 0); err != nil || len(rs) != 1 || rs[0].JobID != "j1" || rs[0].Event != EventStarted {
		t.Fatalf("report after ReportAck: %v %+v", err, rs)
	}
	if msgs, _ := ch.Read(ctx, "agent-1", nodes, 10, 0, false); len(msgs) != 0 {
		t.Fatalf("new orders after reading all: %+v", msgs)
	}
	msgs, err = ch.Read(ctx, "agent-1", nodes, 10, 0, true)
	if err != nil || len(msgs) != 1 || msgs[0].JobID != "j2" {
		t.Fatalf("pending re-read: %v %+v", err, msgs)
	}
	if err := ch.Stop(ctx, f, "n2", "j2", "request retracted"); err != nil {
		t.Fatal(err)
	}
	msgs, _ = ch.Read(ctx, "agent-1", nodes, 10, 100*time.Millisecond, false)
	if len(msgs) != 1 || msgs[0].Kind != KindStop || msgs[0].Reason != "request retracted" {
		t.Fatalf("stop order: %+v", msgs)
	}
	if err := ch.Settle(ctx, "n1", "j1"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := ch.NodeJobs(ctx, "n1"); len(ids) != 0 {
		t.Fatalf("settled job still listed: %v", ids)
	}
	// A malformed order is returned with Err set, not dropped silently.
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.NodeAssign("n1"), Values: []any{"kind", "start", "job", "j9", "placement", "{"}})
	msgs, _ = ch.Read(ctx, "agent-1", nodes, 10, 0, false)
	if len(msgs) != 1 || msgs[0].Err == nil {
		t.Fatalf("malformed order: %+v", msgs)
	}
}

func TestReports(t *testing.T) {
	rdb, ns := redistest.New(t)
	ch := NewChannel(rdb, blackboard.NewKeys(ns))
	ctx := context.Background()
	last, err := ch.LastReport(ctx)
	if err != nil || last != "0-0" {
		t.Fatalf("empty: %q %v", last, err)
	}
	if err := ch.Report(ctx, Report{JobID: "a", Node: "n1", Event: EventStarted}, Report{JobID: "b", Node: "n2", Event: EventEnded}); err != nil {
		t.Fatal(err)
	}
	rs, err := ch.Reports(ctx, last, 10, 0)
	if err != nil || len(rs) != 2 || rs[0].JobID != "a" || rs[1].Event != EventEnded {
		t.Fatalf("%v %+v", err, rs)
	}
	rs, _ = ch.Reports(ctx, rs[1].ID, 10, 0)
	if len(rs) != 0 {
		t.Fatalf("after the last: %+v", rs)
	}

	// ReportSettle: the end's report, and the job gone from its node's
	// set (and only that job), in one round trip.
	if last, err = ch.LastReport(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ch.Hold(ctx, "n1", "a", "c"); err != nil {
		t.Fatal(err)
	}
	rt := redistest.CountRoundTrips(rdb)
	if err := ch.ReportSettle(ctx, Report{JobID: "a", Node: "n1", Event: EventEnded, Status: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	if n := rt.N(); n != 1 {
		t.Errorf("ReportSettle took %d round trips, want 1", n)
	}
	rs, err = ch.Reports(ctx, last, 10, 0)
	if err != nil || len(rs) != 1 || rs[0] != (Report{ID: rs[0].ID, JobID: "a", Node: "n1", Event: EventEnded, Status: "succeeded"}) {
		t.Fatalf("report after ReportSettle: %v %+v", err, rs)
	}
	if ids, _ := ch.NodeJobs(ctx, "n1"); !slices.Equal(ids, []string{"c"}) {
		t.Errorf("n1 jobs after ReportSettle(a): %v, want [c]", ids)
	}
}

func TestRegistry(t *testing.T) {
	rdb, ns := redistest.New(t)
	k := blackboard.NewKeys(ns)
	ctx := context.Background()
	r := NewRegistry(rdb, k)
	recs := []NodeRecord{
		{Node: inventory.Node{Name: "gpu1", CPUs: 8, MemoryMiB: 32768, GPUs: []inventory.GPU{{UUID: "GPU-x", Model: "H100", MemoryMiB: 81920}}}, Agent: "a1", Provider: "local"},
		{Node: inventory.Node{Name: "cpu1", CPUs: 4, MemoryMiB: 8192}, Agent: "a2", Provider: "local", Confined: []string{"cpu", "memory"}},
	}
	if err := r.Register(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(ctx, NodeRecord{}); err == nil {
		t.Fatal("a nameless node registered")
	}
	nodes, _, err := r.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("%v %+v", err, nodes)
	}
	if nodes[0].Name != "cpu1" || nodes[1].Name != "gpu1" || nodes[1].GPUs[0].UUID != "GPU-x" || nodes[0].LastBeat.IsZero() {
		t.Fatalf("nodes: %+v", nodes)
	}
	rdb.ZAdd(ctx, k.PoolBeats(), redis.Z{Score: 1000, Member: "cpu1"})
	if err := r.Beat(ctx, "cpu1"); err != nil {
		t.Fatal(err)
	}
	nodes, _, _ = r.Nodes(ctx)
	if time.Since(nodes[0].LastBeat) > time.Minute {
		t.Fatalf("beat not renewed: %v", nodes[0].LastBeat)
	}
	rdb.HSet(ctx, k.PoolNodes(), "junk", "{")
	nodes, _, err = r.Nodes(ctx)
	if err == nil || len(nodes) != 2 {
		t.Fatalf("junk record: %v, %d nodes", err, len(nodes))
	}
	if err := r.Deregister(ctx, "cpu1", "junk"); err != nil {
		t.Fatal(err)
	}
	if nodes, _, err = r.Nodes(ctx); err != nil || len(nodes) != 1 {
		t.Fatalf("after deregister: %v %+v", err, nodes)
	}
}

func TestRunHandsOverOnStopAndStepsDownWhenDeposed(t *testing.T) {
	rdb, ns := redistest.New(t)
	k := blackboard.NewKeys(ns)
	ttl := 600 * time.Millisecond
	a := newElector(t, rdb, k, "a", ttl)
	b := newElector(t, rdb, k, "b", ttl)
	var leading atomic.Int32
	var epochs []int64
	lead := func(name string, got chan<- int64) func(ctx context.Context, l Leader) error {
		return func(ctx context.Context, l Leader) error {
			if leading.Add(1) != 1 {
				t.Errorf("%s leads while another does", name)
			}
			got <- l.Epoch
			<-ctx.Done()
			leading.Add(-1)
			return nil
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	gotA, gotB := make(chan int64, 4), make(chan int64, 4)
	doneA := make(chan struct{})
	go func() { _ = a.Run(ctxA, lead("a", gotA)); close(doneA) }()
	epochs = append(epochs, <-gotA)
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	go func() { _ = b.Run(ctxB, lead("b", gotB)) }()
	select {
	case <-gotB:
		t.Fatal("b elected while a holds the lease")
	case <-time.After(2 * ttl):
	}
	// A clean stop releases the lease: b takes over well within the lease time.
	stopA()
	<-doneA
	select {
	case ep := <-gotB:
		epochs = append(epochs, ep)
	case <-time.After(ttl):
		t.Fatal("b not elected within the lease time after a's clean stop")
	}
	if epochs[1] <= epochs[0] {
		t.Fatalf("epochs %v not increasing", epochs)
	}
	// Someone deletes b's lease and c takes it: b must step down.
	rdb.Del(context.Background(), k.PoolLease())
	c := newElector(t, rdb, k, "c", ttl)
	if _, ok, _ := c.TryAcquire(context.Background()); !ok {
		t.Fatal("c not elected")
	}
	deadline := time.Now().Add(3 * ttl)
	for leading.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if leading.Load() != 0 {
		t.Fatal("deposed b still leads")
	}
}
