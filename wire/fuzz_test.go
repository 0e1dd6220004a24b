package wire

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeRequest checks, for any data and entry priority, that
// DecodeRequest never panics; that it returns either a valid request or an
// *Error with a code it is documented to return (and a zero Request); that
// a valid request is in normal form, re-encodes and decodes to itself
// whatever the entry, and agrees with Lane on the priority; and that it
// returns exactly what its slow path alone (slowDecodeRequest) returns.
func FuzzDecodeRequest(f *testing.F) {
	// Large seeds (the size-limit cases) stay in the table tests: the
	// fuzzer spends minutes minimizing anything it finds from them.
	const maxSeed = 4 << 10
	for _, tc := range errorCases {
		if len(tc.data) <= maxSeed {
			f.Add([]byte(tc.data), EntryPriorityNormal)
		}
	}
	for _, tc := range validCases {
		if len(tc.data) <= maxSeed {
			f.Add([]byte(tc.data), tc.in.Priority)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, entryPriority int) {
		in := testEntry
		in.Priority = entryPriority
		checkAgainstSlowPath(t, data, in)
		r, err := DecodeRequest(data, in)
		lane := Lane(data, entryPriority)
		if lane < 0 || lane > MaxPriority {
			t.Fatalf("Lane = %d, outside 0..%d", lane, MaxPriority)
		}
		if err != nil {
			if !slices.Contains(decodeCodes, err.Code) || err.Message == "" {
				t.Fatalf("DecodeRequest error %+v: unexpected code or empty message", err)
			}
			if diff := cmp.Diff(Request{}, r); diff != "" {
				t.Fatalf("DecodeRequest returned a request with its error (-want +got):\n%s", diff)
			}
			return
		}
		if verr := r.Validate(); verr != nil {
			t.Fatalf("decoded request is invalid: %v", verr)
		}
		if lane != r.Priority {
			t.Fatalf("Lane = %d but the request priority is %d", lane, r.Priority)
		}
		checkNormalForm(t, r)

		enc, merr := json.Marshal(r)
		if merr != nil {
			t.Fatalf("Marshal: %v", merr)
		}
		if len(enc) > MaxDataBytes {
			return // escaping can grow a request that was at the limit
		}
		other := EntryInfo{ID: "ffffffffffffffffffffffffffffffff", SourceModule: "other", Priority: EntryPriorityLow, Timestamp: 1}
		r2, err2 := DecodeRequest(enc, other)
		if err2 != nil {
			t.Fatalf("re-decoding %s: %v", enc, err2)
		}
		if diff := cmp.Diff(r, r2); diff != "" {
			t.Fatalf("round trip changed the request (-first +second):\n%s", diff)
		}
	})
}

func checkNormalForm(t *testing.T, r Request) {
	t.Helper()
	if r.Arguments != nil && len(r.Arguments) == 0 || r.Environment != nil && len(r.Environment) == 0 || r.NodeSelector != nil && len(r.NodeSelector) == 0 {
		t.Fatalf("empty collection not normalized to nil: %+v", r)
	}
	if r.Payload != nil {
		canon, err := json.Marshal(r.Payload)
		if err != nil || !bytes.Equal(canon, r.Payload) || string(r.Payload) == "null" {
			t.Fatalf("payload %s is not in compact form", r.Payload)
		}
	}
}
