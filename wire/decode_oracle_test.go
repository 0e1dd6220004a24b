package wire

// The decoder as it was before the single-pass fast path, kept verbatim
// (identifiers prefixed with oracle) as the oracle of the differential
// tests: DecodeRequest must return exactly what oracleDecodeRequest returns,
// error messages included.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// oracleDecodeRequest decodes and validates the data of a compute.request entry.
// It is strict: unknown fields (matched case-sensitively), null values
// outside payload, duplicate keys, wrong types and out-of-range values are
// refused with an *Error carrying a reason code and the field path. A
// version other than 1 is refused with CodeUnsupportedVersion before any
// other field is looked at. Missing fields get their defaults: version 1,
// priority DefaultPriority(in.Priority), account in.SourceModule,
// idempotency_key in.ID, cpu_cores 1, memory 0.25.
func oracleDecodeRequest(data []byte, in EntryInfo) (Request, *Error) {
	if len(data) > MaxDataBytes {
		return Request{}, errorf(CodePayloadTooLarge, "", "data is %d bytes; the limit is %d", len(data), MaxDataBytes)
	}
	if !utf8.Valid(data) {
		return Request{}, errorf(CodeMalformedJSON, "", "data is not valid UTF-8")
	}
	sc, err := oracleScan(data)
	if err != nil {
		return Request{}, err
	}
	if err := sc.checkVersion(); err != nil {
		return Request{}, err
	}
	if sc.issue != nil {
		return Request{}, sc.issue
	}

	var r Request
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, sc.mapDecodeError(err)
	}
	if err := sc.checkExplicit(&r); err != nil {
		return Request{}, err
	}
	oracleNormalize(&r)

	set := sc.present
	if !set["version"] {
		r.Version = SchemaVersion
	}
	if !set["priority"] {
		r.Priority = DefaultPriority(in.Priority)
	}
	if !set["account"] {
		r.Account = in.SourceModule
	}
	if !set["idempotency_key"] {
		r.IdempotencyKey = in.ID
	}
	if !set["resource_requirements.cpu_cores"] {
		r.Resources.CPUCores = DefaultCPUCores
	}
	if !set["resource_requirements.memory"] {
		r.Resources.MemoryGB = DefaultMemoryGB
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// checkExplicit refuses values that are only meaningful when absent: an
// explicit empty string, empty command, zero deadline or zero gang size
// would otherwise be silently read as "not given" or replaced by a default.
func (sc *oracleScanResult) checkExplicit(r *Request) *Error {
	empty := []struct {
		field string
		zero  bool
	}{
		{"template", r.Template == ""},
		{"command", len(r.Command) == 0},
		{"account", r.Account == ""},
		{"deadline", r.Deadline == 0},
		{"idempotency_key", r.IdempotencyKey == ""},
		{"gang_id", r.GangID == ""},
		{"gang_size", r.GangSize == 0},
	}
	for _, f := range empty {
		if sc.present[f.field] && f.zero {
			return errorf(CodeInvalidValue, f.field, "must not be empty or zero; omit the field instead")
		}
	}
	return nil
}

// oracleNormalize gives each value one representation, so that a decoded request
// re-encodes and decodes to itself: empty collections become nil and the
// payload takes encoding/json's compact form.
func oracleNormalize(r *Request) {
	if len(r.Arguments) == 0 {
		r.Arguments = nil
	}
	if len(r.Environment) == 0 {
		r.Environment = nil
	}
	if len(r.NodeSelector) == 0 {
		r.NodeSelector = nil
	}
	if len(r.Payload) == 0 || string(r.Payload) == "null" {
		r.Payload = nil
		return
	}
	if b, err := json.Marshal(r.Payload); err == nil {
		r.Payload = b
	}
}

// Field names of Request and Resources, from their json tags, so the scanner
// cannot drift from the struct.
var (
	oracleRequestFields   = oracleJsonFields(reflect.TypeFor[Request]())
	oracleResourcesFields = oracleJsonFields(reflect.TypeFor[Resources]())
)

func oracleJsonFields(t reflect.Type) map[string]bool {
	names := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// oracleScanResult is what one pass over the JSON tokens learned: which known
// fields are present, the version token, the first unknown field or null
// (in document order), and the path of every value by its end offset, to
// name the field in encoding/json's type errors.
type oracleScanResult struct {
	present    map[string]bool // "priority", "resource_requirements.memory", …
	version    any             // the first token of the version value; nil if absent
	hasVersion bool
	issue      *Error
	pathAt     map[int64]string // input offset after a value's first token → its path
}

// oracleScan walks data once with json.Decoder.Token. It reports syntax errors,
// duplicate keys, trailing data, excessive nesting and a non-object
// document at once; unknown fields and nulls are kept in issue so that a
// version mismatch can be reported first.
func oracleScan(data []byte) (*oracleScanResult, *Error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	sc := &oracleScanResult{present: map[string]bool{}, pathAt: map[int64]string{}}
	tok, err := dec.Token()
	if err != nil {
		return nil, oracleSyntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errorf(CodeWrongType, "", "data must be a JSON object, not %s", oracleKindOf(tok))
	}
	if e := sc.object(dec, "", 1, false); e != nil {
		return nil, e
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorf(CodeMalformedJSON, "", "unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	return sc, nil
}

// object reads the members of an object whose '{' has been read.
func (sc *oracleScanResult) object(dec *json.Decoder, path string, depth int, inPayload bool) *Error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return oracleSyntaxError(err)
		}
		key := tok.(string) // Token guarantees a string key inside an object
		child := oracleJoin(path, key)
		if seen[key] {
			return errorf(CodeMalformedJSON, child, "duplicate key %q", key)
		}
		seen[key] = true
		if !inPayload {
			switch path {
			case "":
				sc.note(child, oracleRequestFields[key])
			case "resource_requirements":
				sc.note(child, oracleResourcesFields[key])
			}
		}
		first, e := sc.value(dec, child, depth, inPayload || child == "payload")
		if e != nil {
			return e
		}
		if path == "" && key == "version" {
			sc.version, sc.hasVersion = first, true
		}
	}
	_, err := dec.Token() // '}'
	return oracleSyntaxError(err)
}

func (sc *oracleScanResult) note(path string, known bool) {
	if known {
		sc.present[path] = true
	} else if sc.issue == nil {
		sc.issue = errorf(CodeUnknownField, path, "is not a field of compute.request v%d", SchemaVersion)
	}
}

// value reads one value and returns its first token.
func (sc *oracleScanResult) value(dec *json.Decoder, path string, depth int, inPayload bool) (any, *Error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, oracleSyntaxError(err)
	}
	sc.pathAt[dec.InputOffset()] = path
	switch tok := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return nil, errorf(CodeMalformedJSON, path, "nesting is deeper than %d", MaxDepth)
		}
		if tok == '{' {
			return tok, sc.object(dec, path, depth+1, inPayload)
		}
		for i := 0; dec.More(); i++ {
			if _, e := sc.value(dec, path+"["+strconv.Itoa(i)+"]", depth+1, inPayload); e != nil {
				return nil, e
			}
		}
		_, err := dec.Token() // ']'
		return tok, oracleSyntaxError(err)
	case nil:
		if !inPayload && sc.issue == nil {
			sc.issue = errorf(CodeWrongType, path, "null is not allowed; omit the field instead")
		}
	}
	return tok, nil
}

