package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/computeboard/computeboard/wire"
)

// Job is the durable job record P:job:<id>: the compute.job entry's data
// plus what the broker, the scheduler and the node agents need to recover
// after a restart. The record is the source of truth; the entry mirrors
// its JobData after each change.
type Job struct {
	wire.JobData
	Module          string       `json:"module"`           // the request's source_module
	AcceptedAt      float64      `json:"accepted_at"`      // epoch seconds
	UpdatedAt       float64      `json:"updated_at"`       // epoch seconds of the last change
	CancelRequested bool         `json:"cancel_requested"` // the poster retracted the request after acceptance
	Version         int64        `json:"version"`          // transitions so far
	Request         wire.Request `json:"request"`          // the decoded request
	// Handle is the provider's handle of the running task, as JSON (set
	// by Update.Handle; not mirrored into the job entry).
	Handle string `json:"handle,omitempty"`
	// Checkpoint is the job's last checkpoint a node agent verified
	// against its manifest (the job checkpoint protocol: agent/checkpoint.go);
	// nil: none. CheckpointRefused is the latest checkpoint an agent
	// refused (no manifest, a wrong size or sum), with its reason. Record
	// fields "checkpoint" and "checkpoint_refused" (JSON); not mirrored
	// into the job entry.
	Checkpoint        *Checkpoint `json:"checkpoint,omitempty"`
	CheckpointRefused *Checkpoint `json:"checkpoint_refused,omitempty"`
	// SuspendedAt, while the job is running but paused in place (an
	// eviction in suspend mode: its process stopped on its node, keeping
	// its memory), is when it was paused, epoch seconds; nil otherwise.
	// Record field "suspended_at" (empty when not suspended), cleared by
	// Update.Resume and by any transition out of running; not mirrored
	// into the job entry (the entry's status stays running).
	SuspendedAt *float64 `json:"suspended_at,omitempty"`
}

// Checkpoint is one checkpoint of a job (see Job.Checkpoint).
type Checkpoint struct {
	Seq    int64   `json:"seq"`
	Path   string  `json:"path"`
	At     float64 `json:"at"`               // epoch seconds: when it was made (verified: its manifest's time) or refused
	Reason string  `json:"reason,omitempty"` // why it was refused
}

// Update holds the record fields a transition may set; zero values are
// left alone.
type Update struct {
	Node        string
	StdoutPath  string
	StderrPath  string
	ExitCode    *int
	Error       *wire.JobError
	ReasonCode  wire.Code
	Explanation json.RawMessage
	// Handle is the provider's handle of the job's task, as JSON (stored
	// as field "handle", read back as Job.Handle).
	Handle string
	// ExpectNode, when set, is a second condition of the compare-and-set:
	// the record's node field must equal it, or the transition changes
	// nothing and fails with ErrConflict (a node agent's queued → running
	// refuses a job the scheduler has since placed elsewhere).
	ExpectNode string
	// Checkpoint and CheckpointRefused set the record's fields of the
	// same names; NoCheckpoint clears "checkpoint" (the last one verified
	// failed a later check, and no older one is good).
	Checkpoint        *Checkpoint
	CheckpointRefused *Checkpoint
	NoCheckpoint      bool
	// Suspend sets suspended_at to now (a running job paused in place);
	// Resume clears it. A transition out of running clears it too.
	Suspend bool
	Resume  bool
}

// recordPairs encodes the record fields of j (all but request) as HASH
// field/value pairs; null values are omitted.
func recordPairs(j Job) []any { return appendRecordPairs(nil, j) }

// appendRecordPairs appends recordPairs(j) to p.
func appendRecordPairs(p []any, j Job) []any {
	p = append(p,
		"job_id", j.JobID, "request_entry_id", j.RequestEntryID, "idempotency_key", j.IdempotencyKey,
		"account", j.Account, "module", j.Module, "priority", strconv.Itoa(j.Priority),
		"status", string(j.Status), "attempt", strconv.Itoa(j.Attempt), "version", strconv.FormatInt(j.Version, 10),
		"accepted_at", formatFloat(j.AcceptedAt), "updated_at", formatFloat(j.UpdatedAt),
	)
	if j.SubmittedAt != nil {
		p = append(p, "submitted_at", formatFloat(*j.SubmittedAt))
	}
	return p
}

