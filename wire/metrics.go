package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
)

// EntryFields are the fields of an entry the compute adapter posts, as
// plain values; the caller adds entry_id, source_module (SourceModule),
// timestamp and status. Priority is an entry priority 0..3.
type EntryFields struct {
	Topic      string
	Data       json.RawMessage // a JSON object
	Metadata   map[string]any
	Priority   int
	Confidence float64
	TTLSeconds float64
	Tags       []string // sorted, unique
}

// Thresholds of the telemetry rules.
const (
	ExhaustionThreshold   = 0.95 // max utilization at which an entry is CRITICAL and compute.resource.exhausted fires
	HighUtilization       = 0.8  // max utilization above which an entry is HIGH
	HighPendingJobs       = 100  // pending jobs above which compute.job_status is HIGH
	MaxMetricsPerEntry    = 20   // named values in one compute.metrics entry
	UtilizationKeyMax     = "max_utilization"
	MetricsKeyMetricCount = "metric_count"
)

// UtilizationEntryFields builds a compute.resource_utilization entry from
// utilization fractions keyed by resource ("cpu", "memory", "gpu", …). Data
// is the fractions plus max_utilization; metadata is {max_utilization,
// unit: "fraction"}; priority CRITICAL at ≥ 0.95, HIGH above 0.8, else
// NORMAL; confidence 0.9; TTL 60 s. A value outside [0, 1] is an error:
// it is usually a percentage.
func UtilizationEntryFields(util map[string]float64) (EntryFields, error) {
	data := make(map[string]float64, len(util)+1)
	for k, v := range util {
		switch {
		case k == "" || k == UtilizationKeyMax:
			return EntryFields{}, fmt.Errorf("wire: utilization key %q is reserved or empty", k)
		case !(v >= 0 && v <= 1):
			return EntryFields{}, fmt.Errorf("wire: utilization %s = %v is not a fraction in [0, 1]", k, v)
		}
		data[k] = v
	}
	peak := MaxUtilization(util)
	data[UtilizationKeyMax] = peak
	prio := EntryPriorityNormal
	switch {
	case peak >= ExhaustionThreshold:
		prio = EntryPriorityCritical
	case peak > HighUtilization:
		prio = EntryPriorityHigh
	}
	return EntryFields{
		Topic:      TopicResourceUtilization,
		Data:       mustMarshal(data),
		Metadata:   map[string]any{UtilizationKeyMax: peak, "unit": "fraction"},
		Priority:   prio,
		Confidence: 0.9,
		TTLSeconds: 60,
		Tags:       []string{"compute", "resource", "utilization"},
	}, nil
}

// MaxUtilization returns the largest value of util, or 0 for none.
func MaxUtilization(util map[string]float64) float64 {
	peak := 0.0
	for _, v := range util {
		peak = max(peak, v)
	}
	return peak
}

// ExhaustionEdge is the edge trigger for compute.resource.exhausted: given
// whether resources were exhausted at the last post and the new maximum
// utilization, it returns the new state and whether to emit the event. It
// fires once on crossing ExhaustionThreshold and re-arms below it.
func ExhaustionEdge(wasExhausted bool, maxUtilization float64) (exhausted, fire bool) {
	exhausted = maxUtilization >= ExhaustionThreshold
	return exhausted, exhausted && !wasExhausted
}

// JobStatusData is the data of a compute.job_status entry.
type JobStatusData struct {
	PendingJobs   int           `json:"pending_jobs"`   // accepted, not yet running
	RunningJobs   int           `json:"running_jobs"`   // running now
	CompletedJobs int           `json:"completed_jobs"` // succeeded since the adapter started
	FailedJobs    int           `json:"failed_jobs"`    // failed or expired since the adapter started
	CancelledJobs int           `json:"cancelled_jobs"` // cancelled since the adapter started, queued or running
	InboxDepth    int           `json:"inbox_depth"`    // requests waiting in the intake lanes
	Statistics    JobStatistics `json:"statistics"`
}

