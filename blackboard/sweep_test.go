package blackboard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	a := v.post(t, mk("t", withTTL(5)))
	v.post(t, mk("t", withTTL(100)))
	v.post(t, mk("t"))
	v.post(t, mk("t", withTTL(5), withStatus(StatusRetracted)))
	e := v.post(t, mk("u", withTTL(0)))
	edge := v.post(t, mk("t", withTTL(10)))
	v.clk.Advance(10 * time.Second) // edge: now - ts == ttl, not expired yet

	res, err := v.s.Sweep(ctx, v.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(SweepResult{Expired: 2, Active: 3}, res); diff != "" {
		t.Errorf("first sweep (-want +got):\n%s", diff)
	}
	want := []ev{
		{EventEntryExpired, "blackboard", `{"entry_id":"` + a + `","topic":"t"}`},
		{EventEntryExpired, "blackboard", `{"entry_id":"` + e + `","topic":"u"}`},
		{EventSweepComplete, "blackboard", `{"expired_count":2,"active_count":3}`},
	}
	got := append(v.events(t, EventEntryExpired), v.events(t, EventSweepComplete)...)
	if diff := cmp.Diff(want, got, sortEvs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	for _, id := range []string{a, e} {
		if st := v.hash(t, id)["status"]; st != "expired" {
			t.Errorf("%s status %q, want expired (kept for provenance)", id, st)
		}
	}

	v.clk.Advance(time.Millisecond)
	res, err = v.s.Sweep(ctx, v.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(SweepResult{Expired: 1, Active: 2}, res); diff != "" {
		t.Errorf("second sweep (-want +got):\n%s", diff)
	}
	if st := v.hash(t, edge)["status"]; st != "expired" {
		t.Errorf("edge entry status %q, want expired", st)
	}
	stats, _ := v.rdb.HGet(ctx, v.k.Stats(), "total_expired").Result()
	if stats != "3" {
		t.Errorf("total_expired = %q, want 3", stats)
	}
	if members := v.zmembers(t, v.k.Expiry()); len(members) != 1 {
		t.Errorf("expiry index = %v, want only the ttl-100 entry", members)
	}
}

func TestSweepBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	es := make([]*Entry, 2*sweepBatch+7)
	for i := range es {
		es[i] = mk("t", withTTL(1))
	}
	if _, err := v.s.PostMany(ctx, es); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(2 * time.Second)
	res, err := v.s.Sweep(ctx, v.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != len(es) || res.Active != 0 {
		t.Errorf("Sweep = %+v, want %d expired", res, len(es))
	}
}

// TestEviction posts past MaxEntries and checks the original's order: the
// oldest LOW, then NORMAL, then HIGH, and never CRITICAL, each with a
// removed {reason: evicted} event.
func TestEviction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{MaxEntries: 5})
	name := map[string]string{}
	post := func(label string, p Priority, ts float64) {
		name[v.post(t, mk("t", withPrio(p), withTS(ts)))] = label
	}
	post("L1", Low, 1)
	post("N1", Normal, 2)
	post("H1", High, 3)
	post("C1", Critical, 4)
	post("L2", Low, 5)
	post("N2", Normal, 6)    // evicts L1
	post("C2", Critical, 7)  // L2
	post("C3", Critical, 8)  // N1
	post("C4", Critical, 9)  // N2
	post("C5", Critical, 10) // H1
	post("C6", Critical, 11) // nothing left but CRITICAL: over capacity

	evicted := func() []string {
		out := []string{}
		for _, e := range v.events(t, EventEntryRemoved) {
			for id, label := range name {
				if e.Payload == `{"entry_id":"`+id+`","topic":"t","reason":"evicted"}` {
					out = append(out, label)
				}
			}
		}
		return out
	}
	if diff := cmp.Diff([]string{"L1", "L2", "N1", "N2", "H1"}, evicted()); diff != "" {
		t.Errorf("eviction order (-want +got):\n%s", diff)
	}
	left := []string{}
	for _, id := range v.zmembers(t, v.k.All()) {
		left = append(left, name[id])
	}
	if diff := cmp.Diff([]string{"C1", "C2", "C3", "C4", "C5", "C6"}, left); diff != "" {
		t.Errorf("entries left (-want +got):\n%s", diff)
	}

	// A new entry older than everything is not its own victim (the original
	// evicted before inserting) ...
	post("L0", Low, 0.5)
	if n, _ := v.rdb.ZCard(ctx, v.k.All()).Result(); n != 7 {
		t.Errorf("%d entries, want 7", n)
	}
	// ... but the sweeper evicts it.
	res, err := v.s.Sweep(ctx, v.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Evicted != 1 || evicted()[5] != "L0" {
		t.Errorf("sweep evicted %d (%v), want L0", res.Evicted, evicted())
	}
	stats, err := v.s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.TotalEvicted != 6 || stats.TotalRemoved != 6 || stats.TotalEntries != 6 || stats.StatusDistribution[StatusActive] != 6 {
		t.Errorf("stats = %+v", stats)
	}
}

func TestEvictionUnlimited(t *testing.T) {
	t.Parallel()
	v := newEnv(t, Config{MaxEntries: -1})
	for range 20 {
		v.post(t, mk("t", withPrio(Low)))
	}
	if n, _ := v.rdb.ZCard(context.Background(), v.k.All()).Result(); n != 20 {
		t.Errorf("%d entries, want 20", n)
	}
}

// TestEvictionConcurrent: posters racing past the cap together evict
// exactly down to it, every eviction has its event, and the indexes agree.
func TestEvictionConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const capacity, workers, each = 20, 8, 25
	v := newEnv(t, Config{MaxEntries: capacity})
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			var err error
			for i := range each {
				_, e := v.s.Post(ctx, mk("t", withPrio(Priority((w+i)%3)), withTTL(1000)))
				err = errors.Join(err, e)
			}
			errs <- err
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkConsistent(t, v, capacity)
	stats, err := v.s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	evictions := int64(workers*each - capacity)
	if stats.TotalPosted != workers*each || stats.TotalEvicted != evictions || stats.TotalRemoved != evictions {
		t.Errorf("stats = %+v", stats)
	}
	if n := len(v.events(t, EventEntryRemoved)); int64(n) != evictions {
		t.Errorf("%d removed events, want %d", n, evictions)
	}
}

