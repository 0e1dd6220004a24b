package wire

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

// DecodeRequest decodes and validates the data of a compute.request entry.
// It is strict: unknown fields (matched case-sensitively), null values
// outside payload, duplicate keys, wrong types and out-of-range values are
// refused with an *Error carrying a reason code and the field path. A
// version other than 1 is refused with CodeUnsupportedVersion before any
// other field is looked at. Missing fields get their defaults: version 1,
// priority DefaultPriority(in.Priority), account in.SourceModule,
// idempotency_key in.ID, cpu_cores 1, memory 0.25.
func DecodeRequest(data []byte, in EntryInfo) (Request, *Error) {
	if err := checkBytes(data); err != nil {
		return Request{}, err
	}
	if r, set, ok := fastDecode(data); ok {
		return finishDecode(r, set, in)
	}
	return slowDecode(data, in)
}

// slowDecodeRequest is DecodeRequest without the fast path. It is the
// reference the differential tests (TestDecodeRequestMatchesSlowPath,
// FuzzDecodeRequest) hold DecodeRequest to: the fast path must change
// nothing but the speed.
func slowDecodeRequest(data []byte, in EntryInfo) (Request, *Error) {
	if err := checkBytes(data); err != nil {
		return Request{}, err
	}
	return slowDecode(data, in)
}

// checkBytes refuses data before any parsing: too large, or not UTF-8.
func checkBytes(data []byte) *Error {
	if len(data) > MaxDataBytes {
		return errorf(CodePayloadTooLarge, "", "data is %d bytes; the limit is %d", len(data), MaxDataBytes)
	}
	if !utf8.Valid(data) {
		return errorf(CodeMalformedJSON, "", "data is not valid UTF-8")
	}
	return nil
}

// slowDecode is DecodeRequest for whatever fastDecode does not take: every
// refusal of the JSON (and so every error message about it) comes from here.
// It scans the tokens (syntax, duplicates, unknown fields, nulls, nesting),
// then decodes with encoding/json.
func slowDecode(data []byte, in EntryInfo) (Request, *Error) {
	sc, err := scan(data)
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
	var set fieldSet
	for path := range sc.present {
		set |= fieldBit(path)
	}
	return finishDecode(r, set, in)
}

