package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func popIDs(t *testing.T, in *Inbox, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		it, l, err := in.Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Ack(l); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, it.ID)
	}
	return ids
}

func TestInboxOrder(t *testing.T) {
	tests := map[string]struct {
		push []Item
		want []string
	}{
		"priority 9 first": {
			push: []Item{{ID: "a", Priority: 0}, {ID: "b", Priority: 9}, {ID: "c", Priority: 4}},
			want: []string{"b", "c", "a"},
		},
		"deadline earliest first, none last": {
			push: []Item{
				{ID: "none", Priority: 5},
				{ID: "late", Priority: 5, Deadline: t0.Add(time.Hour)},
				{ID: "soon", Priority: 5, Deadline: t0.Add(time.Minute)},
			},
			want: []string{"soon", "late", "none"},
		},
		"arrival breaks ties": {
			push: []Item{{ID: "1", Priority: 3}, {ID: "2", Priority: 3}, {ID: "3", Priority: 3}},
			want: []string{"1", "2", "3"},
		},
		"priority beats deadline": {
			push: []Item{{ID: "urgent-deadline", Priority: 1, Deadline: t0}, {ID: "high", Priority: 2}},
			want: []string{"high", "urgent-deadline"},
		},
		"modules alternate within a level, deadline orders each round": {
			push: []Item{
				{ID: "a1", Module: "a", Priority: 5}, {ID: "a2", Module: "a", Priority: 5},
				{ID: "b1", Module: "b", Priority: 5, Deadline: t0}, {ID: "b2", Module: "b", Priority: 5},
			},
			want: []string{"b1", "a1", "a2", "b2"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := NewInbox(InboxConfig{})
			for _, it := range tc.push {
				if err := in.Push(it); err != nil {
					t.Fatal(err)
				}
			}
			got := popIDs(t, in, len(tc.want))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pop order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareItems(t *testing.T) {
	a := Item{ID: "a", Priority: 5, Arrived: t0}
	tests := map[string]struct {
		b    Item
		want int
	}{
		"higher priority first":  {b: Item{ID: "b", Priority: 6, Arrived: t0}, want: 1},
		"deadline before none":   {b: Item{ID: "b", Priority: 5, Deadline: t0, Arrived: t0}, want: 1},
		"earlier arrival first":  {b: Item{ID: "b", Priority: 5, Arrived: t0.Add(time.Second)}, want: -1},
		"id breaks the last tie": {b: Item{ID: "b", Priority: 5, Arrived: t0}, want: -1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CompareItems(a, tc.b); got != tc.want {
				t.Errorf("CompareItems = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestInboxFairnessBurst proves the bound: after a 100,000-item burst from
// one module, another module's single request is handed out within the
// next two pops (one item of each active module at its level, plus its own).
func TestInboxFairnessBurst(t *testing.T) {
	const burst = 100_000
	in := NewInbox(InboxConfig{Capacity: burst + 10})
	for i := range burst {
		if err := in.Push(Item{ID: fmt.Sprint("flood-", i), Module: "flood", Priority: 4}); err != nil {
			t.Fatal(err)
		}
	}
	// Serve part of the burst first: the bound must not depend on when the
	// quiet module arrives.
	popIDs(t, in, 1234)
	if err := in.Push(Item{ID: "quiet", Module: "quiet", Priority: 4}); err != nil {
		t.Fatal(err)
	}
	got := popIDs(t, in, 2)
	if got[0] != "quiet" && got[1] != "quiet" {
		t.Fatalf("quiet request not among the next 2 pops: %v", got)
	}

	// With k flooding modules, a newcomer waits at most k pops.
	in = NewInbox(InboxConfig{Capacity: burst + 10})
	const k = 5
	for i := range burst {
		m := fmt.Sprint("flood", i%k)
		if err := in.Push(Item{ID: fmt.Sprint(m, "-", i), Module: m, Priority: 4}); err != nil {
			t.Fatal(err)
		}
	}
	popIDs(t, in, 777)
	if err := in.Push(Item{ID: "quiet", Module: "quiet", Priority: 4}); err != nil {
		t.Fatal(err)
	}
	got = popIDs(t, in, k+1)
	if !contains(got, "quiet") {
		t.Fatalf("quiet request not among the next %d pops: %v", k+1, got)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestInboxFairShares checks that continuously backlogged modules of one
// level are served in turn: after any prefix of pops their counts differ
// by at most one, whatever the arrival pattern.
func TestInboxFairShares(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	in := NewInbox(InboxConfig{Capacity: 100_000})
	mods := []string{"a", "b", "c", "d"}
	sizes := map[string]int{"a": 5000, "b": 300, "c": 3000, "d": 1000}
	n := 0
	// Interleave arrivals randomly but keep every module backlogged.
	left := map[string]int{}
	for m, s := range sizes {
		left[m] = s
	}
	for len(left) > 0 {
		m := mods[r.IntN(len(mods))]
		if left[m] == 0 {
			delete(left, m)
			continue
		}
		left[m]--
		n++
		if err := in.Push(Item{ID: fmt.Sprint(m, n), Module: m, Priority: 7}); err != nil {
			t.Fatal(err)
		}
	}
	served := map[string]int{}
	for range 4 * 300 { // while all four are backlogged
		it, l, err := in.Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_ = in.Ack(l)
		served[it.Module]++
		lo, hi := 1<<30, 0
		for _, m := range mods {
			lo, hi = min(lo, served[m]), max(hi, served[m])
		}
		if hi-lo > 1 {
			t.Fatalf("unfair: %v", served)
		}
	}
}

func TestInboxCapacity(t *testing.T) {
	in := NewInbox(InboxConfig{Capacity: 2})
	for _, id := range []string{"a", "b"} {
		if err := in.Push(Item{ID: id, Module: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Push(Item{ID: "c"}); !errors.Is(err, ErrInboxFull) {
		t.Fatalf("push at capacity: %v, want ErrInboxFull", err)
	}
	if !in.Full() || in.Free() != 0 || in.Len() != 2 {
		t.Fatalf("Full=%v Free=%d Len=%d", in.Full(), in.Free(), in.Len())
	}
	if err := in.Push(Item{ID: "a"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate push: %v", err)
	}
	if err := in.Push(Item{ID: "x", Priority: 10}); err == nil {
		t.Fatal("priority 10 accepted")
	}
	// A leased item still counts against capacity; Ack frees room.
	_, l, _ := in.Pop(t.Context())
	if !in.Full() {
		t.Fatal("leased item freed capacity")
	}
	select {
	case <-in.Room():
	default:
	}
	if err := in.Ack(l); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Room():
	default:
		t.Fatal("no room signal after Ack")
	}
	if diff := cmp.Diff(map[string]int{"m": 1}, in.ModuleCounts()); diff != "" {
		t.Errorf("ModuleCounts (-want +got):\n%s", diff)
	}
}

func TestInboxLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := NewInbox(InboxConfig{LeaseTimeout: 10 * time.Second})
		_ = in.Push(Item{ID: "a", Module: "m", Priority: 1})
		_ = in.Push(Item{ID: "b", Module: "m", Priority: 1})

		it, l1, _ := in.Pop(t.Context())
		if it.ID != "a" || it.Deliveries != 1 {
			t.Fatalf("first pop %+v", it)
		}
		// Nack puts it back at the front.
		if err := in.Nack(l1); err != nil {
			t.Fatal(err)
		}
		if err := in.Ack(l1); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("ack after nack: %v", err)
		}
		it, l2, _ := in.Pop(t.Context())
		if it.ID != "a" || it.Deliveries != 2 {
			t.Fatalf("after nack %+v", it)
		}
		// Return does not count the hand-out.
		if err := in.Return(l2); err != nil {
			t.Fatal(err)
		}
		it, l2, _ = in.Pop(t.Context())
		if it.ID != "a" || it.Deliveries != 2 {
			t.Fatalf("after return %+v", it)
		}

		// Extend keeps it; expiry redelivers it.
		time.Sleep(8 * time.Second)
		l2, err := in.Extend(l2)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		if n := in.ExpireLeases(); n != 0 {
			t.Fatalf("extended lease expired (%d)", n)
		}
		time.Sleep(3 * time.Second)
		it, l3, _ := in.Pop(t.Context())
		if it.ID != "a" || it.Deliveries != 3 {
			t.Fatalf("after expiry %+v", it)
		}
		if err := in.Ack(l2); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("ack of lapsed lease: %v", err)
		}
		if err := in.Ack(l3); err != nil {
			t.Fatal(err)
		}
		if in.Len() != 1 {
			t.Fatalf("Len = %d, want 1", in.Len())
		}
	})
}

// TestInboxPopWakesOnLeaseExpiry: a Pop blocked on an empty queue returns
// the item of a lease that lapses meanwhile.
func TestInboxPopWakesOnLeaseExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := NewInbox(InboxConfig{LeaseTimeout: 30 * time.Second})
		_ = in.Push(Item{ID: "a"})
		_, _, _ = in.Pop(t.Context()) // lease never acked
		start := time.Now()
		it, _, err := in.Pop(t.Context())
		if err != nil || it.ID != "a" {
			t.Fatalf("Pop = %+v, %v", it, err)
		}
		if waited := time.Since(start); waited != 30*time.Second {
			t.Fatalf("redelivered after %v, want 30s", waited)
		}
	})
}

func TestInboxDeadAfterMaxDeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := NewInbox(InboxConfig{LeaseTimeout: time.Second, MaxDeliveries: 2})
		_ = in.Push(Item{ID: "a", Deliveries: 1}) // delivered once before this inbox
		_, l, _ := in.Pop(t.Context())
		_ = in.Nack(l)
		if d := in.TakeDead(); len(d) != 1 || d[0].ID != "a" || d[0].Deliveries != 2 {
			t.Fatalf("dead = %+v", d)
		}
		if in.Len() != 0 {
			t.Fatalf("Len = %d", in.Len())
		}
		_ = in.Push(Item{ID: "b"})
		_, _, _ = in.Pop(t.Context())
		time.Sleep(2 * time.Second)
		_, _, _ = in.Pop(t.Context()) // redelivery 2
		time.Sleep(2 * time.Second)
		in.ExpireLeases()
		if d := in.TakeDead(); len(d) != 1 || d[0].ID != "b" {
			t.Fatalf("dead = %+v", d)
		}
	})
}

func TestInboxRemoveAndRequeue(t *testing.T) {
	in := NewInbox(InboxConfig{})
	for _, id := range []string{"a", "b", "c"} {
		_ = in.Push(Item{ID: id, Module: "m"})
	}
	if _, ok := in.Remove("b"); !ok {
		t.Fatal("remove queued")
	}
	it, l, _ := in.Pop(t.Context())
	if it.ID != "a" {
		t.Fatalf("pop %s", it.ID)
	}
	if !in.Requeue("a") {
		t.Fatal("requeue leased")
	}
	if err := in.Ack(l); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("ack after requeue: %v", err)
	}
	it, l, _ = in.Pop(t.Context())
	if it.ID != "a" {
		t.Fatalf("requeued item lost its place: got %s", it.ID)
	}
	if _, ok := in.Remove("a"); !ok {
		t.Fatal("remove leased")
	}
	if err := in.Ack(l); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("ack after remove: %v", err)
	}
	if _, ok := in.Remove("nope"); ok {
		t.Fatal("removed unknown id")
	}
	got := in.RemoveFunc(func(it Item) bool { return it.ID == "c" })
	if len(got) != 1 || in.Len() != 0 || in.ModuleLen("m") != 0 {
		t.Fatalf("RemoveFunc = %v, Len %d", got, in.Len())
	}
}

func TestInboxPopBlocksUntilPush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := NewInbox(InboxConfig{})
		got := make(chan string, 3)
		for range 3 {
			go func() {
				it, l, err := in.Pop(t.Context())
				if err == nil {
					_ = in.Ack(l)
					got <- it.ID
				}
			}()
		}
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("Pop returned on an empty inbox")
		}
		// Three pushes in a row reach all three waiters through the
		// one-slot wake channel.
		for _, id := range []string{"x", "y", "z"} {
			_ = in.Push(Item{ID: id})
		}
		synctest.Wait()
		if len(got) != 3 {
			t.Fatalf("%d of 3 waiters woke", len(got))
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { _, _, err := in.Pop(ctx); done <- err }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Pop after cancel: %v", err)
		}
	})
}

