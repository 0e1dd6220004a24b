package providers

import (
	"fmt"
	"testing"
	"time"
)

// TestEndedQueue: Send never blocks; notices wait in the buffer, then in
// the backlog, and all come, in order; before C is called, and past the
// backlog, they are dropped.
func TestEndedQueue(t *testing.T) {
	t.Parallel()
	var q EndedQueue
	q.Send(Handle{Provider: "p", ID: "unheard"}) // nobody listens yet
	c := q.C()
	n := EndedBuffer + EndedBacklog + 3
	sent := make(chan struct{})
	go func() {
		for i := range n {
			q.Send(Handle{Provider: "p", ID: fmt.Sprint(i)})
		}
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatal("Send blocked with nobody reading")
	}
	// The backlog's goroutine may hold one notice out of it, as it waits.
	kept := n - q.Dropped()
	if kept != EndedBuffer+EndedBacklog && kept != EndedBuffer+EndedBacklog+1 {
		t.Errorf("%d notices kept of %d, want the buffer and the backlog's worth", kept, n)
	}
	for i := range kept {
		select {
		case h := <-c:
			if h.ID != fmt.Sprint(i) {
				t.Fatalf("notice %d is %v", i, h)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notice %d never came", i)
		}
	}
	select {
	case h := <-c:
		t.Errorf("an extra notice: %v", h)
	case <-time.After(50 * time.Millisecond):
	}
	// The backlog is empty again: a new notice goes straight to the buffer.
	q.Send(Handle{Provider: "p", ID: "later"})
	if h := <-c; h.ID != "later" {
		t.Errorf("notice %v, want later", h)
	}
}
