package wire

import "slices"

// JobErrorLost is the error.code of a job ended failed because the adapter
// could no longer observe it (its supervisor died with no record, or its
// node went silent). It is the one terminal outcome that may be corrected:
// see LegalCorrection.
const JobErrorLost = "lost"

// transitions is the table of legal status changes of a job record, from →
// to, in lifecycle order. A record is created queued (accepted) or
// rejected (refused); every later change is one of these. It is what the
// adapter does (see the calls listed in transitions_test.go):
//
//   - queued → queued: the scheduler's explanation is refreshed;
//   - queued → running: a start (compare-and-set; a start that finds the
//     request withdrawn cancels the job instead: queued → cancelled);
//   - queued → failed, expired, rejected, cancelled: refused after
//     acceptance (config changed, gang incomplete, dead-lettered), deadline
//     infeasible or TTL lapsed, withdrawn;
//   - running → running: a field update of a running job (its handle);
//   - running → succeeded, failed, cancelled: the outcome (failed with
//     error.code "lost" when the process could no longer be observed);
//   - running → queued: a retry or a requeue (a start that never ran, a
//     lost job its template allows to run again).
//
// Terminal statuses have no outgoing transition; the only change after one
// is LegalCorrection's. preempted is reserved for later versions: no
// transition enters or leaves it yet.
var transitions = map[JobStatus][]JobStatus{
	JobQueued:  {JobQueued, JobRunning, JobFailed, JobRejected, JobExpired, JobCancelled},
	JobRunning: {JobQueued, JobRunning, JobSucceeded, JobFailed, JobCancelled},
}

// corrections are the statuses a job ended failed with JobErrorLost may
// move to once its node reports the true outcome.
var corrections = []JobStatus{JobSucceeded, JobFailed, JobCancelled}

// LegalTransition reports whether a job record may move from status from
// to status to. It is a pure status table; a terminal status never changes
// except by LegalCorrection.
func LegalTransition(from, to JobStatus) bool {
	return slices.Contains(transitions[from], to)
}

// LegalCorrection reports whether a terminal outcome may be corrected:
// only a job that ended failed with error.code JobErrorLost (fromCode), whose
// node came back with the true outcome, may move to succeeded, failed (the
// real failure) or cancelled. A change of a job record is legal when
// LegalTransition(from, to) || LegalCorrection(from, code, to).
func LegalCorrection(from JobStatus, fromCode string, to JobStatus) bool {
	return from == JobFailed && fromCode == JobErrorLost && slices.Contains(corrections, to)
}

// Corrections returns the statuses a job ended failed with JobErrorLost may
// be corrected to (a copy), in lifecycle order.
func Corrections() []JobStatus { return slices.Clone(corrections) }

// Transitions returns the table of LegalTransition (a copy): for each
// status with outgoing transitions, the statuses it may move to, in
// lifecycle order (JobStatuses).
func Transitions() map[JobStatus][]JobStatus {
	out := make(map[JobStatus][]JobStatus, len(transitions))
	for from, to := range transitions {
		out[from] = slices.Clone(to)
	}
	return out
}