// finishDecode takes a request as encoding/json decoded it, with the set of
// fields the data gave, through the checks that follow the decoding: explicit
// empty values, normal form, defaults, Validate.
func finishDecode(r Request, set fieldSet, in EntryInfo) (Request, *Error) {
	if err := checkExplicit(&r, set); err != nil {
		return Request{}, err
	}
	normalize(&r)
	if set&setVersion == 0 {
		r.Version = SchemaVersion
	}
	if set&setPriority == 0 {
		r.Priority = DefaultPriority(in.Priority)
	}
	if set&setAccount == 0 {
		r.Account = in.SourceModule
	}
	if set&setIdempotencyKey == 0 {
		r.IdempotencyKey = in.ID
	}
	if set&setCPUCores == 0 {
		r.Resources.CPUCores = DefaultCPUCores
	}
	if set&setMemory == 0 {
		r.Resources.MemoryGB = DefaultMemoryGB
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// fieldSet records which of the fields that change the decoding's outcome
// by their presence the data gave.
type fieldSet uint16

const (
	setVersion fieldSet = 1 << iota
	setPriority
	setAccount
	setIdempotencyKey
	setCPUCores
	setMemory
	setTemplate
	setCommand
	setDeadline
	setGangID
	setGangSize
	setProvider
	setPlacement
)

// fieldBit is the bit of a field path ("resource_requirements.memory"); 0
// for the fields whose presence does not matter.
func fieldBit(path string) fieldSet {
	switch path {
	case "version":
		return setVersion
	case "priority":
		return setPriority
	case "account":
		return setAccount
	case "idempotency_key":
		return setIdempotencyKey
	case "resource_requirements.cpu_cores":
		return setCPUCores
	case "resource_requirements.memory":
		return setMemory
	case "template":
		return setTemplate
	case "command":
		return setCommand
	case "deadline":
		return setDeadline
	case "gang_id":
		return setGangID
	case "gang_size":
		return setGangSize
	case "provider":
		return setProvider
	case "placement":
		return setPlacement
	}
	return 0
}

// checkExplicit refuses values that are only meaningful when absent: an
// explicit empty string, empty command, zero deadline or zero gang size
// would otherwise be silently read as "not given" or replaced by a default.
func checkExplicit(r *Request, set fieldSet) *Error {
	empty := [...]struct {
		field string
		bit   fieldSet
		zero  bool
	}{
		{"template", setTemplate, r.Template == ""},
		{"command", setCommand, len(r.Command) == 0},
		{"account", setAccount, r.Account == ""},
		{"deadline", setDeadline, r.Deadline == 0},
		{"idempotency_key", setIdempotencyKey, r.IdempotencyKey == ""},
		{"gang_id", setGangID, r.GangID == ""},
		{"gang_size", setGangSize, r.GangSize == 0},
		{"provider", setProvider, r.Provider == ""},
		{"placement", setPlacement, r.Placement == ""},
	}
	for _, f := range empty {
		if set&f.bit != 0 && f.zero {
			return errorf(CodeInvalidValue, f.field, "must not be empty or zero; omit the field instead")
		}
	}
	return nil
}

// normalize gives each value one representation, so that a decoded request
// re-encodes and decodes to itself: empty collections become nil and the
// payload takes encoding/json's compact form.
func normalize(r *Request) {
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
	requestFields   = jsonFields(reflect.TypeFor[Request]())
	resourcesFields = jsonFields(reflect.TypeFor[Resources]())
)

func jsonFields(t reflect.Type) map[string]bool {
	names := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// scanResult is what one pass over the JSON tokens learned: which known
// fields are present, the version token, the first unknown field or null
// (in document order), and the path of every value by its end offset, to
// name the field in encoding/json's type errors.
type scanResult struct {
	present    map[string]bool // "priority", "resource_requirements.memory", …
	version    any             // the first token of the version value; nil if absent
	hasVersion bool
	issue      *Error
	pathAt     map[int64]string // input offset after a value's first token → its path
}

// scan walks data once with json.Decoder.Token. It reports syntax errors,
// duplicate keys, trailing data, excessive nesting and a non-object
// document at once; unknown fields and nulls are kept in issue so that a
// version mismatch can be reported first.
func scan(data []byte) (*scanResult, *Error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	sc := &scanResult{present: map[string]bool{}, pathAt: map[int64]string{}}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errorf(CodeWrongType, "", "data must be a JSON object, not %s", kindOf(tok))
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
func (sc *scanResult) object(dec *json.Decoder, path string, depth int, inPayload bool) *Error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		key := tok.(string) // Token guarantees a string key inside an object
		child := join(path, key)
		if seen[key] {
			return errorf(CodeMalformedJSON, child, "duplicate key %q", key)
		}
		seen[key] = true
		if !inPayload {
			switch path {
			case "":
				sc.note(child, requestFields[key])
			case "resource_requirements":
				sc.note(child, resourcesFields[key])
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
	return syntaxError(err)
}

func (sc *scanResult) note(path string, known bool) {
	if known {
		sc.present[path] = true
	} else if sc.issue == nil {
		sc.issue = errorf(CodeUnknownField, path, "is not a field of compute.request v%d", SchemaVersion)
	}
}

// value reads one value and returns its first token.
func (sc *scanResult) value(dec *json.Decoder, path string, depth int, inPayload bool) (any, *Error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
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
		return tok, syntaxError(err)
	case nil:
		if !inPayload && sc.issue == nil {
			sc.issue = errorf(CodeWrongType, path, "null is not allowed; omit the field instead")
		}
	}
	return tok, nil
}

func (sc *scanResult) checkVersion() *Error {
	if !sc.hasVersion {
		return nil
	}
	n, ok := sc.version.(json.Number)
	if !ok || !isIntLiteral(string(n)) {
		return errorf(CodeWrongType, "version", "must be an integer, not %s", kindOf(sc.version))
	}
	if v, err := strconv.ParseInt(string(n), 10, 64); err != nil || v != SchemaVersion {
		return errorf(CodeUnsupportedVersion, "version", "version %s is not supported; this reader supports version %d", n, SchemaVersion)
	}
	return nil
}

// mapDecodeError turns an encoding/json error into an *Error. The scan has
// already caught syntax errors and unknown fields, so what is left is
// mostly type errors, named by the scanner's path for the offset.
func (sc *scanResult) mapDecodeError(err error) *Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := sc.pathAt[te.Offset]
		if field == "" {
			field = te.Field
		}
		want := typeName(te.Type)
		lit, isNumber := strings.CutPrefix(te.Value, "number ")
		switch {
		case isNumber && want == "integer" && !isIntLiteral(lit):
			return errorf(CodeWrongType, field, "must be an integer, not %s", lit)
		case isNumber:
			return errorf(CodeInvalidValue, field, "%s is out of range", lit)
		}
		return errorf(CodeWrongType, field, "must be %s, not %s", article(want), article(te.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return errorf(CodeUnknownField, name, "is not a field of compute.request v%d", SchemaVersion)
	}
	return syntaxError(err)
}

func syntaxError(err error) *Error {
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

func isIntLiteral(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".eE")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// kindOf names a token's JSON type.
func kindOf(tok any) string {
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

// typeName names a Go type as the JSON type the schema asks for.
func typeName(t reflect.Type) string {
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

func article(s string) string {
	switch {
	case s == "", s == "null":
		return s
	case strings.ContainsAny(s[:1], "aeiou"):
		return "an " + s
	}
	return "a " + s
}
