package wire

// Preemption telemetry: one compute.preemption entry and one
// compute.job.preempted event per eviction the scheduler orders.
const (
	TopicPreemption   = "compute.preemption"    // data is PreemptionData
	EventJobPreempted = "compute.job.preempted" // payload is PreemptionData plus entry_id
)

// PreemptionData is the data of a compute.preemption entry: a running job
// (the victim) stopped to make room for a more urgent one (the preemptor).
type PreemptionData struct {
	Victim    string `json:"victim"`    // job id
	Preemptor string `json:"preemptor"` // job id
	Node      string `json:"node"`
	Provider  string `json:"provider"` // the node's provider ("" = unknown)
	Account   string `json:"account"`  // the victim's
	Priority  int    `json:"priority"`
	Policy    string `json:"policy"` // priority, fair-share, deadline-aware, resource-based, cost-based, hybrid
	// Mode is what becomes of the victim: cancel (it ends cancelled,
	// error.code preempted), requeue (back to the queue), checkpoint
	// (signalled, then requeued), suspend (paused in place on its node,
	// still running, resumed there later).
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
	// LostWorkSeconds estimates the work thrown away: the victim's run
	// time since its start, or its last verified checkpoint unless it is
	// cancelled.
	LostWorkSeconds float64 `json:"lost_work_seconds"`
	At              float64 `json:"at"` // epoch seconds
}

// PreemptionEntryFields builds a compute.preemption entry: HIGH priority,
// confidence 1, TTL 1 h, tags compute, preemption, scheduler.
func PreemptionEntryFields(d PreemptionData) EntryFields {
	return EntryFields{
		Topic:      TopicPreemption,
		Data:       mustMarshal(d),
		Metadata:   map[string]any{"victim": d.Victim, "preemptor": d.Preemptor, "node": d.Node, "mode": d.Mode},
		Priority:   EntryPriorityHigh,
		Confidence: 1,
		TTLSeconds: 3600,
		Tags:       []string{"compute", "preemption", "scheduler"},
	}
}

// JobPreemptedEvent is the payload of compute.job.preempted.
type JobPreemptedEvent struct {
	PreemptionData
	EntryID string `json:"entry_id"` // the compute.preemption entry ("" if it could not be posted)
}
