package wire

import (
	"strconv"
)

// fastDecode is DecodeRequest's single pass over data (valid UTF-8, within
// MaxDataBytes): it checks the JSON and fills the request at once, and
// returns what json.Unmarshal would give, with the set of fields present.
// It takes the shapes requests are posted in — known fields, each once,
// of the right JSON type; strings without escapes; integers that fit; no
// null outside payload; payload any JSON without escaped or duplicate keys,
// not nested deeper than fastMaxDepth — and returns ok false on anything
// else (an error to report, or just an unusual shape), so that slowDecode
// decides and words every refusal. FuzzDecodeRequest and
// TestDecodeRequestMatchesOracle check that DecodeRequest returns exactly
// what the token-scanning decoder alone returned.
func fastDecode(data []byte) (r Request, set fieldSet, ok bool) {
	p := fparser{s: string(data)}
	p.ws()
	if !p.eat('{') {
		return r, 0, false
	}
	var seen uint32
	p.ws()
	if !p.eat('}') {
		for {
			p.ws()
			key, ok := p.plainString()
			if !ok {
				return r, 0, false
			}
			p.ws()
			if !p.eat(':') {
				return r, 0, false
			}
			p.ws()
			bit, ok := p.requestMember(key, &r, &set)
			if !ok || seen&bit != 0 {
				return r, 0, false
			}
			seen |= bit
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat('}') {
				break
			}
			return r, 0, false
		}
	}
	p.ws()
	if p.i != len(p.s) {
		return r, 0, false
	}
	return r, set, true
}

// fastMaxDepth bounds the nesting of payload on the fast path, well inside
// MaxDepth; deeper payloads take the slow path, which enforces MaxDepth.
const fastMaxDepth = 32

// requestMember reads the value of the top-level key into r and returns a
// bit unique to key (to refuse duplicates); ok is false for an unknown key
// or a value the fast path does not take.
func (p *fparser) requestMember(key string, r *Request, set *fieldSet) (uint32, bool) {
	var ok bool
	switch key {
	case "version":
		var n int
		if n, ok = p.int(); ok && n == SchemaVersion {
			r.Version = n
			*set |= setVersion
			return 1 << 0, true
		}
		return 0, false
	case "name":
		r.Name, ok = p.plainString()
		return 1 << 1, ok
	case "template":
		r.Template, ok = p.plainString()
		*set |= setTemplate
		return 1 << 2, ok
	case "command":
		r.Command, ok = p.stringArray()
		*set |= setCommand
		return 1 << 3, ok
	case "arguments":
		r.Arguments, ok = p.stringArray()
		return 1 << 4, ok
	case "environment":
		r.Environment, ok = p.stringMap()
		return 1 << 5, ok
	case "resource_requirements":
		return 1 << 6, p.resources(&r.Resources, set)
	case "priority":
		r.Priority, ok = p.int()
		*set |= setPriority
		return 1 << 7, ok
	case "account":
		r.Account, ok = p.plainString()
		*set |= setAccount
		return 1 << 8, ok
	case "deadline":
		r.Deadline, ok = p.float()
		*set |= setDeadline
		return 1 << 9, ok
	case "estimated_duration":
		r.EstimatedDuration, ok = p.float()
		return 1 << 10, ok
	case "timeout":
		r.Timeout, ok = p.float()
		return 1 << 11, ok
	case "max_retries":
		r.MaxRetries, ok = p.int()
		return 1 << 12, ok
	case "idempotency_key":
		r.IdempotencyKey, ok = p.plainString()
		*set |= setIdempotencyKey
		return 1 << 13, ok
	case "node_selector":
		r.NodeSelector, ok = p.stringMap()
		return 1 << 14, ok
	case "gang_id":
		r.GangID, ok = p.plainString()
		*set |= setGangID
		return 1 << 15, ok
	case "gang_size":
		r.GangSize, ok = p.int()
		*set |= setGangSize
		return 1 << 16, ok
	case "payload":
		start := p.i
		if !p.value(1) {
			return 0, false
		}
		r.Payload = []byte(p.s[start:p.i]) // a copy, as json.RawMessage.UnmarshalJSON makes
		return 1 << 17, true
	}
	return 0, false
}