// checkConsistent verifies that P:all has want members and that every index
// holds exactly the stored entries.
func checkConsistent(t *testing.T, v env, want int) {
	t.Helper()
	ctx := context.Background()
	all := v.zmembers(t, v.k.All())
	if len(all) != want {
		t.Errorf("P:all has %d members, want %d", len(all), want)
	}
	var prios []string
	for p := Low; p <= Critical; p++ {
		prios = append(prios, v.zmembers(t, v.k.Prio(p))...)
	}
	if diff := cmp.Diff(all, prios, sortStrings); diff != "" {
		t.Errorf("prio indexes vs P:all (-all +prio):\n%s", diff)
	}
	var expiry []string
	for _, id := range all {
		e, err := v.s.Get(ctx, id)
		if err != nil {
			t.Errorf("indexed entry %s: %v", id, err)
			continue
		}
		if s, err := v.rdb.ZScore(ctx, v.k.Topic(e.Topic), id).Result(); err != nil || s != e.Timestamp {
			t.Errorf("topic index for %s: %v %v", id, s, err)
		}
		if s, err := v.rdb.ZScore(ctx, v.k.Source(e.SourceModule), id).Result(); err != nil || s != e.Timestamp {
			t.Errorf("source index for %s: %v %v", id, s, err)
		}
		if e.Status == StatusActive && e.TTLSeconds != nil {
			expiry = append(expiry, id)
		}
	}
	if diff := cmp.Diff(expiry, v.zmembers(t, v.k.Expiry()), sortStrings); diff != "" {
		t.Errorf("expiry index (-want +got):\n%s", diff)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	v := newEnv(t, Config{SweepInterval: 5 * time.Millisecond})
	id := v.post(t, mk("t", withTTL(0)))
	v.clk.Advance(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.s.Run(ctx) }()
	timeout := time.After(5 * time.Second)
	for v.hash(t, id)["status"] != "expired" {
		select {
		case <-timeout:
			t.Fatal("Run did not expire the entry")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
}

func TestStep(t *testing.T) {
	t.Parallel()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t", withTTL(1)))
	v.clk.Advance(2 * time.Second)
	if err := v.s.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.hash(t, id)["status"]; st != "expired" {
		t.Errorf("status %q, want expired", st)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{MaxEntries: 100})
	a := v.post(t, mk("x.a", withSource("s1"), withTTL(1)))
	v.post(t, mk("x.a", withSource("s2")))
	b := v.post(t, mk("x.b", withSource("s1")))
	c := v.post(t, mk("x.c", withSource("s1")))
	if err := v.s.Retract(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := v.s.Remove(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	if err := v.s.RegisterModule(ctx, ModuleInfo{Name: "m1"}); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(2 * time.Second) // a lapses but is not swept yet
	got, err := v.s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		TotalEntries: 3, ActiveEntries: 1, MaxEntries: 100, TotalPosted: 4, TotalRemoved: 1,
		RegisteredModules: 1, EventsLength: 7,
		StatusDistribution: map[Status]int64{StatusActive: 2, StatusRetracted: 1},
		EntriesByTopic:     map[string]int64{"x.a": 2, "x.b": 1},
		EntriesBySource:    map[string]int64{"s1": 2, "s2": 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	_ = a
}
