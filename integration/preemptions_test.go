package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// preemptionList is the answer of GET /api/v1/preemptions.
type preemptionList struct {
	Preemptions   []wire.JobPreemptedEvent `json:"preemptions"`
	More          bool                     `json:"more"`
	WindowSeconds float64                  `json:"window_seconds"`
}

// postPreemption posts a compute.preemption entry as the scheduler's
// telemetry does (source compute), or as module source would.
func postPreemption(t *testing.T, st *blackboard.Store, source string, d wire.PreemptionData) string {
	t.Helper()
	f := wire.PreemptionEntryFields(d)
	e := blackboard.NewEntry(f.Topic, source, f.Data)
	e.Priority = blackboard.Priority(f.Priority)
	e.Confidence = f.Confidence
	e.TTLSeconds = &f.TTLSeconds
	e.Tags = f.Tags
	id, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestPreemptionsAPI: GET /api/v1/preemptions lists the board's
// compute.preemption entries of the compute module, newest eviction
// first (by the eviction's time, not the order of posting), at most limit
// of them (default 50, 0..500, anything else a structured 400), saying
// whether there are more; nothing when there was no eviction. A second
// adapter, not the scheduler, answers the same list itself: the list is
// the board's, not the memory of the adapter that evicted.
func TestPreemptionsAPI(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	cfg := writeConfig(t, testConfig(board, ""))
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--fake-nodes", "1")
	api := apiURL(t, out)
	waitScheduler(t, api)
	_, out2 := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--role", "scheduler")
	standby := apiURL(t, out2)

	get := func(base, query string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(base + "/api/v1/preemptions" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET /api/v1/preemptions%s: Content-Type %q", query, ct)
		}
		return resp.StatusCode, body
	}
	list := func(base, query string) preemptionList {
		t.Helper()
		code, body := get(base, query)
		var l preemptionList
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil || l.Preemptions == nil {
			t.Fatalf("GET /api/v1/preemptions%s: %d %s", query, code, body)
		}
		return l
	}

	// No eviction yet: an empty list (not null).
	if got := list(api, ""); len(got.Preemptions) != 0 || got.More || got.WindowSeconds != 3600 {
		t.Errorf("before any eviction: %+v, want an empty list, no more, a 3600 s window", got)
	}

	// Three evictions, posted out of the order they happened in; one
	// entry on the topic from a module, and one retracted: neither counts.
	base := 1.8e9
	mk := func(victim string, at float64) wire.PreemptionData {
		return wire.PreemptionData{Victim: victim, Preemptor: "crit-" + victim, Node: "n1", Provider: "fake", Account: "batch",
			Priority: 2, Policy: "priority", Mode: "requeue", Reason: "for a CRITICAL job", LostWorkSeconds: at - base, At: at}
	}
	want := []wire.JobPreemptedEvent{{PreemptionData: mk("c", base+30)}, {PreemptionData: mk("b", base+20)}, {PreemptionData: mk("a", base+10)}}
	want[1].EntryID = postPreemption(t, st, "compute", want[1].PreemptionData)
	want[2].EntryID = postPreemption(t, st, "compute", want[2].PreemptionData)
	want[0].EntryID = postPreemption(t, st, "compute", want[0].PreemptionData)
	postPreemption(t, st, "mallory", mk("forged", base+40))
	gone := postPreemption(t, st, "compute", mk("retracted", base+50))
	if err := st.Retract(t.Context(), gone); err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		base, query string
		want        []wire.JobPreemptedEvent
		wantMore    bool
	}{
		"default":                  {api, "", want, false},
		"limit 0 is the default":   {api, "?limit=0", want, false},
		"limit 2":                  {api, "?limit=2", want[:2], true},
		"limit 1":                  {api, "?limit=1", want[:1], true},
		"limit 3":                  {api, "?limit=3", want, false},
		"limit 500":                {api, "?limit=500", want, false},
		"the standby adapter":      {standby, "", want, false},
		"the standby adapter, one": {standby, "?limit=1", want[:1], true},
	} {
		got := list(tc.base, tc.query)
		if diff := cmp.Diff(tc.want, got.Preemptions); diff != "" || got.More != tc.wantMore {
			t.Errorf("%s: GET /api/v1/preemptions%s: more %v, want %v; list (-want +got):\n%s", name, tc.query, got.More, tc.wantMore, diff)
		}
	}

	for _, q := range []string{"?limit=501", "?limit=-1", "?limit=ten", "?limit=1.5", "?limit="} {
		code, body := get(api, q)
		if q == "?limit=" { // empty: the default
			if code != http.StatusOK {
				t.Errorf("GET /api/v1/preemptions%s: %d %s, want 200", q, code, body)
			}
			continue
		}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error.Code != "bad_request" || e.Error.Message == "" {
			t.Errorf("GET /api/v1/preemptions%s: %d %s, want 400 with error.code bad_request", q, code, body)
		}
	}
}