// resources reads resource_requirements, an object.
func (p *fparser) resources(res *Resources, set *fieldSet) bool {
	if !p.eat('{') {
		return false
	}
	var seen uint32
	p.ws()
	if p.eat('}') {
		return true
	}
	for {
		p.ws()
		key, ok := p.plainString()
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
		var bit uint32
		switch key {
		case "cpu_cores":
			res.CPUCores, ok = p.float()
			*set |= setCPUCores
			bit = 1 << 0
		case "memory":
			res.MemoryGB, ok = p.float()
			*set |= setMemory
			bit = 1 << 1
		case "gpu_count":
			res.GPUCount, ok = p.int()
			bit = 1 << 2
		case "gpu_memory":
			res.GPUMemoryGB, ok = p.float()
			bit = 1 << 3
		case "gpu_model":
			res.GPUModel, ok = p.plainString()
			bit = 1 << 4
		case "mig_profile":
			res.MIGProfile, ok = p.plainString()
			bit = 1 << 5
		case "storage":
			res.StorageGB, ok = p.float()
			bit = 1 << 6
		case "storage_tier":
			res.StorageTier, ok = p.plainString()
			bit = 1 << 7
		case "network_bandwidth":
			res.NetworkMbps, ok = p.float()
			bit = 1 << 8
		case "numa_local":
			res.NUMALocal, ok = p.bool()
			bit = 1 << 9
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		p.ws()
		if p.eat(',') {
			continue
		}
		return p.eat('}')
	}
}

// fparser reads JSON (RFC 8259, encoding/json's grammar) from a string
// already known to be valid UTF-8. Its methods report false rather than
// guess.
type fparser struct {
	s string
	i int
}

func (p *fparser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fparser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fparser) lit(l string) bool {
	if len(p.s)-p.i >= len(l) && p.s[p.i:p.i+len(l)] == l {
		p.i += len(l)
		return true
	}
	return false
}

// plainString reads a string without escapes: (the input being valid
// UTF-8) its value is its raw content.
func (p *fparser) plainString() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			v := p.s[start:p.i]
			p.i++
			return v, true
		case c == '\\' || c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// stringArray reads an array of plain strings; [] gives an empty, non-nil
// slice, as encoding/json does.
func (p *fparser) stringArray() ([]string, bool) {
	if !p.eat('[') {
		return nil, false
	}
	out := []string{}
	p.ws()
	if p.eat(']') {
		return out, true
	}
	for {
		p.ws()
		s, ok := p.plainString()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		p.ws()
		if p.eat(',') {
			continue
		}
		return out, p.eat(']')
	}
}

// stringMap reads an object of plain strings with plain, distinct keys;
// {} gives an empty, non-nil map, as encoding/json does.
func (p *fparser) stringMap() (map[string]string, bool) {
	if !p.eat('{') {
		return nil, false
	}
	out := map[string]string{}
	p.ws()
	if p.eat('}') {
		return out, true
	}
	for {
		p.ws()
		k, ok := p.plainString()
		if !ok {
			return nil, false
		}
		p.ws()
		if !p.eat(':') {
			return nil, false
		}
		p.ws()
		v, ok := p.plainString()
		if !ok {
			return nil, false
		}
		if _, dup := out[k]; dup {
			return nil, false
		}
		out[k] = v
		p.ws()
		if p.eat(',') {
			continue
		}
		return out, p.eat('}')
	}
}

// number reads a number literal: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// and reports whether it is an integer literal (no fraction, no exponent).
func (p *fparser) number() (lit string, integer, ok bool) {
	start := p.i
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.i < len(p.s) && '1' <= p.s[p.i] && p.s[p.i] <= '9':
		p.digits()
	default:
		return "", false, false
	}
	integer = true
	if p.eat('.') {
		integer = false
		if p.digits() == 0 {
			return "", false, false
		}
	}
	if p.eat('e') || p.eat('E') {
		integer = false
		if !p.eat('+') {
			p.eat('-')
		}
		if p.digits() == 0 {
			return "", false, false
		}
	}
	return p.s[start:p.i], integer, true
}

func (p *fparser) digits() int {
	n := 0
	for p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// int reads an integer literal into an int, as encoding/json does; a
// fraction, an exponent or an overflow is not taken.
func (p *fparser) int() (int, bool) {
	lit, integer, ok := p.number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	return int(n), err == nil
}

// float reads a number into a float64, as encoding/json does; a number out
// of range is not taken.
func (p *fparser) float() (float64, bool) {
	lit, _, ok := p.number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(lit, 64)
	return f, err == nil
}

func (p *fparser) bool() (bool, bool) {
	switch {
	case p.lit("true"):
		return true, true
	case p.lit("false"):
		return false, true
	}
	return false, false
}

// str validates and skips any string.
func (p *fparser) str() bool {
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
				for k := p.i + 1; k < p.i+5; k++ {
					if !isHex(p.s[k]) {
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

// value validates and skips a payload value (no leading whitespace) at
// nesting depth (payload itself is 1). An object key with an escape, a
// duplicate key or nesting deeper than fastMaxDepth is not taken.
func (p *fparser) value(depth int) bool {
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		return p.str()
	case c == '{':
		if depth > fastMaxDepth {
			return false
		}
		p.i++
		p.ws()
		if p.eat('}') {
			return true
		}
		var keys []string
		for {
			p.ws()
			k, ok := p.plainString()
			if !ok {
				return false
			}
			for _, seen := range keys {
				if seen == k {
					return false
				}
			}
			if len(keys) >= 64 {
				return false // the slow path checks large objects
			}
			keys = append(keys, k)
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
		if depth > fastMaxDepth {
			return false
		}
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
		_, _, ok := p.number()
		return ok
	}
	return p.lit("true") || p.lit("false") || p.lit("null")
}
