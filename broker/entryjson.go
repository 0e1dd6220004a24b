package broker

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/computeboard/computeboard/blackboard"
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
	p := jparser{s: s}
	e = blackboard.Entry{Confidence: 1, Priority: blackboard.Normal, Status: blackboard.StatusActive}
	p.ws()
	if !p.eat('{') {
		return e, false
	}
	seen := 0
	p.ws()
	if !p.eat('}') {
		for {
			p.ws()
			key, ok := p.plainString()
			if !ok {
				return e, false
			}
			p.ws()
			if !p.eat(':') {
				return e, false
			}
			p.ws()
			bit, ok := p.member(key, &e)
			if !ok || seen&bit != 0 {
				return e, false
			}
			seen |= bit
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat('}') {
				break
			}
			return e, false
		}
	}
	p.ws()
	return e, p.i == len(p.s)
}

// member reads the value of key into e and returns key's field bit (0 for
// an unknown key, whose value is validated and skipped).
func (p *jparser) member(key string, e *blackboard.Entry) (int, bool) {
	if p.peekNull() { // null leaves every field but data at its default
		p.i += 4
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
		e.Timestamp, ok = p.float()
	case "confidence":
		e.Confidence, ok = p.float()
	case "ttl_seconds":
		var f float64
		f, ok = p.float()
		e.TTLSeconds = &f
	case "priority":
		var lit string
		if lit, ok = p.number(); ok {
			n, err := strconv.ParseInt(lit, 10, 64)
			e.Priority, ok = blackboard.Priority(n), err == nil
		}
	case "tags":
		e.Tags, ok = p.tags()
	case "data":
		start := p.i
		if ok = p.value(0); ok {
			e.Data = json.RawMessage(p.s[start:p.i])
		}
	case "metadata":
		start := p.i
		if ok = p.value(0); ok && p.s[start:p.i] == "{}" {
			// empty: json.Unmarshal would give an empty map, kept as nil
		} else if ok && p.s[start] == '{' {
			var m map[string]any
			if json.Unmarshal([]byte(p.s[start:p.i]), &m) != nil {
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

// jparser is a JSON reader over a string that follows encoding/json's
// grammar (RFC 8259) exactly; every method reports false rather than guess.
type jparser struct {
	s string
	i int
}

// maxDepth bounds nesting on the fast path (encoding/json allows 10000;
// deeper documents take the slow path).
const maxDepth = 128

func (p *jparser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jparser) peekNull() bool {
	return len(p.s)-p.i >= 4 && p.s[p.i:p.i+4] == "null"
}

// plainString reads a string without escapes that is valid UTF-8: its
// decoded value is its raw content.
func (p *jparser) plainString() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	ascii := true
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			v := p.s[start:p.i]
			p.i++
			return v, ascii || utf8.ValidString(v)
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return "", false
}

// str validates and skips any string.
func (p *jparser) str() bool {
	if !p.eat('"') {
		return false
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if p.i >= len(p.s) {
				return false
			}
			switch p.s[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if len(p.s)-p.i < 5 {
					return false
				}
				for _, h := range []byte(p.s[p.i+1 : p.i+5]) {
					if !isHex(h) {
						return false
					}
				}
				p.i += 5
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// number reads a number literal: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *jparser) number() (string, bool) {
	start := p.i
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.i < len(p.s) && '1' <= p.s[p.i] && p.s[p.i] <= '9':
		p.digits()
	default:
		return "", false
	}
	if p.eat('.') {
		if p.digits() == 0 {
			return "", false
		}
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if p.digits() == 0 {
			return "", false
		}
	}
	return p.s[start:p.i], true
}

func (p *jparser) digits() int {
	n := 0
	for p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// float reads a number as encoding/json does into a float64.
func (p *jparser) float() (float64, bool) {
	lit, ok := p.number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(lit, 64)
	return f, err == nil
}

// tags reads an array of plain strings, sorted and unique as the
// blackboard keeps them (nil when empty).
func (p *jparser) tags() ([]string, bool) {
	if !p.eat('[') {
		return nil, false
	}
	var out []string
	p.ws()
	if !p.eat(']') {
		for {
			p.ws()
			t, ok := p.plainString()
			if !ok {
				return nil, false
			}
			out = append(out, t)
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat(']') {
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

// value validates and skips any JSON value (no leading whitespace).
func (p *jparser) value(depth int) bool {
	if p.i >= len(p.s) || depth > maxDepth {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		return p.str()
	case c == '{':
		p.i++
		p.ws()
		if p.eat('}') {
			return true
		}
		for {
			p.ws()
			if !p.str() {
				return false
			}
			p.ws()
			if !p.eat(':') {
				return false
			}
			p.ws()
			if !p.value(depth + 1) {
				return false
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			return p.eat('}')
		}
	case c == '[':
		p.i++
		p.ws()
		if p.eat(']') {
			return true
		}
		for {
			p.ws()
			if !p.value(depth + 1) {
				return false
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			return p.eat(']')
		}
	case c == '-' || '0' <= c && c <= '9':
		_, ok := p.number()
		return ok
	}
	for _, lit := range []string{"true", "false", "null"} {
		if len(p.s)-p.i >= len(lit) && p.s[p.i:p.i+len(lit)] == lit {
			p.i += len(lit)
			return true
		}
	}
	return false
}
