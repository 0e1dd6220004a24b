package adapter

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// Bounds of GET /api/v1/preemptions?limit=.
const (
	defaultPreemptionList = 50
	maxPreemptionList     = 500
)

// listPreemptions serves GET /api/v1/preemptions?limit=: the latest
// evictions, newest first, each as its compute.job.preempted event has it
// (the compute.preemption entry's data and the entry's id).
//
// It reads the board's compute.preemption entries rather than a ring the
// telemetry publisher would keep in memory. A ring would hold only what
// this process published during its own scheduler term: it would be empty
// after a restart, empty on an adapter that is not the scheduler, and
// would lose everything the previous scheduler evicted at a failover. The
// entries are posted by whichever adapter held the lease, live in Redis
// for their TTL (an hour), and the topic index finds the newest without a
// scan, so every adapter answers the same list itself, with no forwarding
// to the scheduler. Only the compute module's entries count: a module that
// posts on the topic cannot add rows.
func (p *poolMember) listPreemptions(w http.ResponseWriter, r *http.Request) {
	limit := defaultPreemptionList
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxPreemptionList {
			writeJSON(w, http.StatusBadRequest, apiError("bad_request",
				"limit must be an integer 0..500 (0: the default, 50)"))
			return
		}
		if n > 0 {
			limit = n
		}
	}
	// One more than asked says whether there are more.
	ents, err := p.store.Query(r.Context(), blackboard.Query{
		Topics:        []string{wire.TopicPreemption},
		SourceModules: []string{sourceCompute},
		Statuses:      []blackboard.Status{blackboard.StatusActive, blackboard.StatusConsumed},
		Limit:         limit + 1,
	})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError("internal", err.Error()))
		return
	}
	out := []wire.JobPreemptedEvent{}
	for _, e := range ents {
		var d wire.PreemptionData
		if e.Topic != wire.TopicPreemption || json.Unmarshal(e.Data, &d) != nil {
			continue // a subtopic, or not ours to read
		}
		out = append(out, wire.JobPreemptedEvent{PreemptionData: d, EntryID: e.ID})
	}
	// Query orders by priority (every compute.preemption entry is HIGH),
	// then by when each entry was posted; the eviction's own time orders
	// them exactly.
	slices.SortStableFunc(out, func(a, b wire.JobPreemptedEvent) int { return cmp.Compare(b.At, a.At) })
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	// How far back the list reaches: the entries' TTL.
	window := wire.PreemptionEntryFields(wire.PreemptionData{}).TTLSeconds
	writeJSON(w, http.StatusOK, map[string]any{"preemptions": out, "more": more, "window_seconds": window})
}
