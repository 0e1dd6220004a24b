package jobs

import (
	"context"
	"encoding/json"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// EventJobFinished is raised (source "compute") once a job reaches a
// terminal status, whatever it is: succeeded, failed, rejected, expired
// or cancelled. Its payload is JobFinishedEvent. Delivery is at least
// once: a refusal finished again after a crash raises it again.
const EventJobFinished = "compute.job.finished"

// JobFinishedEvent is the payload of EventJobFinished.
type JobFinishedEvent struct {
	JobID          string         `json:"job_id"`
	Status         wire.JobStatus `json:"status"`
	RequestEntryID string         `json:"request_entry_id"`
	Account        string         `json:"account"`
	ExitCode       *int           `json:"exit_code"`  // null unless the process exited
	ErrorCode      string         `json:"error_code"` // error.code, or "" (succeeded)
	ReasonCode     wire.Code      `json:"reason_code"`
	FinishedAt     *float64       `json:"finished_at"`
}

// EmitFinished raises EventJobFinished for jd if it is terminal (nothing
// otherwise). Transition calls it; a request that ends before it has a
// record (rejected, expired, cancelled) gets it from whoever ends it. The
// job has ended already: a failure to emit is logged, not returned.
func (s *Store) EmitFinished(ctx context.Context, jd wire.JobData) { _ = s.emitFinished(ctx, jd) }

// emitFinished is EmitFinished, and returns the failure it logs.
func (s *Store) emitFinished(ctx context.Context, jd wire.JobData) error {
	if !jd.Status.Terminal() {
		return nil
	}
	ev, err := finishedEvent(jd)
	if err == nil {
		_, err = s.board.Emit(ctx, ev)
	}
	if err != nil {
		s.log.Warn("job finished, event not emitted", "job", jd.JobID, "status", jd.Status, "err", err)
	}
	return err
}

// finishedEvent is EventJobFinished for a terminal jd.
func finishedEvent(jd wire.JobData) (blackboard.Event, error) {
	ev := JobFinishedEvent{JobID: jd.JobID, Status: jd.Status, RequestEntryID: jd.RequestEntryID,
		Account: jd.Account, ExitCode: jd.ExitCode, ReasonCode: jd.ReasonCode, FinishedAt: jd.FinishedAt}
	if jd.Error != nil {
		ev.ErrorCode = jd.Error.Code
	}
	p, err := json.Marshal(ev)
	if err != nil {
		return blackboard.Event{}, err
	}
	return blackboard.Event{Type: EventJobFinished, Source: wire.SourceModule, Payload: p}, nil
}

// EventJobCorrected is raised (source "compute") when a job's terminal
// status is replaced by its true outcome: a job ended `lost` because its
// node went silent, whose node came back and reported how it really ended.
// compute.job.finished is raised again with the new status too, so a
// waiter that saw the first one learns the outcome. Payload:
// JobCorrectedEvent.
const EventJobCorrected = "compute.job.corrected"

// JobCorrectedEvent is the payload of EventJobCorrected.
type JobCorrectedEvent struct {
	JobFinishedEvent
	PreviousStatus wire.JobStatus `json:"previous_status"`
}

func (s *Store) emitCorrected(ctx context.Context, jd wire.JobData, from wire.JobStatus) {
	ev := JobCorrectedEvent{JobFinishedEvent: JobFinishedEvent{JobID: jd.JobID, Status: jd.Status, RequestEntryID: jd.RequestEntryID,
		Account: jd.Account, ExitCode: jd.ExitCode, ReasonCode: jd.ReasonCode, FinishedAt: jd.FinishedAt}, PreviousStatus: from}
	if jd.Error != nil {
		ev.ErrorCode = jd.Error.Code
	}
	p, err := json.Marshal(ev)
	if err == nil {
		_, err = s.board.Emit(ctx, blackboard.Event{Type: EventJobCorrected, Source: wire.SourceModule, Payload: p})
	}
	if err != nil {
		s.log.Warn("job corrected, event not emitted", "job", jd.JobID, "status", jd.Status, "err", err)
	}
}
