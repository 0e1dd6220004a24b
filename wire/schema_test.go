package wire

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const docsSchemaDir = "../docs/schema"

// TestSchemaCopiesIdentical keeps docs/schema/ byte-identical to the
// embedded wire/schema/. To fix a failure: cp wire/schema/*.json docs/schema/.
func TestSchemaCopiesIdentical(t *testing.T) {
	names := func(fsys fs.FS) []string {
		m, err := fs.Glob(fsys, "*.json")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	docs := os.DirFS(docsSchemaDir)
	if diff := cmp.Diff(names(Schemas()), names(docs)); diff != "" {
		t.Fatalf("schema files differ between wire/schema and docs/schema (-wire +docs):\n%s", diff)
	}
	for _, name := range names(Schemas()) {
		a, _ := fs.ReadFile(Schemas(), name)
		b, err := fs.ReadFile(docs, name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("docs/schema/%s differs from wire/schema/%s; copy the wire one over", name, name)
		}
	}
}

func TestSchemasWellFormed(t *testing.T) {
	want := []string{
		"compute-job.v1.schema.json", "compute-metrics.v1.schema.json", "compute-request.v1.schema.json",
		"dead-letter.v1.schema.json", "entry.schema.json", "events.v1.schema.json", "inbox-message.v1.schema.json",
		"inbox-message.v2.schema.json",
	}
	got, _ := fs.Glob(Schemas(), "*.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schema files mismatch (-want +got):\n%s", diff)
	}
	for _, name := range got {
		s := loadSchema(t, name)
		if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %v", name, s["$schema"])
		}
		if id := s["$id"]; id != "https://github.com/computeboard/computeboard/schema/v1/"+name {
			t.Errorf("%s: $id = %v", name, id)
		}
	}
	if !bytes.Equal(RequestSchema(), mustRead(t, RequestSchemaFile)) {
		t.Error("RequestSchema() is not " + RequestSchemaFile)
	}
}

// TestSchemaFieldsMatchStructs keeps each Go type's JSON field names equal
// to the properties of its schema, both ways.
func TestSchemaFieldsMatchStructs(t *testing.T) {
	tests := map[string]struct {
		file    string
		pointer string // path to the object schema inside the file
		typ     reflect.Type
	}{
		"Request":                {RequestSchemaFile, "", reflect.TypeFor[Request]()},
		"Resources":              {RequestSchemaFile, "$defs/resources", reflect.TypeFor[Resources]()},
		"JobData":                {"compute-job.v1.schema.json", "", reflect.TypeFor[JobData]()},
		"JobError":               {"compute-job.v1.schema.json", "$defs/error", reflect.TypeFor[JobError]()},
		"JobStatusData":          {"compute-metrics.v1.schema.json", "$defs/job_status", reflect.TypeFor[JobStatusData]()},
		"JobStatistics":          {"compute-metrics.v1.schema.json", "$defs/job_status/properties/statistics", reflect.TypeFor[JobStatistics]()},
		"JobCompletedEvent":      {"events.v1.schema.json", "$defs/job_completed", reflect.TypeFor[JobCompletedEvent]()},
		"ResourceExhaustedEvent": {"events.v1.schema.json", "$defs/resource_exhausted", reflect.TypeFor[ResourceExhaustedEvent]()},
		"PreemptionData":         {"compute-metrics.v1.schema.json", "$defs/preemption", reflect.TypeFor[PreemptionData]()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := lookup(t, loadSchema(t, tc.file), tc.pointer).(map[string]any)
			props, _ := obj["properties"].(map[string]any)
			var schemaNames []string
			for k := range props {
				schemaNames = append(schemaNames, k)
			}
			goNames := slices.Collect(func(yield func(string) bool) {
				for k := range jsonFields(tc.typ) {
					if !yield(k) {
						return
					}
				}
			})
			slices.Sort(schemaNames)
			slices.Sort(goNames)
			if diff := cmp.Diff(goNames, schemaNames); diff != "" {
				t.Errorf("%s fields differ from %s#/%s properties (-go +schema):\n%s", name, tc.file, tc.pointer, diff)
			}
			if req, ok := obj["required"]; ok && tc.typ != reflect.TypeFor[Request]() {
				// Output types always write every key.
				var got []string
				for _, r := range req.([]any) {
					got = append(got, r.(string))
				}
				slices.Sort(got)
				if diff := cmp.Diff(goNames, got); diff != "" {
					t.Errorf("%s: required differs from the Go fields (-go +schema):\n%s", name, diff)
				}
			}
		})
	}
}

