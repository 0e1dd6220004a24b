package blackboard

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Priority is an entry's urgency; higher is more urgent.
type Priority int

// Priorities, as in ASI:BUILD's EntryPriority.
const (
	Low      Priority = 0
	Normal   Priority = 1
	High     Priority = 2
	Critical Priority = 3
)

var priorityNames = [...]string{"LOW", "NORMAL", "HIGH", "CRITICAL"}

// String returns the name used in event payloads: LOW, NORMAL, HIGH, CRITICAL.
func (p Priority) String() string {
	if p.valid() {
		return priorityNames[p]
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

func (p Priority) valid() bool { return p >= Low && p <= Critical }

// Status is an entry's lifecycle state.
type Status string

// Statuses, as in ASI:BUILD's EntryStatus.
const (
	StatusActive     Status = "active"
	StatusConsumed   Status = "consumed"
	StatusSuperseded Status = "superseded"
	StatusExpired    Status = "expired"
	StatusRetracted  Status = "retracted"
)

func (s Status) valid() bool {
	switch s {
	case StatusActive, StatusConsumed, StatusSuperseded, StatusExpired, StatusRetracted:
		return true
	}
	return false
}

// Entry is one item on the blackboard: the 12 fields of ASI:BUILD's
// BlackboardEntry. Entries are values; the Store never hands out shared state.
type Entry struct {
	ID           string          // entry_id: 32 lowercase hex; Post fills it when empty
	Topic        string          // dot-separated; queries match it exactly or as a prefix
	Data         json.RawMessage // any JSON value; nil means null
	SourceModule string          // producing module
	Timestamp    float64         // epoch seconds; Post fills it from the Clock when 0
	Confidence   float64         // 0..1 (the Go zero value is 0; NewEntry sets 1)
	Priority     Priority        // the Go zero value is Low; NewEntry sets Normal
	Status       Status          // "" means active when posted
	TTLSeconds   *float64        // nil never expires; 0 expires at once
	Tags         []string        // sorted and unique once posted; read back nil when empty
	ParentID     string          // provenance link; "" = none
	Metadata     map[string]any  // free-form; nil means {}; read back nil when empty
}

// NewEntry returns an entry with BlackboardEntry's defaults: confidence 1,
// priority Normal, status active.
func NewEntry(topic, sourceModule string, data json.RawMessage) *Entry {
	return &Entry{Topic: topic, SourceModule: sourceModule, Data: data,
		Confidence: 1, Priority: Normal, Status: StatusActive}
}

// NewID returns a fresh entry id: a random UUID4 as 32 lowercase hex digits.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id is an entry id: 32 lowercase hex digits,
// optionally after "<module>:" with a ValidModule name (the form a board
// with per-module Redis ACLs requires for compute requests, so that the
// entry's key names its module).
func ValidID(id string) bool {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		if !ValidModule(id[:i]) {
			return false
		}
		id = id[i+1:]
	}
	if len(id) != 32 {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IDModule is the module an entry id names ("<module>:<hex>"), or "".
func IDModule(id string) string {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		return id[:i]
	}
	return ""
}

// NewModuleID returns a fresh entry id of module: "<module>:<NewID()>".
// module must be a ValidModule name.
func NewModuleID(module string) string { return module + ":" + NewID() }

// MaxModuleLen is the longest ValidModule name.
const MaxModuleLen = 64

// ValidModule reports whether name can name a module's intake lanes, entry
// ids and Redis ACL user: 1 to 64 of [A-Za-z0-9_.-] (no glob characters,
// no ':').
func ValidModule(name string) bool {
	if len(name) == 0 || len(name) > MaxModuleLen {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// IsExpired reports whether the TTL has run out at now: now − timestamp >
// ttl, strictly. No TTL never expires; a TTL of 0 expires as soon as any time
// has passed. It looks only at the TTL, not at Status.
func (e Entry) IsExpired(now time.Time) bool {
	if e.TTLSeconds == nil {
		return false
	}
	return epoch(now)-e.Timestamp > *e.TTLSeconds
}

// Validate checks an entry about to be stored. Errors wrap ErrInvalid.
func (e Entry) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case !ValidID(e.ID):
		return bad("entry_id %q is not 32 lowercase hex digits (optionally after \"<module>:\")", e.ID)
	case e.Topic == "":
		return bad("empty topic")
	case len(e.Data) > 0 && !json.Valid(e.Data):
		return bad("data is not JSON")
	case !finite(e.Timestamp) || e.Timestamp < 0:
		return bad("timestamp %v", e.Timestamp)
	case !finite(e.Confidence) || e.Confidence < 0 || e.Confidence > 1:
		return bad("confidence %v outside [0,1]", e.Confidence)
	case !e.Priority.valid():
		return bad("priority %d outside 0..3", int(e.Priority))
	case !e.Status.valid():
		return bad("status %q", e.Status)
	case e.TTLSeconds != nil && (!finite(*e.TTLSeconds) || *e.TTLSeconds < 0):
		return bad("ttl_seconds %v", *e.TTLSeconds)
	}
	return nil
}

// wireEntry is the canonical JSON form: exactly the 12 names, in this order.
type wireEntry struct {
	EntryID      string          `json:"entry_id"`
	Topic        string          `json:"topic"`
	Data         json.RawMessage `json:"data"`
	SourceModule string          `json:"source_module"`
	Timestamp    float64         `json:"timestamp"`
	Confidence   float64         `json:"confidence"`
	Priority     int             `json:"priority"`
	Status       Status          `json:"status"`
	TTLSeconds   *float64        `json:"ttl_seconds"`
	Tags         []string        `json:"tags"`
	ParentID     *string         `json:"parent_id"`
	Metadata     json.RawMessage `json:"metadata"`
}

// MarshalJSON writes the canonical JSON form: the 12 field names, priority
// as an int, tags as a sorted array, ttl_seconds and parent_id null when unset.
func (e Entry) MarshalJSON() ([]byte, error) {
	f, err := e.encode()
	if err != nil {
		return nil, err
	}
	return e.marshalFields(f)
}

// marshalFields is MarshalJSON with e already encoded as f.
func (e Entry) marshalFields(f fields) ([]byte, error) {
	w := wireEntry{
		EntryID: e.ID, Topic: e.Topic, Data: json.RawMessage(f.data),
		SourceModule: e.SourceModule, Timestamp: e.Timestamp, Confidence: e.Confidence,
		Priority: int(e.Priority), Status: f.status, TTLSeconds: e.TTLSeconds,
		Tags: f.tagList, Metadata: json.RawMessage(f.metadata),
	}
	if e.ParentID != "" {
		w.ParentID = &e.ParentID
	}
	return marshal(w)
}

// UnmarshalJSON reads the canonical JSON form. Names must match exactly;
// unknown names are ignored and missing or null ones take BlackboardEntry's
// defaults. It checks types, not ranges (see Validate).
func (e *Entry) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%w: entry: %v", ErrInvalid, err)
	}
	if m == nil {
		return fmt.Errorf("%w: entry: not an object", ErrInvalid)
	}
	out := Entry{Confidence: 1, Priority: Normal, Status: StatusActive}
	get := func(name string, dst any) error {
		raw, ok := m[name]
		if !ok || string(raw) == "null" {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("%w: entry field %s: %v", ErrInvalid, name, err)
		}
		return nil
	}
	var prio *json.Number
	var ttl *float64
	var parent *string
	var meta map[string]any
	for _, f := range []struct {
		name string
		dst  any
	}{
		{"entry_id", &out.ID}, {"topic", &out.Topic}, {"source_module", &out.SourceModule},
		{"timestamp", &out.Timestamp}, {"confidence", &out.Confidence}, {"priority", &prio},
		{"status", &out.Status}, {"ttl_seconds", &ttl}, {"tags", &out.Tags},
		{"parent_id", &parent}, {"metadata", &meta},
	} {
		if err := get(f.name, f.dst); err != nil {
			return err
		}
	}
	if prio != nil {
		p, err := prio.Int64()
		if err != nil {
			return fmt.Errorf("%w: entry field priority %s is not an integer", ErrInvalid, *prio)
		}
		out.Priority = Priority(p)
	}
	if raw, ok := m["data"]; ok {
		out.Data = slices.Clone(raw)
	}
	out.TTLSeconds = ttl
	if parent != nil {
		out.ParentID = *parent
	}
	if len(meta) > 0 {
		out.Metadata = meta
	}
	out.Tags = normTags(out.Tags)
	*e = out
	return nil
}