func updatePairs(u Update) []any {
	var p []any
	for _, f := range []struct{ k, v string }{
		{"node", u.Node}, {"stdout_path", u.StdoutPath}, {"stderr_path", u.StderrPath}, {"reason_code", string(u.ReasonCode)},
		{"handle", u.Handle},
	} {
		if f.v != "" {
			p = append(p, f.k, f.v)
		}
	}
	if u.ExitCode != nil {
		p = append(p, "exit_code", strconv.Itoa(*u.ExitCode))
	}
	if u.Error != nil {
		b, _ := json.Marshal(u.Error)
		p = append(p, "error", string(b))
	}
	if len(u.Explanation) > 0 {
		p = append(p, "explanation", string(u.Explanation))
	}
	if u.Checkpoint != nil {
		b, _ := json.Marshal(u.Checkpoint)
		p = append(p, "checkpoint", string(b))
	} else if u.NoCheckpoint {
		p = append(p, "checkpoint", "null")
	}
	if u.CheckpointRefused != nil {
		b, _ := json.Marshal(u.CheckpointRefused)
		p = append(p, "checkpoint_refused", string(b))
	}
	return p
}

// decodeRecord reads a job record HASH.
func decodeRecord(h map[string]string) (Job, error) {
	var j Job
	var errs []error
	num := func(k string, dst *int) {
		if s, ok := h[k]; ok {
			n, err := strconv.Atoi(s)
			errs = append(errs, err)
			*dst = n
		}
	}
	flt := func(k string) *float64 {
		s, ok := h[k]
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(s, 64)
		errs = append(errs, err)
		return &f
	}
	j.JobID, j.RequestEntryID, j.IdempotencyKey = h["job_id"], h["request_entry_id"], h["idempotency_key"]
	j.Account, j.Module, j.Status = h["account"], h["module"], wire.JobStatus(h["status"])
	j.Node, j.StdoutPath, j.StderrPath, j.ReasonCode = h["node"], h["stdout_path"], h["stderr_path"], wire.Code(h["reason_code"])
	j.Handle = h["handle"]
	num("priority", &j.Priority)
	num("attempt", &j.Attempt)
	var v int
	num("version", &v)
	j.Version = int64(v)
	if _, ok := h["exit_code"]; ok {
		var c int
		num("exit_code", &c)
		j.ExitCode = &c
	}
	j.SubmittedAt, j.StartedAt, j.FinishedAt = flt("submitted_at"), flt("started_at"), flt("finished_at")
	if f := flt("accepted_at"); f != nil {
		j.AcceptedAt = *f
	}
	if f := flt("updated_at"); f != nil {
		j.UpdatedAt = *f
	}
	if s, ok := h["error"]; ok {
		j.Error = new(wire.JobError)
		errs = append(errs, json.Unmarshal([]byte(s), j.Error))
	}
	if s, ok := h["explanation"]; ok {
		j.Explanation = json.RawMessage(s)
	}
	if s, ok := h["request"]; ok {
		errs = append(errs, json.Unmarshal([]byte(s), &j.Request))
	} else if s, ok := h["request_data"]; ok {
		j.Request = requestFromData(s, j)
	}
	for k, dst := range map[string]**Checkpoint{"checkpoint": &j.Checkpoint, "checkpoint_refused": &j.CheckpointRefused} {
		if s, ok := h[k]; ok && s != "null" {
			*dst = new(Checkpoint)
			if err := json.Unmarshal([]byte(s), *dst); err != nil {
				*dst = nil // a note, not worth refusing the record over
			}
		}
	}
	if s := h["suspended_at"]; s != "" {
		j.SuspendedAt = flt("suspended_at")
	}
	j.CancelRequested = h["cancel_requested"] == "1"
	if j.JobID == "" || !j.Status.Valid() {
		errs = append(errs, fmt.Errorf("job record without id or valid status"))
	}
	if err := errors.Join(errs...); err != nil {
		return Job{}, fmt.Errorf("decode job record: %w", err)
	}
	return j, nil
}

// requestFromData decodes the request a record keeps as posted
// (request_data; see AcceptSpec.RequestData). Its defaults come from the
// entry (priority, account, idempotency key: wire.DecodeRequest), and the
// record holds what they were at acceptance, so they are taken from j.
// Data that no longer validates (a later version's stricter rule) is read
// as plain JSON: the job was accepted, and its record stays readable.
func requestFromData(data string, j Job) wire.Request {
	r, werr := wire.DecodeRequest([]byte(data), wire.EntryInfo{ID: j.RequestEntryID, SourceModule: j.Module})
	if werr != nil {
		r = wire.Request{}
		_ = json.Unmarshal([]byte(data), &r)
	}
	r.Priority, r.Account, r.IdempotencyKey = j.Priority, j.Account, j.IdempotencyKey
	return r
}

// pairs reads a script's {field, value, ...} reply as a map.
func pairs(v any) map[string]string {
	a, _ := v.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		m[k], _ = a[i+1].(string)
	}
	return m
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
