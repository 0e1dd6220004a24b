package wire

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkAgainstSlowPath fails t unless DecodeRequest returns exactly what
// its own slow path alone (slowDecodeRequest: the token scan, then
// encoding/json) returns for data: the same request, or the same error,
// message included.
func checkAgainstSlowPath(t *testing.T, data []byte, in EntryInfo) {
	t.Helper()
	got, gotErr := DecodeRequest(data, in)
	want, wantErr := slowDecodeRequest(data, in)
	if diff := cmp.Diff(wantErr, gotErr); diff != "" {
		t.Fatalf("DecodeRequest(%q) error differs from the slow path's (-slow +got):\n%s", data, diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("DecodeRequest(%q) differs from the slow path's (-slow +got):\n%s", data, diff)
	}
}

// TestDecodeRequestMatchesSlowPath is the differential test of the
// single-pass decoder: the table cases, generated requests of every shape
// (valid, and wrong in each way the schema and the JSON can be wrong), and
// byte-level mutations of them must decode as slowDecodeRequest decodes
// them. FuzzDecodeRequest makes the same check on what the fuzzer finds.
func TestDecodeRequestMatchesSlowPath(t *testing.T) {
	var corpus []string
	for _, tc := range errorCases {
		corpus = append(corpus, tc.data)
	}
	for _, tc := range validCases {
		corpus = append(corpus, tc.data)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		corpus = append(corpus, genRequest(rng))
	}
	for _, base := range corpus[:len(corpus):len(corpus)] {
		for range 3 {
			corpus = append(corpus, mutate(rng, base))
		}
	}
	fast := 0
	for _, data := range corpus {
		for _, in := range []EntryInfo{testEntry, withPriority(EntryPriorityCritical), {ID: "ffffffffffffffffffffffffffffffff"}} {
			checkAgainstSlowPath(t, []byte(data), in)
		}
		if len(data) <= MaxDataBytes {
			if _, _, ok := fastDecode([]byte(data)); ok {
				fast++
			}
		}
	}
	t.Logf("%d documents, %d of them on the fast path", len(corpus), fast)
	if fast < len(corpus)/20 || fast > len(corpus)*19/20 {
		t.Errorf("%d of %d documents on the fast path: the corpus no longer exercises both paths", fast, len(corpus))
	}
}

// genRequest builds a request document from a random mix of fields and
// values, mostly well-typed, sometimes not, with random whitespace.
func genRequest(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	clean := rng.IntN(2) == 0 // only shapes the fast path takes (the values may still be invalid)
	ws := func() string {
		if rng.IntN(4) > 0 {
			return ""
		}
		if clean {
			return pick(" ", "\n", "\t", "\r\n  ")
		}
		return pick(" ", "\n", "\t", "\r\n  ", " \u00a0")
	}
	str := func() string {
		if clean {
			return pick(`"x"`, `"echo"`, `""`, `"a b"`, `"é-ü"`, `"torch-train"`, `"COMPUTEBOARD_X"`, `"3g.40gb"`, `"nvme"`, `"H100"`, `"a`+"\u2028"+`"`)
		}
		return pick(`"x"`, `"echo"`, `""`, `"a b"`, `"é-ü"`, `"torch-train"`, `"a\"b"`, `"\u0041"`, `"a\\b"`, `"a\nb"`,
			`"COMPUTEBOARD_X"`, `"`+strings.Repeat("é", 129)+`"`, `"3g.40gb"`, `"nvme"`, `"tape"`, `"H100"`, `"a`+"\x01"+`"`, `"\ud800"`, `"\u0000"`)
	}
	num := func() string {
		if clean {
			return pick(`0`, `1`, `2`, `-1`, `5`, `9`, `10`, `-0`, `64`, `1024`, `1025`, `65537`, `1767225600000`)
		}
		return pick(`0`, `1`, `2`, `-1`, `5`, `9`, `10`, `0.5`, `1.0`, `1e0`, `1E2`, `-0`, `1e400`, `99999999999999999999`,
			`1767229200.5`, `1767225600000`, `64`, `65537`, `01`, `1.`, `-`, `.5`, `2e-3`, `1024`, `1025`, `NaN`)
	}
	any := func() string {
		return pick(str(), num(), `true`, `false`, `null`, `[]`, `{}`, `["a"]`, `{"a":"b"}`, `[null]`, `{"a":1}`)
	}
	typed := func(kind string) string {
		if !clean && rng.IntN(8) == 0 {
			return any()
		}
		switch kind {
		case "s":
			return str()
		case "n":
			return num()
		case "b":
			return pick(`true`, `false`)
		case "a":
			k := rng.IntN(4)
			parts := make([]string, k)
			for i := range parts {
				parts[i] = ws() + str() + ws()
			}
			return "[" + strings.Join(parts, ",") + "]"
		case "m":
			k := rng.IntN(4)
			parts := make([]string, k)
			for i := range parts {
				parts[i] = ws() + pick(`"A"`, `"SEED"`, `"zone"`, `""`, `"1A"`, `"A"`, `"COMPUTEBOARD_P"`, `"\u0041"`, `"b"`) + ":" + ws() + str()
			}
			return "{" + strings.Join(parts, ",") + "}"
		case "p":
			if clean {
				return pick(`{"lr": 0.001, "tags": ["<a>"]}`, `null`, `[1,{"a":null,"b":[true,false]}]`, `"s\u00e9\n"`, `{}`, `-1.5e3`)
			}
			return genPayload(rng, 0)
		}
		panic(kind)
	}
	resFields := []struct{ k, kind string }{
		{"cpu_cores", "n"}, {"memory", "n"}, {"gpu_count", "n"}, {"gpu_memory", "n"}, {"gpu_model", "s"},
		{"mig_profile", "s"}, {"storage", "n"}, {"storage_tier", "s"}, {"network_bandwidth", "n"}, {"numa_local", "b"},
		{"gpus", "n"}, {"Memory", "n"},
	}
	fields := []struct{ k, kind string }{
		{"version", "n"}, {"name", "s"}, {"template", "s"}, {"command", "a"}, {"arguments", "a"}, {"environment", "m"},
		{"resource_requirements", "r"}, {"priority", "n"}, {"account", "s"}, {"deadline", "n"}, {"estimated_duration", "n"},
		{"timeout", "n"}, {"max_retries", "n"}, {"idempotency_key", "s"}, {"node_selector", "m"}, {"gang_id", "s"},
		{"gang_size", "n"}, {"payload", "p"}, {"queue", "s"}, {"Priority", "n"}, {"\u0074emplate", "s"},
	}
	var parts []string
	if rng.IntN(2) == 0 {
		parts = append(parts, `"`+pick("template", "command")+`":`+pick(`"echo"`, `["echo","hi"]`))
	}
	for _, f := range fields {
		if rng.IntN(5) != 0 || clean && (f.k == "queue" || f.k == "Priority" || f.k == "\u0074emplate") {
			continue
		}
		key := `"` + f.k + `"`
		if f.k == "\u0074emplate" && rng.IntN(2) == 0 {
			key = `"\u0074emplate"`
		}
		var v string
		if f.kind == "r" {
			if !clean && rng.IntN(8) == 0 {
				v = any()
			} else {
				var rp []string
				for _, rf := range resFields {
					if rng.IntN(4) == 0 && !(clean && (rf.k == "gpus" || rf.k == "Memory")) {
						rp = append(rp, ws()+`"`+rf.k+`"`+ws()+":"+ws()+typed(rf.kind)+ws())
					}
				}
				if !clean && rng.IntN(10) == 0 && len(rp) > 0 {
					rp = append(rp, rp[0])
				}
				v = "{" + strings.Join(rp, ",") + "}"
			}
		} else {
			v = typed(f.kind)
		}
		parts = append(parts, ws()+key+ws()+":"+ws()+v+ws())
	}
	if !clean && rng.IntN(10) == 0 && len(parts) > 0 {
		parts = append(parts, parts[rng.IntN(len(parts))]) // a duplicate key
	}
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	doc := ws() + "{" + strings.Join(parts, ",") + "}" + ws()
	if !clean && rng.IntN(30) == 0 {
		doc += pick("x", "{}", ",", "]")
	}
	return doc
}

// genPayload builds a payload value: any JSON, sometimes with duplicate or
// escaped keys, deep nesting, or HTML characters that compacting escapes.
func genPayload(rng *rand.Rand, depth int) string {
	if depth > 3 || rng.IntN(3) == 0 {
		switch rng.IntN(8) {
		case 0:
			d := []int{10, 31, 32, 33, 62, 63, 64, 70}[rng.IntN(8)]
			return strings.Repeat("[", d) + strings.Repeat("]", d)
		case 1:
			d := []int{31, 32, 33, 63, 64}[rng.IntN(5)]
			return strings.Repeat(`{"a":`, d) + "1" + strings.Repeat("}", d)
		}
		return []string{`null`, `true`, `1e400`, `-0.5`, `"<a&b>"`, `"\u2028"`, `"\ud800"`, `"a\/b"`, `"é"`, `0`, `"\x"`, `tru`}[rng.IntN(12)]
	}
	k := rng.IntN(4)
	if rng.IntN(2) == 0 {
		parts := make([]string, k)
		for i := range parts {
			parts[i] = " " + genPayload(rng, depth+1)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	parts := make([]string, k)
	for i := range parts {
		key := []string{`"a"`, `"b"`, `"c"`, `"\u0061"`, `"a\"b"`, `""`, `"<k>"`}[rng.IntN(7)]
		parts[i] = key + ": " + genPayload(rng, depth+1)
	}
	if rng.IntN(10) == 0 { // many keys
		for i := range 70 {
			parts = append(parts, fmt.Sprintf(`"k%d":%d`, i, i))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// mutate changes one to three bytes of s: deletes, inserts or replaces with
// bytes that matter to JSON.
func mutate(rng *rand.Rand, s string) string {
	b := []byte(s)
	const alphabet = "{}[]\":,\\ \t\nu0123456789.eE+-ntrfalse\x00\x1f\xff\xc3"
	for range 1 + rng.IntN(3) {
		c := alphabet[rng.IntN(len(alphabet))]
		switch i := rng.IntN(len(b) + 1); {
		case len(b) == 0 || rng.IntN(3) == 0:
			b = append(b[:i], append([]byte{c}, b[i:]...)...)
		case i == len(b):
			b = b[:len(b)-1]
		case rng.IntN(2) == 0:
			b = append(b[:i], b[i+1:]...)
		default:
			b[i] = c
		}
	}
	return string(b)
}

// BenchmarkDecodeRequest compares DecodeRequest with its slow path alone,
// on what posters send.
func BenchmarkDecodeRequest(b *testing.B) {
	docs := map[string]string{
		"command": `{"command":["echo","hi"]}`,
		"full":    validCases["every field"].data,
	}
	for name, doc := range docs {
		for _, impl := range []struct {
			name string
			f    func([]byte, EntryInfo) (Request, *Error)
		}{{"single-pass", DecodeRequest}, {"slow-path", slowDecodeRequest}} {
			b.Run(name+"/"+impl.name, func(b *testing.B) {
				data := []byte(doc)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.f(data, testEntry); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