// fields is an entry encoded as the strings stored in its HASH.
type fields struct {
	status    Status
	timestamp string
	conf      string
	ttl       string // "" = none
	priority  string
	data      string
	metadata  string
	tags      string
	tagList   []string
}

func (e Entry) encode() (fields, error) { return e.encodeData(false) }

// encodeData is encode; valid says e.Data is known to be valid JSON
// (Validate passed), so that only its compactness is looked at again.
func (e Entry) encodeData(valid bool) (fields, error) {
	f := fields{
		status:    cmp.Or(e.Status, StatusActive),
		timestamp: formatFloat(e.Timestamp),
		conf:      formatFloat(e.Confidence),
		priority:  strconv.Itoa(int(e.Priority)),
		data:      "null",
		tagList:   normTags(e.Tags),
	}
	if e.TTLSeconds != nil {
		f.ttl = formatFloat(*e.TTLSeconds)
	}
	if len(e.Data) > 0 {
		if compactJSON(e.Data) && (valid || json.Valid(e.Data)) {
			f.data = string(e.Data) // as json.Compact would leave it, without its buffer
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, e.Data); err != nil {
				return fields{}, fmt.Errorf("%w: data is not JSON: %v", ErrInvalid, err)
			}
			f.data = buf.String()
		}
	}
	if m, ok := stringMapJSON(e.Metadata); ok {
		f.metadata = m
	} else {
		meta := e.Metadata
		if meta == nil {
			meta = map[string]any{}
		}
		mb, err := marshal(meta)
		if err != nil {
			return fields{}, fmt.Errorf("%w: metadata: %v", ErrInvalid, err)
		}
		f.metadata = string(mb)
	}
	if f.tagList == nil {
		f.tagList = []string{} // encode as [], never null
	}
	if t, ok := stringsJSON(f.tagList); ok {
		f.tags = t
	} else {
		tb, _ := marshal(f.tagList) // []string always encodes
		f.tags = string(tb)
	}
	return f, nil
}

