package broker

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/jsonscan"
)

// decodeEntry reads an intake message's entry JSON. It gives exactly what
// json.Unmarshal into blackboard.Entry gives (that is, Entry.UnmarshalJSON),
// and is several times cheaper on what posters send: the canonical form
// written by Entry.MarshalJSON. It parses the object in one pass,
// validating it as encoding/json does, and takes the common shapes itself
// (unescaped keys and strings, plain numbers, string tags, empty or object
// metadata); anything else — an escape, a duplicate field, a value of an
// unexpected type, invalid JSON, a number that does not parse — makes it
// fall back to json.Unmarshal, so errors and edge cases are the
// blackboard's own. FuzzDecodeEntry checks the two agree.
func decodeEntry(raw string) (blackboard.Entry, error) {
	if e, ok := fastEntry(raw); ok {
		return e, nil
	}
	var e blackboard.Entry
	err := json.Unmarshal([]byte(raw), &e)
	return e, err
}

// Field bits of fastEntry, to refuse duplicates.
const (
	fID = 1 << iota
	fTopic
	fData
	fSource
	fTimestamp
	fConfidence
	fPriority
	fStatus
	fTTL
	fTags
	fParent
	fMetadata
)

// fastEntry is decodeEntry's fast path; ok is false when it is not sure.
func fastEntry(s string) (e blackboard.Entry, ok bool) {
	p := jparser{jsonscan.Scanner{Src: s}}
	e = blackboard.Entry{Confidence: 1, Priority: blackboard.Normal, Status: blackboard.StatusActive}
	p.WS()
	if !p.Eat('{') {
		return e, false
	}
	seen := 0
	p.WS()
	if !p.Eat('}') {
		for {
			key, ok := p.Key()
			if !ok {
				return e, false
			}
			bit, ok := p.member(key, &e)
			if !ok || seen&bit != 0 {
				return e, false
			}
			seen |= bit
			p.WS()
			if p.Eat(',') {
				continue
			}
			if p.Eat('}') {
				break
			}
			return e, false
		}
	}
	p.WS()
	return e, p.Done()
}

// member reads the value of key into e and returns key's field bit (0 for
// an unknown key, whose value is validated and skipped).
func (p *jparser) member(key string, e *blackboard.Entry) (int, bool) {
	if p.Lit("null") { // null leaves every field but data at its default
		switch key {
		case "data":
			e.Data = json.RawMessage("null")
			return fData, true
		}
		return entryFieldBit(key), true
	}
	var ok bool
	switch key {
	case "entry_id":
		e.ID, ok = p.plainString()
	case "topic":
		e.Topic, ok = p.plainString()
	case "source_module":
		e.SourceModule, ok = p.plainString()
	case "status":
		var st string
		st, ok = p.plainString()
		e.Status = blackboard.Status(st)
	case "parent_id":
		e.ParentID, ok = p.plainString()
	case "timestamp":
		e.Timestamp, ok = p.Float()
	case "confidence":
		e.Confidence, ok = p.Float()
	case "ttl_seconds":
		var f float64
		f, ok = p.Float()
		e.TTLSeconds = &f
	case "priority":
		var lit string
		if lit, _, ok = p.Number(); ok {
			n, err := strconv.ParseInt(lit, 10, 64)
			e.Priority, ok = blackboard.Priority(n), err == nil
		}
	case "tags":
		e.Tags, ok = p.tags()
	case "data":
		start := p.Pos
		if ok = p.value(0); ok {
			e.Data = json.RawMessage(p.Src[start:p.Pos])
		}
	case "metadata":
		start := p.Pos
		if ok = p.value(0); ok && p.Src[start:p.Pos] == "{}" {
			// empty: json.Unmarshal would give an empty map, kept as nil
		} else if ok && p.Src[start] == '{' {
			var m map[string]any
			if json.Unmarshal([]byte(p.Src[start:p.Pos]), &m) != nil {
				return 0, false
			}
			if len(m) > 0 {
				e.Metadata = m
			}
		} else {
			ok = false
		}
	default:
		return 0, p.value(0)
	}
	return entryFieldBit(key), ok
}

func entryFieldBit(key string) int {
	switch key {
	case "entry_id":
		return fID
	case "topic":
		return fTopic
	case "data":
		return fData
	case "source_module":
		return fSource
	case "timestamp":
		return fTimestamp
	case "confidence":
		return fConfidence
	case "priority":
		return fPriority
	case "status":
		return fStatus
	case "ttl_seconds":
		return fTTL
	case "tags":
		return fTags
	case "parent_id":
		return fParent
	case "metadata":
		return fMetadata
	}
	return 0
}

// jparser reads an entry with jsonscan's primitives over a string that
// need not be valid UTF-8 (plain strings are checked; see plainString).
type jparser struct {
	jsonscan.Scanner
}

// maxDepth bounds nesting on the fast path (encoding/json allows 10000;
// deeper documents take the slow path).
const maxDepth = 128

// plainString reads a string without escapes that is valid UTF-8: its
// decoded value is its raw content.
func (p *jparser) plainString() (string, bool) { return p.ValidPlainString() }

// value validates and skips any JSON value (no leading whitespace).
func (p *jparser) value(depth int) bool { return p.SkipValue(depth, maxDepth) }

// tags reads an array of plain strings, sorted and unique as the
// blackboard keeps them (nil when empty).
func (p *jparser) tags() ([]string, bool) {
	if !p.Eat('[') {
		return nil, false
	}
	var out []string
	p.WS()
	if !p.Eat(']') {
		for {
			p.WS()
			t, ok := p.plainString()
			if !ok {
				return nil, false
			}
			out = append(out, t)
			p.WS()
			if p.Eat(',') {
				continue
			}
			if p.Eat(']') {
				break
			}
			return nil, false
		}
	}
	if len(out) == 0 {
		return nil, true
	}
	slices.Sort(out)
	return slices.Compact(out), true
}