// JobStatistics are the scheduler's running totals and averages.
type JobStatistics struct {
	JobsSubmitted         int     `json:"jobs_submitted"`
	JobsCompleted         int     `json:"jobs_completed"`
	JobsFailed            int     `json:"jobs_failed"`
	JobsCancelled         int     `json:"jobs_cancelled"`
	AverageWaitTime       float64 `json:"average_wait_time"`       // seconds from submission to start
	AverageTurnaroundTime float64 `json:"average_turnaround_time"` // seconds from submission to finish
}

// JobStatusEntryFields builds a compute.job_status entry: metadata
// {pending, running, completed}; HIGH if more than 100 jobs are pending,
// else NORMAL; confidence 0.95; TTL 120 s. Negative counts and non-finite
// averages are errors.
func JobStatusEntryFields(s JobStatusData) (EntryFields, error) {
	st := s.Statistics
	if min(s.PendingJobs, s.RunningJobs, s.CompletedJobs, s.FailedJobs, s.CancelledJobs, s.InboxDepth, st.JobsSubmitted, st.JobsCompleted, st.JobsFailed, st.JobsCancelled) < 0 {
		return EntryFields{}, fmt.Errorf("wire: job status has a negative count: %+v", s)
	}
	if !(st.AverageWaitTime >= 0 && st.AverageTurnaroundTime >= 0) || math.IsInf(st.AverageWaitTime+st.AverageTurnaroundTime, 0) {
		return EntryFields{}, fmt.Errorf("wire: job status averages must be finite and ≥ 0: %+v", st)
	}
	prio := EntryPriorityNormal
	if s.PendingJobs > HighPendingJobs {
		prio = EntryPriorityHigh
	}
	return EntryFields{
		Topic:      TopicJobStatus,
		Data:       mustMarshal(s),
		Metadata:   map[string]any{"pending": s.PendingJobs, "running": s.RunningJobs, "completed": s.CompletedJobs},
		Priority:   prio,
		Confidence: 0.95,
		TTLSeconds: 120,
		Tags:       []string{"compute", "job", "queue", "scheduler"},
	}, nil
}

// MetricsEntryFields builds a compute.metrics entry: data is metric_count
// (how many finite metrics were given) plus the first MaxMetricsPerEntry
// metrics by name; LOW; confidence 0.85; TTL 180 s. Non-finite values are
// dropped (JSON cannot carry them); the name metric_count is reserved.
func MetricsEntryFields(metrics map[string]float64) (EntryFields, error) {
	if _, ok := metrics[MetricsKeyMetricCount]; ok {
		return EntryFields{}, fmt.Errorf("wire: metric name %q is reserved", MetricsKeyMetricCount)
	}
	var names []string
	for _, name := range slices.Sorted(maps.Keys(metrics)) {
		if v := metrics[name]; !math.IsNaN(v) && !math.IsInf(v, 0) {
			names = append(names, name)
		}
	}
	data := map[string]float64{MetricsKeyMetricCount: float64(len(names))}
	for _, name := range names[:min(len(names), MaxMetricsPerEntry)] {
		data[name] = metrics[name]
	}
	return EntryFields{
		Topic:      TopicMetrics,
		Data:       mustMarshal(data),
		Metadata:   map[string]any{},
		Priority:   EntryPriorityLow,
		Confidence: 0.85,
		TTLSeconds: 180,
		Tags:       []string{"compute", "metrics", "monitoring"},
	}, nil
}

// JobCompletedEvent is the payload of compute.job.completed, emitted when
// the completed counter rises.
type JobCompletedEvent struct {
	CompletedCount int    `json:"completed_count"` // jobs completed since the previous event
	TotalCompleted int    `json:"total_completed"` // jobs completed since the adapter started
	EntryID        string `json:"entry_id"`        // the compute.job_status entry that reported it
}

// ResourceExhaustedEvent is the payload of compute.resource.exhausted,
// emitted when ExhaustionEdge fires.
type ResourceExhaustedEvent struct {
	Utilization    map[string]float64 `json:"utilization"` // fractions, as in the entry's data without max_utilization
	MaxUtilization float64            `json:"max_utilization"`
	Threshold      float64            `json:"threshold"` // ExhaustionThreshold
	EntryID        string             `json:"entry_id"`  // the compute.resource_utilization entry
}

// mustMarshal marshals values whose types cannot fail (maps of finite
// floats, structs of ints and finite floats), as checked by the callers.
func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("wire: " + err.Error())
	}
	return b
}
