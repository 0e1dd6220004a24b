package wire

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJobStatusTerminal(t *testing.T) {
	want := map[JobStatus]bool{
		JobQueued: false, JobRunning: false, JobPreempted: false,
		JobSucceeded: true, JobFailed: true, JobRejected: true, JobExpired: true, JobCancelled: true,
	}
	got := map[JobStatus]bool{}
	for _, s := range JobStatuses() {
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
		got[s] = s.Terminal()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Terminal() mismatch (-want +got):\n%s", diff)
	}
	if JobStatus("pending").Valid() || JobStatus("pending").Terminal() {
		t.Error(`JobStatus("pending") is valid or terminal`)
	}
}

// TestRejectedJobJSON pins the job entry's JSON: every key present, nulls
// where nothing is known yet.
func TestRejectedJobJSON(t *testing.T) {
	_, decErr := DecodeRequest([]byte(`{"template":"x","queue":"gpu"}`), testEntry)
	got, err := json.Marshal(RejectedJob(testEntry, decErr, 1767225601.5))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"job_id":"e4948e21da6913daf8d6921080e285fc","request_entry_id":"0123456789abcdef0123456789abcdef",` +
		`"idempotency_key":"","account":"reasoning","priority":4,"status":"rejected","attempt":0,"exit_code":null,` +
		`"error":{"code":"unknown_field","message":"wire: unknown_field: queue: is not a field of compute.request v1"},` +
		`"reason_code":"unknown_field","submitted_at":1767225600,"started_at":null,"finished_at":1767225601.5,` +
		`"node":"","stdout_path":"","stderr_path":"","explanation":null}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("RejectedJob JSON mismatch (-want +got):\n%s", diff)
	}
}