// The fast paths of encode: what marshal would write, built by hand for
// the common small values (no reflection, one allocation), or ok false.

// plainJSON reports whether s encodes as a JSON string by quoting alone:
// printable ASCII other than '"' and '\\' (marshal does not escape HTML).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// stringsJSON is marshal(tags) for plain strings.
func stringsJSON(tags []string) (string, bool) {
	n := 2
	for _, t := range tags {
		if !plainJSON(t) {
			return "", false
		}
		n += len(t) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, t := range tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), t...), '"')
	}
	return string(append(b, ']')), true
}

// stringMapJSON is marshal(m) for an empty map, or one of at most four
// plain string keys with plain string values (keys sorted, as marshal
// sorts them).
func stringMapJSON(m map[string]any) (string, bool) {
	if len(m) == 0 {
		return "{}", true
	}
	if len(m) > 4 {
		return "", false
	}
	var keys [4]string
	ks, n := keys[:0], 2
	for k, v := range m {
		s, ok := v.(string)
		if !ok || !plainJSON(k) || !plainJSON(s) {
			return "", false
		}
		ks, n = append(ks, k), n+len(k)+len(s)+6
	}
	slices.Sort(ks)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range ks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), k...), `":"`...)
		b = append(append(b, m[k].(string)...), '"')
	}
	return string(append(b, '}')), true
}

