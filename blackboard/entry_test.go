package blackboard

import (
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !re.MatchString(id) || !ValidID(id) {
			t.Fatalf("NewID() = %q, want uuid4 as 32 lowercase hex", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestValidID(t *testing.T) {
	tests := map[string]struct {
		id   string
		want bool
	}{
		"hex32":     {"0123456789abcdef0123456789abcdef", true},
		"upper":     {"0123456789ABCDEF0123456789abcdef", false},
		"dashes":    {"01234567-89ab-cdef-0123-456789abcdef", false},
		"short":     {"0123", false},
		"empty":     {"", false},
		"non-hex":   {"0123456789abcdef0123456789abcdeg", false},
		"too long":  {"0123456789abcdef0123456789abcdef0", false},
		"key chars": {"0123456789abcdef0123456789abc:ef", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ValidID(tc.id); got != tc.want {
				t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

func TestPriorityString(t *testing.T) {
	tests := map[Priority]string{Low: "LOW", Normal: "NORMAL", High: "HIGH", Critical: "CRITICAL", 7: "Priority(7)"}
	for p, want := range tests {
		if got := p.String(); got != want {
			t.Errorf("Priority(%d).String() = %q, want %q", int(p), got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestIsExpired(t *testing.T) {
	ts := 1_700_000_000.0
	at := func(d time.Duration) time.Time { return time.Unix(1_700_000_000, 0).Add(d) }
	tests := map[string]struct {
		ttl  *float64
		now  time.Time
		want bool
	}{
		"no ttl never":          {nil, at(1000 * time.Hour), false},
		"ttl 0 same instant":    {ptr(0.0), at(0), false},
		"ttl 0 a moment later":  {ptr(0.0), at(time.Millisecond), true},
		"before ttl":            {ptr(10.0), at(9 * time.Second), false},
		"exactly ttl is strict": {ptr(10.0), at(10 * time.Second), false},
		"after ttl":             {ptr(10.0), at(10*time.Second + time.Millisecond), true},
		"clock behind":          {ptr(1.0), at(-time.Hour), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := Entry{Timestamp: ts, TTLSeconds: tc.ttl}
			if got := e.IsExpired(tc.now); got != tc.want {
				t.Errorf("IsExpired = %v, want %v", got, tc.want)
			}
		})
	}
}

func validEntry() Entry {
	return Entry{ID: "0123456789abcdef0123456789abcdef", Topic: "a.b", SourceModule: "m",
		Data: json.RawMessage(`{"x":1}`), Timestamp: 1_700_000_000.5, Confidence: 0.5,
		Priority: High, Status: StatusActive}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		mod     func(*Entry)
		wantErr bool
	}{
		"ok":                 {func(*Entry) {}, false},
		"empty topic":        {func(e *Entry) { e.Topic = "" }, true},
		"bad id":             {func(e *Entry) { e.ID = "nope" }, true},
		"confidence > 1":     {func(e *Entry) { e.Confidence = 1.01 }, true},
		"confidence < 0":     {func(e *Entry) { e.Confidence = -0.1 }, true},
		"confidence NaN":     {func(e *Entry) { e.Confidence = nan() }, true},
		"confidence bounds":  {func(e *Entry) { e.Confidence = 1 }, false},
		"timestamp NaN":      {func(e *Entry) { e.Timestamp = nan() }, true},
		"timestamp negative": {func(e *Entry) { e.Timestamp = -1 }, true},
		"priority 4":         {func(e *Entry) { e.Priority = 4 }, true},
		"priority -1":        {func(e *Entry) { e.Priority = -1 }, true},
		"status bogus":       {func(e *Entry) { e.Status = "done" }, true},
		"ttl negative":       {func(e *Entry) { e.TTLSeconds = ptr(-1.0) }, true},
		"ttl zero":           {func(e *Entry) { e.TTLSeconds = ptr(0.0) }, false},
		"ttl inf":            {func(e *Entry) { e.TTLSeconds = ptr(inf()) }, true},
		"data not json":      {func(e *Entry) { e.Data = json.RawMessage("{") }, true},
		"nil data":           {func(e *Entry) { e.Data = nil }, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := validEntry()
			tc.mod(&e)
			err := e.Validate()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate() = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestMarshalJSON(t *testing.T) {
	tests := map[string]struct {
		e    Entry
		want string
	}{
		"full": {
			Entry{ID: "0123456789abcdef0123456789abcdef", Topic: "a.b", SourceModule: "m",
				Data: json.RawMessage(`{ "x" : [1, 2] , "h":"<&>" }`), Timestamp: 1700000000.25, Confidence: 0.9,
				Priority: Critical, Status: StatusConsumed, TTLSeconds: ptr(60.0), Tags: []string{"z", "a", "z"},
				ParentID: "fedcba9876543210fedcba9876543210", Metadata: map[string]any{"k": "v", "a": 1}},
			`{"entry_id":"0123456789abcdef0123456789abcdef","topic":"a.b","data":{"x":[1,2],"h":"<&>"},` +
				`"source_module":"m","timestamp":1700000000.25,"confidence":0.9,"priority":3,"status":"consumed",` +
				`"ttl_seconds":60,"tags":["a","z"],"parent_id":"fedcba9876543210fedcba9876543210","metadata":{"a":1,"k":"v"}}`,
		},
		"zero": {
			Entry{},
			`{"entry_id":"","topic":"","data":null,"source_module":"","timestamp":0,"confidence":0,"priority":0,` +
				`"status":"active","ttl_seconds":null,"tags":[],"parent_id":null,"metadata":{}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// Called directly: json.Marshal would HTML-escape the result.
			got, err := tc.e.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("Marshal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnmarshalJSON(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Entry
		wantErr bool
	}{
		"round trip fields": {
			in: `{"entry_id":"0123456789abcdef0123456789abcdef","topic":"a","data":[1],"source_module":"m",` +
				`"timestamp":5.5,"confidence":0.25,"priority":2,"status":"retracted","ttl_seconds":0,` +
				`"tags":["b","a"],"parent_id":"p","metadata":{"k":true}}`,
			want: Entry{ID: "0123456789abcdef0123456789abcdef", Topic: "a", Data: json.RawMessage(`[1]`),
				SourceModule: "m", Timestamp: 5.5, Confidence: 0.25, Priority: High, Status: StatusRetracted,
				TTLSeconds: ptr(0.0), Tags: []string{"a", "b"}, ParentID: "p", Metadata: map[string]any{"k": true}},
		},
		"defaults and unknown keys ignored": {
			in:   `{"topic":"a","source_module":"m","future_field":{"x":1},"Topic":"ignored","ttl_seconds":null,"parent_id":null}`,
			want: Entry{Topic: "a", SourceModule: "m", Confidence: 1, Priority: Normal, Status: StatusActive},
		},
		"priority not int": {in: `{"priority":1.5}`, wantErr: true},
		"tags not array":   {in: `{"tags":"a"}`, wantErr: true},
		"not object":       {in: `[1]`, wantErr: true},
		"null":             {in: `null`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got Entry
			err := json.Unmarshal([]byte(tc.in), &got)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Unmarshal = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Unmarshal = %v, want ErrInvalid", err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Unmarshal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	e := validEntry()
	e.TTLSeconds, e.Tags, e.ParentID = ptr(1.5), []string{"a", "b"}, "x"
	e.Metadata = map[string]any{"n": 1.5, "s": "t"}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var got Entry
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestHashEncoding(t *testing.T) {
	tests := map[string]struct {
		e    Entry
		want map[string]string
	}{
		"minimal": {
			Entry{ID: "0123456789abcdef0123456789abcdef", Topic: "t", SourceModule: "m", Timestamp: 1700000000.123456,
				Confidence: 1, Priority: Normal},
			map[string]string{"entry_id": "0123456789abcdef0123456789abcdef", "topic": "t", "source_module": "m",
				"status": "active", "timestamp": "1700000000.123456", "confidence": "1", "priority": "1",
				"data": "null", "metadata": "{}", "tags": "[]", "v": "1"},
		},
		"full": {
			Entry{ID: "0123456789abcdef0123456789abcdef", Topic: "t", SourceModule: "m", Timestamp: 2,
				Confidence: 0.0000001, Priority: Low, Status: StatusExpired, TTLSeconds: ptr(0.5),
				Tags: []string{"y", "x"}, ParentID: "p", Data: json.RawMessage(`"s"`), Metadata: map[string]any{"b": nil}},
			map[string]string{"entry_id": "0123456789abcdef0123456789abcdef", "topic": "t", "source_module": "m",
				"status": "expired", "timestamp": "2", "confidence": "0.0000001", "priority": "0",
				"data": `"s"`, "metadata": `{"b":null}`, "tags": `["x","y"]`, "v": "1",
				"ttl_seconds": "0.5", "parent_id": "p"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.e.EncodeHash()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("EncodeHash (-want +got):\n%s", diff)
			}
			back, err := DecodeHash(got)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.e
			want.Tags = normTags(want.Tags)
			if want.Status == "" {
				want.Status = StatusActive
			}
			if want.Data == nil {
				want.Data = json.RawMessage("null")
			}
			if diff := cmp.Diff(want, back); diff != "" {
				t.Errorf("DecodeHash(EncodeHash) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeHash(t *testing.T) {
	tests := map[string]struct {
		h       map[string]string
		want    Entry
		wantErr bool
	}{
		"python defaults for missing fields": {
			h:    map[string]string{"entry_id": "e", "topic": "t", "source_module": "m", "timestamp": "1.5"},
			want: Entry{ID: "e", Topic: "t", SourceModule: "m", Timestamp: 1.5, Confidence: 1, Priority: Normal, Status: StatusActive},
		},
		"python float forms": {
			h:    map[string]string{"topic": "t", "confidence": "1.0", "timestamp": "1e-05", "ttl_seconds": "60.0", "unknown": "x"},
			want: Entry{Topic: "t", Confidence: 1, Timestamp: 1e-05, TTLSeconds: ptr(60.0), Priority: Normal, Status: StatusActive},
		},
		"bad version":   {h: map[string]string{"v": "2"}, wantErr: true},
		"bad timestamp": {h: map[string]string{"timestamp": "x"}, wantErr: true},
		"bad priority":  {h: map[string]string{"priority": "HIGH"}, wantErr: true},
		"bad data":      {h: map[string]string{"data": "{"}, wantErr: true},
		"bad tags":      {h: map[string]string{"tags": "a,b"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeHash(tc.h)
			if (err != nil) != tc.wantErr {
				t.Fatalf("DecodeHash = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("DecodeHash = %v, want ErrInvalid", err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeHash (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestLane(t *testing.T) {
	tests := map[string]struct {
		data string
		prio Priority
		want int
	}{
		"data priority 0":        {`{"priority":0}`, Critical, 0},
		"data priority 9":        {`{"priority":9}`, Low, 9},
		"data priority 10":       {`{"priority":10}`, Low, 2},
		"data priority negative": {`{"priority":-1}`, High, 6},
		"data priority float":    {`{"priority":5.0}`, Normal, 4},
		"data priority string":   {`{"priority":"5"}`, Normal, 4},
		"no data priority LOW":   {`{}`, Low, 2},
		"NORMAL":                 {`{"name":"x"}`, Normal, 4},
		"HIGH":                   {`{}`, High, 6},
		"CRITICAL":               {`{}`, Critical, 8},
		"data not object":        {`[1]`, Critical, 8},
		"nested priority only":   {`{"payload":{"priority":1}}`, Normal, 4},
		"case-sensitive key":     {`{"Priority":1}`, Normal, 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := RequestLane(Entry{Data: json.RawMessage(tc.data), Priority: tc.prio})
			if got != tc.want {
				t.Errorf("RequestLane = %d, want %d", got, tc.want)
			}
		})
	}
}
