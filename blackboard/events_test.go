package blackboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestEmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		in      Event
		want    Event
		wantErr error
	}{
		"module event": {
			in: Event{Type: "compute.job.completed", Source: "compute", ID: hexID(1), Timestamp: 12.5,
				Payload: json.RawMessage(`{"completed_count":1,"total_completed":3,"entry_id":"e"}`)},
			want: Event{Type: "compute.job.completed", Source: "compute", ID: hexID(1), Timestamp: 12.5,
				Payload: json.RawMessage(`{"completed_count":1,"total_completed":3,"entry_id":"e"}`)},
		},
		"defaults": {
			in:   Event{Type: "x.y"},
			want: Event{Type: "x.y", Source: "system", Timestamp: ts0, Payload: json.RawMessage(`{}`)},
		},
		"empty type":         {in: Event{Source: "m"}, wantErr: ErrInvalid},
		"payload not JSON":   {in: Event{Type: "a", Payload: json.RawMessage(`{`)}, wantErr: ErrInvalid},
		"payload not object": {in: Event{Type: "a", Payload: json.RawMessage(`[1]`)}, wantErr: ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			sid, err := v.s.Emit(ctx, tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Emit = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			got, _, err := v.s.Events(ctx, "0", "", 10, 0)
			if err != nil || len(got) != 1 {
				t.Fatalf("Events = %v, %v", got, err)
			}
			if got[0].StreamID != sid || !ValidID(got[0].ID) {
				t.Errorf("stream id %q (want %q), event id %q", got[0].StreamID, sid, got[0].ID)
			}
			opt := cmpopts.IgnoreFields(Event{}, "StreamID")
			if tc.want.ID == "" {
				opt = cmpopts.IgnoreFields(Event{}, "StreamID", "ID")
			}
			if diff := cmp.Diff(tc.want, got[0], opt); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// emitN emits events of the given types, in order.
func emitN(t *testing.T, v env, types ...string) {
	t.Helper()
	for i, typ := range types {
		if _, err := v.s.Emit(context.Background(), Event{Type: typ, Source: "test",
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

func payloads(evs []Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, string(e.Payload))
	}
	return out
}

func TestEventsReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	emitN(t, v, "compute.job.completed", "blackboard.entry.added", "compute.resource.exhausted",
		"compute", "reasoning.inference.done", "compute.job.completed")

	// Paging through everything with a cursor.
	var pages [][]string
	cursor := "0"
	for range 5 {
		evs, next, err := v.s.Events(ctx, cursor, "", 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		pages = append(pages, payloads(evs))
		cursor = next
	}
	want := [][]string{{`{"i":0}`, `{"i":1}`, `{"i":2}`, `{"i":3}`}, {`{"i":4}`, `{"i":5}`}}
	if diff := cmp.Diff(want, pages); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}

	tests := map[string]struct {
		pattern string
		count   int
		want    []string
		scanned int // EventsScanned: events read, matching or not
	}{
		"compute.* crosses dots": {"compute.*", 100, []string{`{"i":0}`, `{"i":2}`, `{"i":5}`}, 6},
		"exact":                  {"compute", 100, []string{`{"i":3}`}, 6},
		"question and sets":      {"[cr]*.??b.*", 100, []string{`{"i":0}`, `{"i":5}`}, 6},
		"empty pattern = all":    {"", 100, []string{`{"i":0}`, `{"i":1}`, `{"i":2}`, `{"i":3}`, `{"i":4}`, `{"i":5}`}, 6},
		"count bounds the read":  {"compute.*", 2, []string{`{"i":0}`}, 2},
		"no match":               {"cycle.*", 100, []string{}, 6},
		"negated set":            {"[!c]*", 100, []string{`{"i":1}`, `{"i":4}`}, 6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			evs, next, err := v.s.Events(ctx, "0", tc.pattern, tc.count, 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, payloads(evs)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			evs2, next2, scanned, err := v.s.EventsScanned(ctx, "0", tc.pattern, tc.count, 0)
			if err != nil || scanned != tc.scanned || next2 != next || len(evs2) != len(evs) {
				t.Errorf("EventsScanned = %d events, %q, scanned %d, %v; want %d, %q, scanned %d", len(evs2), next2, scanned, err, len(evs), next, tc.scanned)
			}
			if next == "0" {
				t.Errorf("cursor did not advance past filtered events")
			}
		})
	}

	// Replay from a mid-stream cursor.
	all, _, _ := v.s.Events(ctx, "0", "", 100, 0)
	evs, _, err := v.s.Events(ctx, all[3].StreamID, "compute*", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`{"i":5}`}, payloads(evs)); diff != "" {
		t.Errorf("from cursor (-want +got):\n%s", diff)
	}
	if _, _, err := v.s.Events(ctx, "nope", "", 1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad cursor = %v, want ErrInvalid", err)
	}
}

func TestEventsNewOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	evs, cursor, err := v.s.Events(ctx, "$", "", 10, 0)
	if err != nil || len(evs) != 0 || cursor != "0" {
		t.Fatalf("Events($) on empty stream = %v, %q, %v", evs, cursor, err)
	}
	emitN(t, v, "a", "b")
	evs, cursor, err = v.s.Events(ctx, "$", "", 10, 0)
	if err != nil || len(evs) != 0 {
		t.Fatalf("Events($) = %v, %v; want none", evs, err)
	}
	emitN(t, v, "c") // lands between calls; the resolved cursor still sees it
	evs, _, err = v.s.Events(ctx, cursor, "", 10, 0)
	if err != nil || len(evs) != 1 || evs[0].Type != "c" {
		t.Fatalf("Events(cursor) = %v, %v; want c", evs, err)
	}

	// Blocking read: wakes up for an event emitted while it waits.
	cursor = evs[0].StreamID
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = v.s.Emit(ctx, Event{Type: "late"})
	}()
	evs, _, err = v.s.Events(ctx, cursor, "", 10, 5*time.Second)
	if err != nil || len(evs) != 1 || evs[0].Type != "late" {
		t.Fatalf("blocking Events = %v, %v; want late", evs, err)
	}
	last := evs[0].StreamID
	evs, next, err := v.s.Events(ctx, last, "", 10, 30*time.Millisecond)
	if err != nil || len(evs) != 0 || next != last {
		t.Fatalf("timed-out Events = %v, %q, %v; want none and cursor %q", evs, next, err, last)
	}
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	emitN(t, v, "blackboard.entry.old") // before "$": not delivered

	// Subscribe resolves "$" in its own goroutine, at a moment the test
	// cannot see; until it has, what the test posts may fall before its
	// cursor. So the test emits probes (which match the pattern) until the
	// handler has seen one: from then on every event is after the cursor.
	const probe = "blackboard.entry.probe"
	errStop := errors.New("stop")
	got := make(chan Event, 100)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- v.s.Subscribe(ctx, "blackboard.entry.*", "$", func(e Event) error {
			if e.Type == probe {
				select {
				case <-ready:
				default:
					close(ready)
				}
				return nil
			}
			got <- e
			// The handler runs under no lock: it may call back into the store.
			if e.Type == EventEntryAdded {
				if err := v.s.Retract(ctx, payloadID(t, e)); err != nil {
					return err
				}
			}
			if e.Type == EventEntryUpdated {
				return errStop
			}
			return nil
		})
	}()
	waitReady(t, v, probe, ready)
	emitN(t, v, "compute.job.completed")
	id := v.post(t, mk("t"))
	if err := <-done; !errors.Is(err, errStop) {
		t.Fatalf("Subscribe = %v, want the handler's error", err)
	}
	close(got)
	var types []string
	for e := range got {
		types = append(types, e.Type)
	}
	if diff := cmp.Diff([]string{EventEntryAdded, EventEntryUpdated}, types); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if st := v.hash(t, id)["status"]; st != "retracted" {
		t.Errorf("status %q, want retracted by the handler", st)
	}

	// Cancelling the context ends Subscribe with nil: cancelled once it has
	// delivered an event, so that it is running (reading, or blocked in
	// XREAD) rather than not yet started.
	cctx, cancel := context.WithCancel(ctx)
	first := make(chan struct{})
	go func() {
		done <- v.s.Subscribe(cctx, "*", "0", func(Event) error {
			select {
			case <-first:
			default:
				close(first)
			}
			return nil
		})
	}()
	<-first
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Subscribe after cancel = %v, want nil", err)
	}
}