func (sc *oracleScanResult) checkVersion() *Error {
	if !sc.hasVersion {
		return nil
	}
	n, ok := sc.version.(json.Number)
	if !ok || !oracleIsIntLiteral(string(n)) {
		return errorf(CodeWrongType, "version", "must be an integer, not %s", oracleKindOf(sc.version))
	}
	if v, err := strconv.ParseInt(string(n), 10, 64); err != nil || v != SchemaVersion {
		return errorf(CodeUnsupportedVersion, "version", "version %s is not supported; this reader supports version %d", n, SchemaVersion)
	}
	return nil
}

// mapDecodeError turns an encoding/json error into an *Error. The oracleScan has
// already caught syntax errors and unknown fields, so what is left is
// mostly type errors, named by the scanner's path for the offset.
func (sc *oracleScanResult) mapDecodeError(err error) *Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := sc.pathAt[te.Offset]
		if field == "" {
			field = te.Field
		}
		want := oracleTypeName(te.Type)
		lit, isNumber := strings.CutPrefix(te.Value, "number ")
		switch {
		case isNumber && want == "integer" && !oracleIsIntLiteral(lit):
			return errorf(CodeWrongType, field, "must be an integer, not %s", lit)
		case isNumber:
			return errorf(CodeInvalidValue, field, "%s is out of range", lit)
		}
		return errorf(CodeWrongType, field, "must be %s, not %s", oracleArticle(want), oracleArticle(te.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return errorf(CodeUnknownField, name, "is not a field of compute.request v%d", SchemaVersion)
	}
	return oracleSyntaxError(err)
}

func oracleSyntaxError(err error) *Error {
	var se *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return errorf(CodeMalformedJSON, "", "invalid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(CodeMalformedJSON, "", "truncated or empty JSON")
	}
	return errorf(CodeMalformedJSON, "", "%s", err.Error())
}

func oracleIsIntLiteral(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".eE")
}

func oracleJoin(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// oracleKindOf names a token's JSON type.
func oracleKindOf(tok any) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "an unknown value"
}

// oracleTypeName names a Go type as the JSON type the schema asks for.
func oracleTypeName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Float64, reflect.Float32:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.String()
}

func oracleArticle(s string) string {
	switch {
	case s == "", s == "null":
		return s
	case strings.ContainsAny(s[:1], "aeiou"):
		return "an " + s
	}
	return "a " + s
}
