package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestInboxPopAdmitted: a module whose head is refused is passed over
// (lower priorities and other modules go first) and keeps its place for
// when it is admitted again.
func TestInboxPopAdmitted(t *testing.T) {
	in := NewInbox(InboxConfig{})
	for _, it := range []Item{
		{ID: "a1", Module: "a", Priority: 9}, {ID: "a2", Module: "a", Priority: 9},
		{ID: "b1", Module: "b", Priority: 9}, {ID: "c1", Module: "c", Priority: 1},
	} {
		if err := in.Push(it); err != nil {
			t.Fatal(err)
		}
	}
	take := func(admit func(Item) bool, n int) []string {
		var ids []string
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := in.popAdmitted(ctx, n, admit, func(e *entry) { ids = append(ids, e.ID) })
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		return ids
	}
	notA := func(it Item) bool { return it.Module != "a" }
	if got := take(notA, 10); !cmp.Equal(got, []string{"b1", "c1"}) {
		t.Fatalf("without module a: %v, want [b1 c1]", got)
	}
	if in.Len() != 4 || in.ModuleLen("a") != 2 {
		t.Fatalf("module a's items were not kept: len %d, a %d", in.Len(), in.ModuleLen("a"))
	}
	// Nothing admitted: it waits like an empty inbox, until ctx is done.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := in.popAdmitted(ctx, 1, func(Item) bool { return false }, func(*entry) { t.Error("handed out a refused item") }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if got := take(nil, 10); !cmp.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("module a, admitted again: %v, want [a1 a2]", got)
	}
}