// waitReady emits an event of type probe, and another each time a short
// wait passes, until ready is closed: a subscriber that has seen one is
// reading after its starting cursor. The waits only pace the probes.
func waitReady(t *testing.T, v env, probe string, ready <-chan struct{}) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		emitN(t, v, probe)
		select {
		case <-ready:
			return
		case <-tick.C:
		}
	}
}

func payloadID(t *testing.T, e Event) string {
	var p struct {
		EntryID string `json:"entry_id"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Error(err)
	}
	return p.EntryID
}

func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	types := make([]string, 300)
	for i := range types {
		types[i] = []string{"compute.job.completed", "blackboard.entry.added", "other"}[i%3]
	}
	emitN(t, v, types...)
	tests := map[string]struct {
		pattern   string
		limit     int
		wantN     int
		wantFirst string
		wantLast  string
	}{
		"newest first, limited": {"*", 3, 3, `{"i":299}`, `{"i":297}`},
		"pattern":               {"compute.*", 2, 2, `{"i":297}`, `{"i":294}`},
		"all, across pages":     {"", 0, 300, `{"i":299}`, `{"i":0}`},
		"pattern across pages":  {"blackboard.*", 0, 100, `{"i":298}`, `{"i":1}`},
		"no match":              {"nothing", 5, 0, "", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			evs, err := v.s.History(ctx, tc.pattern, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			p := payloads(evs)
			if len(p) != tc.wantN {
				t.Fatalf("got %d events, want %d", len(p), tc.wantN)
			}
			if len(p) > 0 && (p[0] != tc.wantFirst || p[len(p)-1] != tc.wantLast) {
				t.Errorf("first %s last %s, want %s %s", p[0], p[len(p)-1], tc.wantFirst, tc.wantLast)
			}
		})
	}
}

func TestEventsMaxLen(t *testing.T) {
	t.Parallel()
	v := newEnv(t, Config{EventsMaxLen: 10})
	for range 500 {
		v.post(t, mk("t"))
	}
	n, _ := v.rdb.XLen(context.Background(), v.k.Events()).Result()
	if n >= 500 || n < 10 {
		t.Errorf("events stream length %d, want trimmed to about 10", n)
	}
}