// compactJSON reports whether data has no whitespace outside its strings
// (json.Compact would leave it as it is, once it is valid JSON).
func compactJSON(data []byte) bool {
	in, esc := false, false
	for _, c := range data {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// EncodeHash returns the entry's HASH fields (contract encoding): raw
// strings, decimal floats, priority "0".."3", JSON data/metadata/tags, v "1";
// parent_id and ttl_seconds are left out when unset.
func (e Entry) EncodeHash() (map[string]string, error) {
	f, err := e.encode()
	if err != nil {
		return nil, err
	}
	h := map[string]string{
		"entry_id": e.ID, "topic": e.Topic, "source_module": e.SourceModule,
		"status": string(f.status), "timestamp": f.timestamp, "confidence": f.conf,
		"priority": f.priority, "data": f.data, "metadata": f.metadata, "tags": f.tags,
		"v": "1",
	}
	if e.ParentID != "" {
		h["parent_id"] = e.ParentID
	}
	if f.ttl != "" {
		h["ttl_seconds"] = f.ttl
	}
	return h, nil
}

// DecodeHash reads an entry HASH. Missing fields take BlackboardEntry's
// defaults; unknown fields are ignored. Errors wrap ErrInvalid.
func DecodeHash(h map[string]string) (Entry, error) {
	if v, ok := h["v"]; ok && v != "1" {
		return Entry{}, fmt.Errorf("%w: entry hash version %q", ErrInvalid, v)
	}
	e := Entry{
		ID: h["entry_id"], Topic: h["topic"], SourceModule: h["source_module"],
		Confidence: 1, Priority: Normal, Status: StatusActive, ParentID: h["parent_id"],
	}
	bad := func(field string, err error) (Entry, error) {
		return Entry{}, fmt.Errorf("%w: entry %s field %s: %v", ErrInvalid, e.ID, field, err)
	}
	var err error
	if s, ok := h["status"]; ok {
		e.Status = Status(s)
	}
	if s, ok := h["timestamp"]; ok {
		if e.Timestamp, err = strconv.ParseFloat(s, 64); err != nil {
			return bad("timestamp", err)
		}
	}
	if s, ok := h["confidence"]; ok {
		if e.Confidence, err = strconv.ParseFloat(s, 64); err != nil {
			return bad("confidence", err)
		}
	}
	if s, ok := h["ttl_seconds"]; ok {
		ttl, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return bad("ttl_seconds", err)
		}
		e.TTLSeconds = &ttl
	}
	if s, ok := h["priority"]; ok {
		p, err := strconv.Atoi(s)
		if err != nil {
			return bad("priority", err)
		}
		e.Priority = Priority(p)
	}
	if s, ok := h["data"]; ok {
		if !json.Valid([]byte(s)) {
			return bad("data", fmt.Errorf("not JSON"))
		}
		e.Data = json.RawMessage(s)
	}
	if s, ok := h["metadata"]; ok {
		if err := json.Unmarshal([]byte(s), &e.Metadata); err != nil {
			return bad("metadata", err)
		}
		if len(e.Metadata) == 0 {
			e.Metadata = nil // as Tags: empty reads back as nil
		}
	}
	if s, ok := h["tags"]; ok {
		if err := json.Unmarshal([]byte(s), &e.Tags); err != nil {
			return bad("tags", err)
		}
		e.Tags = normTags(e.Tags)
	}
	return e, nil
}

// RequestLane is the intake lane of a compute.request entry: data.priority
// when it is an integer 0..9, else 2, 4, 6 or 8 for Low, Normal, High or
// Critical.
func RequestLane(e Entry) int {
	var m map[string]json.RawMessage
	if json.Unmarshal(e.Data, &m) == nil {
		if raw, ok := m["priority"]; ok {
			if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil && n >= 0 && n < NumLanes {
				return int(n)
			}
		}
	}
	p := e.Priority
	if !p.valid() {
		p = Normal
	}
	return 2 + 2*int(p)
}

// normTags returns tags sorted and without duplicates (nil for none).
func normTags(tags []string) []string {
	if len(tags) == 0 {
		return nil
	}
	out := slices.Clone(tags)
	slices.Sort(out)
	return slices.Compact(out)
}

// epoch converts a time to float epoch seconds.
func epoch(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// formatFloat writes the shortest decimal that reads back as f, with no
// exponent, so that Lua, Python and JSON all parse it to the same double.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// marshal is json.Marshal without HTML escaping, so stored JSON matches what
// Python's json.dumps would write.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
