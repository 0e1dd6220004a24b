package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// testEntry is the compute.request entry the table cases decode against.
var testEntry = EntryInfo{
	ID:           "0123456789abcdef0123456789abcdef",
	SourceModule: "reasoning",
	Priority:     EntryPriorityNormal,
	Timestamp:    1767225600,
}

// errorCases cover every code DecodeRequest returns. They also seed
// FuzzDecodeRequest.
var errorCases = map[string]struct {
	data string
	want *Error
}{
	// malformed_json
	"truncated":            {`{"template":`, &Error{Code: CodeMalformedJSON}},
	"empty":                {``, &Error{Code: CodeMalformedJSON}},
	"only whitespace":      {" \n", &Error{Code: CodeMalformedJSON}},
	"syntax error":         {`{"template" "x"}`, &Error{Code: CodeMalformedJSON}},
	"trailing object":      {`{"template":"x"} {}`, &Error{Code: CodeMalformedJSON}},
	"trailing garbage":     {`{"template":"x"}x`, &Error{Code: CodeMalformedJSON}},
	"python NaN":           {`{"template":"x","deadline":NaN}`, &Error{Code: CodeMalformedJSON}},
	"invalid utf-8":        {"{\"template\":\"x\",\"name\":\"\xff\"}", &Error{Code: CodeMalformedJSON}},
	"duplicate key":        {`{"template":"a","template":"b"}`, &Error{Code: CodeMalformedJSON, Field: "template"}},
	"duplicate nested key": {`{"template":"a","resource_requirements":{"memory":1,"memory":2}}`, &Error{Code: CodeMalformedJSON, Field: "resource_requirements.memory"}},
	"duplicate in payload": {`{"template":"a","payload":{"k":1,"k":2}}`, &Error{Code: CodeMalformedJSON, Field: "payload.k"}},
	"too deep": {`{"template":"a","payload":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`,
		&Error{Code: CodeMalformedJSON, Field: "payload" + strings.Repeat("[0]", MaxDepth-1)}},

	// wrong_type
	"array document":           {`[]`, &Error{Code: CodeWrongType}},
	"string document":          {`"template"`, &Error{Code: CodeWrongType}},
	"null document":            {`null`, &Error{Code: CodeWrongType}},
	"priority string":          {`{"template":"x","priority":"5"}`, &Error{Code: CodeWrongType, Field: "priority"}},
	"priority fraction":        {`{"template":"x","priority":5.5}`, &Error{Code: CodeWrongType, Field: "priority"}},
	"priority float literal":   {`{"template":"x","priority":5.0}`, &Error{Code: CodeWrongType, Field: "priority"}},
	"priority exponent":        {`{"template":"x","priority":5e0}`, &Error{Code: CodeWrongType, Field: "priority"}},
	"priority bool":            {`{"template":"x","priority":true}`, &Error{Code: CodeWrongType, Field: "priority"}},
	"cpu as string":            {`{"template":"x","resource_requirements":{"cpu_cores":"2"}}`, &Error{Code: CodeWrongType, Field: "resource_requirements.cpu_cores"}},
	"resources as array":       {`{"template":"x","resource_requirements":[]}`, &Error{Code: CodeWrongType, Field: "resource_requirements"}},
	"numa_local as string":     {`{"template":"x","resource_requirements":{"numa_local":"yes"}}`, &Error{Code: CodeWrongType, Field: "resource_requirements.numa_local"}},
	"command as string":        {`{"command":"ls -l"}`, &Error{Code: CodeWrongType, Field: "command"}},
	"argument as number":       {`{"template":"x","arguments":["a",1]}`, &Error{Code: CodeWrongType, Field: "arguments[1]"}},
	"environment value number": {`{"template":"x","environment":{"A":1}}`, &Error{Code: CodeWrongType, Field: "environment.A"}},
	"node_selector value bool": {`{"template":"x","node_selector":{"zone":true}}`, &Error{Code: CodeWrongType, Field: "node_selector.zone"}},
	"null field":               {`{"template":"x","deadline":null}`, &Error{Code: CodeWrongType, Field: "deadline"}},
	"null nested field":        {`{"template":"x","resource_requirements":{"gpu_model":null}}`, &Error{Code: CodeWrongType, Field: "resource_requirements.gpu_model"}},
	"null argument":            {`{"template":"x","arguments":[null]}`, &Error{Code: CodeWrongType, Field: "arguments[0]"}},
	"version as string":        {`{"template":"x","version":"1"}`, &Error{Code: CodeWrongType, Field: "version"}},
	"version as float literal": {`{"template":"x","version":1.0}`, &Error{Code: CodeWrongType, Field: "version"}},
	"version null":             {`{"template":"x","version":null}`, &Error{Code: CodeWrongType, Field: "version"}},

	// unknown_field
	"unknown top-level field":      {`{"template":"x","queue":"gpu"}`, &Error{Code: CodeUnknownField, Field: "queue"}},
	"unknown resource field":       {`{"template":"x","resource_requirements":{"gpus":1}}`, &Error{Code: CodeUnknownField, Field: "resource_requirements.gpus"}},
	"field in the wrong case":      {`{"template":"x","Priority":5}`, &Error{Code: CodeUnknownField, Field: "Priority"}},
	"unknown before null":          {`{"template":"x","zz":1,"name":null}`, &Error{Code: CodeUnknownField, Field: "zz"}},
	"unknown field with version 1": {`{"version":1,"template":"x","duration":5}`, &Error{Code: CodeUnknownField, Field: "duration"}},

	// missing_field
	"empty object":            {`{}`, &Error{Code: CodeMissingField, Field: "template"}},
	"name only":               {`{"name":"job"}`, &Error{Code: CodeMissingField, Field: "template"}},
	"gang_id without size":    {`{"template":"x","gang_id":"g1"}`, &Error{Code: CodeMissingField, Field: "gang_size"}},
	"gang_size without id":    {`{"template":"x","gang_size":2}`, &Error{Code: CodeMissingField, Field: "gang_id"}},
	"payload but no template": {`{"payload":{"template":"x"}}`, &Error{Code: CodeMissingField, Field: "template"}},

	// invalid_value
	"template and command":      {`{"template":"x","command":["ls"]}`, &Error{Code: CodeInvalidValue, Field: "command"}},
	"empty template":            {`{"template":""}`, &Error{Code: CodeInvalidValue, Field: "template"}},
	"template with a space":     {`{"template":"my job"}`, &Error{Code: CodeInvalidValue, Field: "template"}},
	"empty command":             {`{"command":[]}`, &Error{Code: CodeInvalidValue, Field: "command"}},
	"empty argv0":               {`{"command":[""]}`, &Error{Code: CodeInvalidValue, Field: "command[0]"}},
	"NUL in argument":           {`{"command":["echo"],"arguments":["a\u0000b"]}`, &Error{Code: CodeInvalidValue, Field: "arguments[0]"}},
	"too many arguments":        {`{"command":["echo"],"arguments":[` + strings.Repeat(`"a",`, MaxArgs) + `"a"]}`, &Error{Code: CodeInvalidValue, Field: "arguments"}},
	"argument too long":         {`{"command":["echo"],"arguments":["` + strings.Repeat("a", MaxArgLen+1) + `"]}`, &Error{Code: CodeInvalidValue, Field: "arguments[0]"}},
	"name too long":             {`{"template":"x","name":"` + strings.Repeat("é", MaxNameLen+1) + `"}`, &Error{Code: CodeInvalidValue, Field: "name"}},
	"too many environment vars": {`{"template":"x","environment":{` + envVars(MaxEnv+1) + `}}`, &Error{Code: CodeInvalidValue, Field: "environment"}},
	"bad environment name":      {`{"template":"x","environment":{"1A":"v"}}`, &Error{Code: CodeInvalidValue, Field: "environment.1A"}},
	"reserved environment name": {`{"template":"x","environment":{"COMPUTEBOARD_PAYLOAD":"/etc/passwd"}}`, &Error{Code: CodeInvalidValue, Field: "environment.COMPUTEBOARD_PAYLOAD"}},
	"priority too high":         {`{"template":"x","priority":10}`, &Error{Code: CodeInvalidValue, Field: "priority"}},
	"priority negative":         {`{"template":"x","priority":-1}`, &Error{Code: CodeInvalidValue, Field: "priority"}},
	"priority overflows int":    {`{"template":"x","priority":99999999999999999999}`, &Error{Code: CodeInvalidValue, Field: "priority"}},
	"cpu zero":                  {`{"template":"x","resource_requirements":{"cpu_cores":0}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.cpu_cores"}},
	"cpu below granularity":     {`{"template":"x","resource_requirements":{"cpu_cores":1e-9}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.cpu_cores"}},
	"memory below granularity":  {`{"template":"x","resource_requirements":{"memory":1e-9}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.memory"}},
	"cpu negative":              {`{"template":"x","resource_requirements":{"cpu_cores":-1}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.cpu_cores"}},
	"cpu absurd":                {`{"template":"x","resource_requirements":{"cpu_cores":1025}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.cpu_cores"}},
	"cpu overflows float":       {`{"template":"x","resource_requirements":{"cpu_cores":1e400}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.cpu_cores"}},
	"memory zero":               {`{"template":"x","resource_requirements":{"memory":0}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.memory"}},
	"memory absurd":             {`{"template":"x","resource_requirements":{"memory":65537}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.memory"}},
	"gpu count absurd":          {`{"template":"x","resource_requirements":{"gpu_count":65}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.gpu_count"}},
	"gpu count negative":        {`{"template":"x","resource_requirements":{"gpu_count":-1}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.gpu_count"}},
	"gpu memory negative":       {`{"template":"x","resource_requirements":{"gpu_count":1,"gpu_memory":-1}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.gpu_memory"}},
	"gpu model without gpus":    {`{"template":"x","resource_requirements":{"gpu_model":"H100"}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.gpu_model"}},
	"bad mig profile":           {`{"template":"x","resource_requirements":{"gpu_count":1,"mig_profile":"half"}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.mig_profile"}},
	"storage negative":          {`{"template":"x","resource_requirements":{"storage":-0.5}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.storage"}},
	"unknown storage tier":      {`{"template":"x","resource_requirements":{"storage_tier":"tape"}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.storage_tier"}},
	"bandwidth negative":        {`{"template":"x","resource_requirements":{"network_bandwidth":-1}}`, &Error{Code: CodeInvalidValue, Field: "resource_requirements.network_bandwidth"}},
	"empty account":             {`{"template":"x","account":""}`, &Error{Code: CodeInvalidValue, Field: "account"}},
	"zero deadline":             {`{"template":"x","deadline":0}`, &Error{Code: CodeInvalidValue, Field: "deadline"}},
	"negative deadline":         {`{"template":"x","deadline":-5}`, &Error{Code: CodeInvalidValue, Field: "deadline"}},
	"deadline in milliseconds":  {`{"template":"x","deadline":1767225600000}`, &Error{Code: CodeInvalidValue, Field: "deadline"}},
	"negative timeout":          {`{"template":"x","timeout":-1}`, &Error{Code: CodeInvalidValue, Field: "timeout"}},
	"absurd duration":           {`{"template":"x","estimated_duration":1e9}`, &Error{Code: CodeInvalidValue, Field: "estimated_duration"}},
	"too many retries":          {`{"template":"x","max_retries":11}`, &Error{Code: CodeInvalidValue, Field: "max_retries"}},
	"empty idempotency key":     {`{"template":"x","idempotency_key":""}`, &Error{Code: CodeInvalidValue, Field: "idempotency_key"}},
	"zero gang size":            {`{"template":"x","gang_id":"g","gang_size":0}`, &Error{Code: CodeInvalidValue, Field: "gang_size"}},
	"gang too large":            {`{"template":"x","gang_id":"g","gang_size":1025}`, &Error{Code: CodeInvalidValue, Field: "gang_size"}},
	"empty node label":          {`{"template":"x","node_selector":{"":"a"}}`, &Error{Code: CodeInvalidValue, Field: "node_selector."}},
	"empty provider":            {`{"template":"x","provider":""}`, &Error{Code: CodeInvalidValue, Field: "provider"}},
	"provider not a name":       {`{"template":"x","provider":"a b"}`, &Error{Code: CodeInvalidValue, Field: "provider"}},
	"provider vs selector":      {`{"template":"x","provider":"hpc","node_selector":{"provider":"local"}}`, &Error{Code: CodeInvalidValue, Field: "provider"}},
	"unknown placement":         {`{"template":"x","placement":"random"}`, &Error{Code: CodeInvalidValue, Field: "placement"}},
	"empty placement":           {`{"template":"x","placement":""}`, &Error{Code: CodeInvalidValue, Field: "placement"}},
	"provider number":           {`{"template":"x","provider":1}`, &Error{Code: CodeWrongType, Field: "provider"}},

	// payload_too_large
	"data over 64 KiB": {`{"template":"x","payload":"` + strings.Repeat("a", MaxDataBytes) + `"}`, &Error{Code: CodePayloadTooLarge}},

	// unsupported_version
	"version 2":                  {`{"version":2,"template":"x"}`, &Error{Code: CodeUnsupportedVersion, Field: "version"}},
	"version 0":                  {`{"version":0,"template":"x"}`, &Error{Code: CodeUnsupportedVersion, Field: "version"}},
	"version huge":               {`{"version":123456789012345678901234567890,"template":"x"}`, &Error{Code: CodeUnsupportedVersion, Field: "version"}},
	"version 2 with new fields":  {`{"template":"x","queue":"gpu","version":2,"resource_requirements":{"fpga":1}}`, &Error{Code: CodeUnsupportedVersion, Field: "version"}},
	"version 2 with null fields": {`{"template":null,"version":2}`, &Error{Code: CodeUnsupportedVersion, Field: "version"}},
}

func envVars(n int) string {
	vars := make([]string, n)
	for i := range vars {
		vars[i] = fmt.Sprintf(`"V%d":"x"`, i)
	}
	return strings.Join(vars, ",")
}

func TestDecodeRequestErrors(t *testing.T) {
	for name, tc := range errorCases {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tc.data), testEntry)
			if diff := cmp.Diff(tc.want, err, cmpopts.IgnoreFields(Error{}, "Message")); diff != "" {
				t.Errorf("DecodeRequest error mismatch (-want +got):\n%s\nmessage: %v", diff, err)
			}
			if err != nil && err.Message == "" {
				t.Errorf("DecodeRequest error %+v has no message", err)
			}
			if diff := cmp.Diff(Request{}, got); diff != "" {
				t.Errorf("DecodeRequest returned a request with its error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeRequestCodes checks that the error cases reach every code
// DecodeRequest can return.
func TestDecodeRequestCodes(t *testing.T) {
	seen := map[Code]bool{}
	for _, tc := range errorCases {
		seen[tc.want.Code] = true
	}
	for _, c := range decodeCodes {
		if !seen[c] {
			t.Errorf("no error case for %s", c)
		}
	}
}

// decodeCodes are the codes DecodeRequest returns; the rest are the
// adapter's and the broker's.
var decodeCodes = []Code{
	CodeMalformedJSON, CodeWrongType, CodeUnknownField, CodeMissingField,
	CodeInvalidValue, CodePayloadTooLarge, CodeUnsupportedVersion,
}

func TestCodes(t *testing.T) {
	want := []Code{
		"malformed_json", "wrong_type", "unknown_field", "missing_field",
		"invalid_value", "payload_too_large", "unknown_template",
		"command_not_allowed", "unsupported_version", "impossible_request",
		"rate_limited", "inbox_full", "delivery_limit", "env_not_allowed",
		"gang_incomplete", "identity_mismatch", "account_not_allowed",
	}
	if diff := cmp.Diff(want, Codes()); diff != "" {
		t.Errorf("Codes() mismatch with the contract (-want +got):\n%s", diff)
	}
	for _, c := range want {
		if !c.Known() {
			t.Errorf("%s.Known() = false", c)
		}
	}
	if Code("exit_status").Known() {
		t.Error(`Code("exit_status").Known() = true`)
	}
}

func TestErrorString(t *testing.T) {
	tests := map[string]struct {
		err  *Error
		want string
	}{
		"with field":    {&Error{CodeInvalidValue, "priority", "10 is outside 0..9"}, "wire: invalid_value: priority: 10 is outside 0..9"},
		"whole payload": {&Error{CodeMalformedJSON, "", "truncated"}, "wire: malformed_json: truncated"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

// validCases decode without error. They also seed FuzzDecodeRequest.
var validCases = map[string]struct {
	data string
	in   EntryInfo
	want Request
}{
	"minimal template, NORMAL entry": {
		data: `{"template":"echo"}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"LOW entry defaults to 2": {
		data: `{"template":"echo"}`,
		in:   withPriority(EntryPriorityLow),
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 2, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"HIGH entry defaults to 6": {
		data: `{"template":"echo"}`,
		in:   withPriority(EntryPriorityHigh),
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 6, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"CRITICAL entry defaults to 8": {
		data: `{"template":"echo"}`,
		in:   withPriority(EntryPriorityCritical),
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 8, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"explicit values beat defaults": {
		data: `{"version":1,"command":["python3","-m","job"],"priority":0,"account":"team-a","idempotency_key":"k1","resource_requirements":{"cpu_cores":0.5,"memory":2}}`,
		in:   withPriority(EntryPriorityCritical),
		want: Request{Version: 1, Command: []string{"python3", "-m", "job"}, Resources: Resources{CPUCores: 0.5, MemoryGB: 2}, Priority: 0, Account: "team-a", IdempotencyKey: "k1"},
	},
	"every field": {
		data: `{"version":1,"name":"train step","template":"torch-train","arguments":["--epochs","3"],"environment":{"SEED":"7"},
			"resource_requirements":{"cpu_cores":8,"memory":64,"gpu_count":2,"gpu_memory":80,"gpu_model":"H100","mig_profile":"3g.40gb","storage":100,"storage_tier":"nvme","network_bandwidth":10000,"numa_local":true},
			"priority":9,"account":"training","deadline":1767229200.5,"estimated_duration":600,"timeout":3600,"max_retries":2,"idempotency_key":"step-42",
			"node_selector":{"zone":"a"},"gang_id":"g42","gang_size":2,"provider":"hpc","placement":"cheapest","payload":{"lr": 0.001, "tags": ["<a>"]}}`,
		in: testEntry,
		want: Request{
			Version: 1, Name: "train step", Template: "torch-train", Arguments: []string{"--epochs", "3"}, Environment: map[string]string{"SEED": "7"},
			Resources: Resources{CPUCores: 8, MemoryGB: 64, GPUCount: 2, GPUMemoryGB: 80, GPUModel: "H100", MIGProfile: "3g.40gb", StorageGB: 100, StorageTier: "nvme", NetworkMbps: 10000, NUMALocal: true},
			Priority:  9, Account: "training", Deadline: 1767229200.5, EstimatedDuration: 600, Timeout: 3600, MaxRetries: 2, IdempotencyKey: "step-42",
			NodeSelector: map[string]string{"zone": "a"}, GangID: "g42", GangSize: 2, Provider: "hpc", Placement: "cheapest", Payload: json.RawMessage(`{"lr":0.001,"tags":["\u003ca\u003e"]}`),
		},
	},
	"empty collections and null payload normalize to nil": {
		data: `{"template":"echo","arguments":[],"environment":{},"node_selector":{},"payload":null}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"null inside payload is data": {
		data: `{"template":"echo","payload":{"a":null,"b":[null]}}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID, Payload: json.RawMessage(`{"a":null,"b":[null]}`)},
	},
	"deadline before the entry timestamp is the engine's call": {
		data: `{"template":"echo","deadline":1000}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID, Deadline: 1000},
	},
	"explicit empty optional strings": {
		data: `{"template":"echo","name":"","resource_requirements":{"gpu_model":"","mig_profile":"","storage_tier":""}}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"name at the limit in code points": {
		data: `{"template":"echo","name":"` + strings.Repeat("é", MaxNameLen) + `"}`,
		in:   testEntry,
		want: Request{Version: 1, Name: strings.Repeat("é", MaxNameLen), Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
	"data exactly 64 KiB": {
		data: `{"template":"echo","payload":"` + strings.Repeat("a", MaxDataBytes-len(`{"template":"echo","payload":""}`)) + `"}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID,
			Payload: json.RawMessage(`"` + strings.Repeat("a", MaxDataBytes-len(`{"template":"echo","payload":""}`)) + `"`)},
	},
	"nesting at the limit": {
		data: `{"template":"echo","payload":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`,
		in:   testEntry,
		want: Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "reasoning", IdempotencyKey: testEntry.ID,
			Payload: json.RawMessage(strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1))},
	},
	"whitespace and key order do not matter": {
		data: " {\n \"priority\" : 3 ,\n \"command\" : [ \"ls\" ] \n} \n",
		in:   testEntry,
		want: Request{Version: 1, Command: []string{"ls"}, Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 3, Account: "reasoning", IdempotencyKey: testEntry.ID},
	},
}

func withPriority(p int) EntryInfo {
	in := testEntry
	in.Priority = p
	return in
}

func TestDecodeRequest(t *testing.T) {
	for name, tc := range validCases {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tc.data), tc.in)
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeRequest mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeRequestMissingAccount(t *testing.T) {
	in := testEntry
	in.SourceModule = ""
	_, err := DecodeRequest([]byte(`{"template":"echo"}`), in)
	want := &Error{Code: CodeMissingField, Field: "account"}
	if diff := cmp.Diff(want, err, cmpopts.IgnoreFields(Error{}, "Message")); diff != "" {
		t.Errorf("DecodeRequest error mismatch (-want +got):\n%s", diff)
	}
}

func TestValidateGoBuiltRequest(t *testing.T) {
	base := func() Request {
		return Request{Version: 1, Template: "echo", Resources: Resources{CPUCores: 1, MemoryGB: 0.25}, Priority: 4, Account: "a", IdempotencyKey: "k"}
	}
	tests := map[string]struct {
		edit func(*Request)
		want *Error
	}{
		"valid":            {func(*Request) {}, nil},
		"zero version":     {func(r *Request) { r.Version = 0 }, &Error{Code: CodeUnsupportedVersion, Field: "version"}},
		"NaN cpu":          {func(r *Request) { r.Resources.CPUCores = nan() }, &Error{Code: CodeInvalidValue, Field: "resource_requirements.cpu_cores"}},
		"NaN timeout":      {func(r *Request) { r.Timeout = nan() }, &Error{Code: CodeInvalidValue, Field: "timeout"}},
		"NaN deadline":     {func(r *Request) { r.Deadline = nan() }, &Error{Code: CodeInvalidValue, Field: "deadline"}},
		"bad payload":      {func(r *Request) { r.Payload = json.RawMessage(`{`) }, &Error{Code: CodeMalformedJSON, Field: "payload"}},
		"no idempotency":   {func(r *Request) { r.IdempotencyKey = "" }, &Error{Code: CodeMissingField, Field: "idempotency_key"}},
		"no template":      {func(r *Request) { r.Template = "" }, &Error{Code: CodeMissingField, Field: "template"}},
		"empty command":    {func(r *Request) { r.Template, r.Command = "", []string{} }, &Error{Code: CodeMissingField, Field: "template"}},
		"negative retries": {func(r *Request) { r.MaxRetries = -1 }, &Error{Code: CodeInvalidValue, Field: "max_retries"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := base()
			tc.edit(&r)
			if diff := cmp.Diff(tc.want, r.Validate(), cmpopts.IgnoreFields(Error{}, "Message")); diff != "" {
				t.Errorf("Validate mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

func TestDefaultPriority(t *testing.T) {
	tests := map[string]struct {
		entryPriority int
		want          int
	}{
		"LOW":                {EntryPriorityLow, 2},
		"NORMAL":             {EntryPriorityNormal, 4},
		"HIGH":               {EntryPriorityHigh, 6},
		"CRITICAL":           {EntryPriorityCritical, 8},
		"below LOW clamps":   {-1, 2},
		"above CRITICAL too": {7, 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := DefaultPriority(tc.entryPriority); got != tc.want {
				t.Errorf("DefaultPriority(%d) = %d, want %d", tc.entryPriority, got, tc.want)
			}
		})
	}
}

func TestAcceptBy(t *testing.T) {
	ttl := 30.0
	tests := map[string]struct {
		in     EntryInfo
		want   float64
		wantOK bool
	}{
		"no ttl":   {EntryInfo{Timestamp: 100}, 0, false},
		"with ttl": {EntryInfo{Timestamp: 100, TTLSeconds: &ttl}, 130, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := tc.in.AcceptBy()
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("AcceptBy() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