func TestInboxSnapshot(t *testing.T) {
	in := NewInbox(InboxConfig{})
	_ = in.Push(Item{ID: "lo", Priority: 1})
	_ = in.Push(Item{ID: "hi", Priority: 8})
	_ = in.Push(Item{ID: "mid", Priority: 5})
	_, _, _ = in.Pop(t.Context()) // hi leased
	var got []string
	for _, h := range in.Snapshot() {
		got = append(got, fmt.Sprint(h.ID, ":", h.Leased))
	}
	if diff := cmp.Diff([]string{"mid:false", "lo:false", "hi:true"}, got); diff != "" {
		t.Errorf("Snapshot (-want +got):\n%s", diff)
	}
}

// TestEntryHeapOrder: the module heap's inline sort keys order entries
// exactly as compareEntries does — deadlines of any range, none, equal
// instants in other locations, monotonic readings — and the heap pops
// in that order through pushes and removals.
func TestEntryHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Now() // has a monotonic reading
	deadline := func() time.Time {
		switch rng.IntN(8) {
		case 0:
			return time.Time{}
		case 1:
			return now.Add(time.Duration(rng.IntN(5)) * time.Second)
		case 2:
			return time.Unix(1e11, int64(rng.IntN(3))).In(time.FixedZone("x", 3600))
		case 3:
			return time.Unix(-5, int64(rng.IntN(2)))
		case 4:
			return now.Round(0).Add(time.Duration(rng.IntN(5)) * time.Second)
		}
		return time.Unix(int64(1.7e9+rng.IntN(4)), int64(rng.IntN(3))*5e8).UTC()
	}
	var es []*entry
	for i := range 400 {
		es = append(es, &entry{Item: Item{ID: fmt.Sprint(i), Deadline: deadline()}, seq: uint64(rng.IntN(1000)), index: -1})
	}
	for _, a := range es {
		for _, b := range es[:50] {
			ka, kb := entryKey(a), entryKey(b)
			if got, want := ka.compare(&kb), compareEntries(a, b); got != want {
				t.Fatalf("compare(%v/%d, %v/%d) = %d, compareEntries %d", a.Deadline, a.seq, b.Deadline, b.seq, got, want)
			}
		}
	}
	for i, e := range es {
		e.seq = uint64(i) // unique, as the inbox makes them
	}
	var h entryHeap
	held := map[*entry]bool{}
	for i, e := range es {
		h.push(e)
		held[e] = true
		if i%7 == 3 { // remove one at random
			victim := h[rng.IntN(len(h))].e
			if got := h.remove(victim.index); got != victim || victim.index != -1 {
				t.Fatalf("remove returned %v", got)
			}
			delete(held, victim)
		}
		for k, s := range h {
			if s.e.index != k {
				t.Fatalf("slot %d holds entry with index %d", k, s.e.index)
			}
		}
	}
	var prev *entry
	for len(h) > 0 {
		e := h.pop()
		if prev != nil && compareEntries(prev, e) > 0 {
			t.Fatalf("popped %v/%d after %v/%d", e.Deadline, e.seq, prev.Deadline, prev.seq)
		}
		delete(held, e)
		prev = e
	}
	if len(held) != 0 {
		t.Fatalf("%d entries never popped", len(held))
	}
}
