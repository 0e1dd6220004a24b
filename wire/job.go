package wire

import "encoding/json"

// Topics and names of the compute adapter. The adapter posts as
// SourceModule and registers under that name.
const (
	SourceModule = "compute"

	TopicRequest             = "compute.request"              // posted by modules; data is a Request
	TopicJob                 = "compute.job"                  // one entry per job; data is JobData
	TopicJobStatus           = "compute.job_status"           // scheduler summary; data is JobStatusData
	TopicResourceUtilization = "compute.resource_utilization" // data is utilization fractions
	TopicMetrics             = "compute.metrics"              // data is named metric values

	EventJobCompleted      = "compute.job.completed"      // payload is JobCompletedEvent
	EventResourceExhausted = "compute.resource.exhausted" // payload is ResourceExhaustedEvent
)

// JobStatus is the status of a job. A job starts queued (or rejected) and
// ends in a terminal status. preempted is not terminal: the job goes back
// to queued, or ends failed with error code "preempted" when it has no
// retries left.
type JobStatus string

// Job statuses.
const (
	JobQueued    JobStatus = "queued"    // accepted, waiting for a placement
	JobRunning   JobStatus = "running"   // started on a node
	JobSucceeded JobStatus = "succeeded" // exited 0
	JobFailed    JobStatus = "failed"    // exited non-zero, timed out, or could not start; see error
	JobRejected  JobStatus = "rejected"  // never accepted; reason_code says why
	JobExpired   JobStatus = "expired"   // the request's TTL or deadline lapsed before it could run
	JobCancelled JobStatus = "cancelled" // stopped on request
	JobPreempted JobStatus = "preempted" // stopped to make room for more urgent work
)

// JobStatuses returns every status, in lifecycle order.
func JobStatuses() []JobStatus {
	return []JobStatus{JobQueued, JobRunning, JobSucceeded, JobFailed, JobRejected, JobExpired, JobCancelled, JobPreempted}
}

// Terminal reports whether no further transition follows s.
func (s JobStatus) Terminal() bool {
	switch s {
	case JobSucceeded, JobFailed, JobRejected, JobExpired, JobCancelled:
		return true
	}
	return false
}

// Valid reports whether s is one of JobStatuses.
func (s JobStatus) Valid() bool {
	switch s {
	case JobQueued, JobRunning, JobSucceeded, JobFailed, JobRejected, JobExpired, JobCancelled, JobPreempted:
		return true
	}
	return false
}

// JobData is the data of a compute.job entry. Its entry_id is JobID, its
// parent_id is RequestEntryID, its source_module is SourceModule, and the
// adapter updates it in place on each transition. Every key is always
// present; the nullable ones are null until known.
type JobData struct {
	JobID          string    `json:"job_id"`
	RequestEntryID string    `json:"request_entry_id"`
	IdempotencyKey string    `json:"idempotency_key"` // "" if the request was rejected before it was read
	Account        string    `json:"account"`
	Priority       int       `json:"priority"` // request priority 0..9
	Status         JobStatus `json:"status"`
	Attempt        int       `json:"attempt"`   // 0 until the first start, then 1, 2, …
	ExitCode       *int      `json:"exit_code"` // null until the process exits
	Error          *JobError `json:"error"`     // null unless rejected, failed, expired or cancelled
	// ReasonCode is the Code of a rejection (status rejected); "" otherwise.
	ReasonCode  Code     `json:"reason_code"`
	SubmittedAt *float64 `json:"submitted_at"` // epoch seconds: the request entry's timestamp
	StartedAt   *float64 `json:"started_at"`   // epoch seconds of the latest start
	FinishedAt  *float64 `json:"finished_at"`  // epoch seconds on reaching a terminal status
	Node        string   `json:"node"`         // "" until placed
	StdoutPath  string   `json:"stdout_path"`  // "" until started
	StderrPath  string   `json:"stderr_path"`  // "" until started
	// Explanation is the engine's account of the latest scheduling decision
	// for this job; null until there is one. Its shape is not yet part of the
	// v1 contract: readers must treat it as opaque.
	Explanation json.RawMessage `json:"explanation"`
}

// JobError says why a job did not succeed. Code is a reason code for
// rejections and a short snake_case word otherwise (e.g. "exit_status",
// "timeout", "preempted"); Message is for humans.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RejectedJob returns the job data for a request entry refused with err at
// now (epoch seconds). Account and priority are the defaults the request
// would have had, since a refused request's own values cannot be trusted.
func RejectedJob(in EntryInfo, err *Error, now float64) JobData {
	submitted := in.Timestamp
	return JobData{
		JobID:          JobID(in.ID),
		RequestEntryID: in.ID,
		Account:        in.SourceModule,
		Priority:       DefaultPriority(in.Priority),
		Status:         JobRejected,
		Error:          &JobError{Code: string(err.Code), Message: err.Error()},
		ReasonCode:     err.Code,
		SubmittedAt:    &submitted,
		FinishedAt:     &now,
	}
}
