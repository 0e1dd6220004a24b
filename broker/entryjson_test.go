package broker

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/blackboard"
)

// entrySeeds are entry JSON documents for the differential test: canonical
// ones (the fast path) and every shape the fast path hands to
// encoding/json.
var entrySeeds = []string{
	`{"entry_id":"0123456789abcdef0123456789abcdef","topic":"compute.request","data":{"command":["echo","hi"]},"source_module":"m","timestamp":1700000000.25,"confidence":1,"priority":1,"status":"active","ttl_seconds":null,"tags":[],"parent_id":null,"metadata":{}}`,
	`{"entry_id":"0123456789abcdef0123456789abcdef","topic":"compute.request","data":{"a":[1,2.5e3,-0,true,false,null,"x\u00e9\n"]},"source_module":"mé","timestamp":1,"confidence":0.5,"priority":3,"status":"retracted","ttl_seconds":30,"tags":["b","a","b"],"parent_id":"p","metadata":{"k":{"n":1}}}`,
	` { "entry_id" : "x" , "data" : null , "other" : [ {} , [] , "" ] } `,
	`{}`, `[]`, `null`, `"x"`, `1`, ``, `{`, `{"a":1,}`, `{"a":1}x`, `{"a" 1}`, `{,}`,
	`{"entry_id":"a","entry_id":"b"}`, `{"topic":"a","topic":null}`, `{"data":1,"data":2}`,
	`{"entry_id":"\u0061"}`, `{"entry\u005fid":"a"}`, `{"Entry_ID":"a"}`, `{"entry_id":1}`,
	`{"timestamp":"1"}`, `{"timestamp":1e400}`, `{"timestamp":1e-400}`, `{"timestamp":01}`, `{"timestamp":-}`,
	`{"timestamp":1.}`, `{"timestamp":.5}`, `{"timestamp":1E+2}`, `{"confidence":-0.0e-0}`,
	`{"priority":"2"}`, `{"priority":2.0}`, `{"priority":2e0}`, `{"priority":99999999999999999999}`,
	`{"priority":-1}`, `{"ttl_seconds":0}`, `{"ttl_seconds":"5"}`,
	`{"tags":["a",null]}`, `{"tags":"a"}`, `{"tags":[1]}`, `{"tags":["\u0062","a"]}`, `{"tags":null}`,
	`{"metadata":[]}`, `{"metadata":{"a":1e400}}`, `{"metadata":null}`, `{"metadata":"x"}`, `{"metadata":{"a":null}}`,
	`{"parent_id":""}`, `{"parent_id":null}`, `{"status":null}`, `{"source_module":"\ud800"}`,
	"{\"source_module\":\"\xff\"}", "{\"k\xff\":1}", "{\"data\":\"\xff\"}", "{\"data\":\"a\tb\"}",
	`{"data":"\x"}`, `{"data":"\u12g4"}`, `{"data":tru}`, `{"data":nul}`, `{"data":truex}`,
	`{"data":[1 2]}`, `{"data":{"a":1 "b":2}}`, `{"data":{1:2}}`,
	`{"data":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
	`{"data":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
}

// checkDecodeEntry: where the fast path answers, it answers what
// json.Unmarshal answers; decodeEntry always does.
func checkDecodeEntry(t *testing.T, s string) {
	t.Helper()
	var want blackboard.Entry
	wantErr := json.Unmarshal([]byte(s), &want)
	got, err := decodeEntry(s)
	if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("decodeEntry(%q) error %v, json.Unmarshal %v", s, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeEntry(%q) =\n%#v\njson.Unmarshal:\n%#v", s, got, want)
	}
	if fast, ok := fastEntry(s); ok && (wantErr != nil || !reflect.DeepEqual(fast, want)) {
		t.Fatalf("fastEntry(%q) = %#v, json.Unmarshal %#v, %v", s, fast, want, wantErr)
	}
}

func TestDecodeEntryMatchesUnmarshal(t *testing.T) {
	for _, s := range entrySeeds {
		checkDecodeEntry(t, s)
	}
	// Canonical entries as posters write them, and byte-level mutations of
	// them (most of which are invalid or take the slow path).
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		e := blackboard.NewEntry(blackboard.RequestTopic, []string{"m", "módulo", `q"uote`}[i%3],
			json.RawMessage([]string{okData, `{"command":["a"],"priority":7,"payload":{"x":[1,{"y":null}]}}`, `[]`}[i%3]))
		e.ID, e.Timestamp = blackboard.NewID(), 1.7e9+rng.Float64()
		if i%2 == 0 {
			ttl := rng.Float64() * 100
			e.TTLSeconds = &ttl
		}
		if i%5 == 0 {
			e.Tags, e.ParentID, e.Metadata = []string{"z", "a", "z"}, blackboard.NewID(), map[string]any{"k": "v", "n": 1.5}
		}
		b, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeEntry(t, string(b))
		if _, ok := fastEntry(string(b)); !ok && i%3 != 2 {
			t.Errorf("canonical entry took the slow path: %s", b)
		}
		m := []byte(string(b))
		for range 1 + rng.IntN(3) {
			const alphabet = "{}[]\",:\\ 0-.eEnul\xff"
			m[rng.IntN(len(m))] = alphabet[rng.IntN(len(alphabet))]
		}
		checkDecodeEntry(t, string(m))
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, s := range entrySeeds {
		f.Add(s)
	}
	f.Fuzz(checkDecodeEntry)
}
