package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

// docExamples returns the JSON blocks of docs/wire-format.md that follow an
// "<!-- example: KIND -->" marker, by kind.
func docExamples(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/wire-format.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- example: ([a-z_]+) -->\n```json\n(.*?)\n```")
	out := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = append(out[m[1]], m[2])
	}
	return out
}

// TestDocExamples decodes the public doc's examples with the Go types, so
// the doc cannot show a request the adapter refuses or a job shape it does
// not write.
func TestDocExamples(t *testing.T) {
	ex := docExamples(t)
	for _, kind := range []string{"hash", "entry", "inbox", "request", "job", "utilization", "job_status", "metrics", "event", "dead_letter"} {
		if len(ex[kind]) == 0 {
			t.Errorf("docs/wire-format.md has no %q example", kind)
		}
	}
	for _, data := range ex["request"] {
		if _, err := DecodeRequest([]byte(data), testEntry); err != nil {
			t.Errorf("request example refused: %v\n%s", err, data)
		}
	}
	strict := func(data string, v any) {
		dec := json.NewDecoder(bytes.NewReader([]byte(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("example does not decode into %T: %v\n%s", v, err, data)
		}
	}
	for _, data := range ex["job"] {
		var j JobData
		strict(data, &j)
		if !j.Status.Valid() || j.JobID != JobID(j.RequestEntryID) {
			t.Errorf("job example has status %q or a job_id that is not JobID(request_entry_id)", j.Status)
		}
	}
	for _, data := range ex["job_status"] {
		strict(data, &JobStatusData{})
	}
	for kind, blocks := range ex {
		for _, data := range blocks {
			if !json.Valid([]byte(data)) {
				t.Errorf("%s example is not valid JSON:\n%s", kind, data)
			}
		}
	}
}