// TestRequestSchemaLimits keeps the schema's numbers equal to the Go limits.
func TestRequestSchemaLimits(t *testing.T) {
	s := loadSchema(t, RequestSchemaFile)
	tests := map[string]float64{
		"properties/priority/maximum":                             MaxPriority,
		"properties/name/maxLength":                               MaxNameLen,
		"properties/template/maxLength":                           MaxIdentLen,
		"properties/account/maxLength":                            MaxIdentLen,
		"properties/gang_id/maxLength":                            MaxIdentLen,
		"properties/idempotency_key/maxLength":                    MaxKeyLen,
		"properties/command/maxItems":                             MaxArgs,
		"properties/arguments/maxItems":                           MaxArgs,
		"$defs/arg/maxLength":                                     MaxArgLen,
		"properties/environment/maxProperties":                    MaxEnv,
		"properties/environment/propertyNames/maxLength":          MaxIdentLen,
		"properties/environment/additionalProperties/maxLength":   MaxEnvValueLen,
		"properties/node_selector/maxProperties":                  MaxNodeSelector,
		"properties/node_selector/propertyNames/maxLength":        MaxIdentLen,
		"properties/node_selector/additionalProperties/maxLength": MaxKeyLen,
		"properties/deadline/maximum":                             MaxEpochSeconds,
		"properties/estimated_duration/maximum":                   MaxDurationSeconds,
		"properties/timeout/maximum":                              MaxDurationSeconds,
		"properties/max_retries/maximum":                          MaxRetries,
		"properties/gang_size/maximum":                            MaxGangSize,
		"$defs/resources/properties/cpu_cores/maximum":            MaxCPUCores,
		"$defs/resources/properties/memory/maximum":               MaxMemoryGB,
		"$defs/resources/properties/gpu_count/maximum":            MaxGPUCount,
		"$defs/resources/properties/gpu_memory/maximum":           MaxGPUMemoryGB,
		"$defs/resources/properties/gpu_model/maxLength":          MaxIdentLen,
		"$defs/resources/properties/storage/maximum":              MaxStorageGB,
		"$defs/resources/properties/network_bandwidth/maximum":    MaxNetworkMbps,
	}
	for pointer, want := range tests {
		t.Run(pointer, func(t *testing.T) {
			if got := lookup(t, s, pointer); got != want {
				t.Errorf("%s#/%s = %v, want %v", RequestSchemaFile, pointer, got, want)
			}
		})
	}
	patterns := map[string]string{
		"properties/template/pattern":                    identRE.String(),
		"properties/gang_id/pattern":                     identRE.String(),
		"properties/environment/propertyNames/pattern":   envKeyRE.String(),
		"$defs/resources/properties/mig_profile/pattern": "^(" + strings.TrimSuffix(strings.TrimPrefix(migProfileRE.String(), "^"), "$") + ")?$",
	}
	for pointer, want := range patterns {
		if got := lookup(t, s, pointer); got != want {
			t.Errorf("%s#/%s = %v, want %v", RequestSchemaFile, pointer, got, want)
		}
	}
}

// TestSchemaEnums keeps the schema enums equal to the Go constants.
func TestSchemaEnums(t *testing.T) {
	job := loadSchema(t, "compute-job.v1.schema.json")
	tests := map[string]struct {
		got  any
		want []string
	}{
		"reason codes": {lookup(t, job, "$defs/reason_code/enum"), stringsOf(Codes())},
		"job statuses": {lookup(t, job, "$defs/status/enum"), stringsOf(JobStatuses())},
		"storage tiers": {lookup(t, loadSchema(t, RequestSchemaFile), "$defs/resources/properties/storage_tier/enum"),
			[]string{StorageNVMe, StorageSSD, StorageHDD, ""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, v := range tc.got.([]any) {
				got = append(got, v.(string))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("enum mismatch (-go +schema):\n%s", diff)
			}
		})
	}
}

func stringsOf[S ~string](xs []S) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(Schemas(), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadSchema(t *testing.T, name string) map[string]any {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(mustRead(t, name), &s); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// lookup follows a slash-separated JSON pointer (without the leading "/").
func lookup(t *testing.T, v any, pointer string) any {
	t.Helper()
	if pointer == "" {
		return v
	}
	for _, part := range strings.Split(pointer, "/") {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("pointer %s: %q is not inside an object", pointer, part)
		}
		if v, ok = m[part]; !ok {
			t.Fatalf("pointer %s: no %q", pointer, part)
		}
	}
	return v
}
