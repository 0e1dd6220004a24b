package wire

import (
	"github.com/computeboard/computeboard/internal/jsonscan"
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
// TestDecodeRequestMatchesSlowPath check that DecodeRequest returns exactly
// what slowDecodeRequest, the token-scanning decoder alone, returns.
func fastDecode(data []byte) (r Request, set fieldSet, ok bool) {
	p := fparser{jsonscan.Scanner{Src: string(data)}}
	p.WS()
	if !p.Eat('{') {
		return r, 0, false
	}
	var seen uint32
	p.WS()
	if !p.Eat('}') {
		for {
			key, ok := p.Key()
			if !ok {
				return r, 0, false
			}
			bit, ok := p.requestMember(key, &r, &set)
			if !ok || seen&bit != 0 {
				return r, 0, false
			}
			seen |= bit
			p.WS()
			if p.Eat(',') {
				continue
			}
			if p.Eat('}') {
				break
			}
			return r, 0, false
		}
	}
	p.WS()
	if !p.Done() {
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
		if n, ok = p.Int(); ok && n == SchemaVersion {
			r.Version = n
			*set |= setVersion
			return 1 << 0, true
		}
		return 0, false
	case "name":
		r.Name, ok = p.PlainString()
		return 1 << 1, ok
	case "template":
		r.Template, ok = p.PlainString()
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
		r.Priority, ok = p.Int()
		*set |= setPriority
		return 1 << 7, ok
	case "account":
		r.Account, ok = p.PlainString()
		*set |= setAccount
		return 1 << 8, ok
	case "deadline":
		r.Deadline, ok = p.Float()
		*set |= setDeadline
		return 1 << 9, ok
	case "estimated_duration":
		r.EstimatedDuration, ok = p.Float()
		return 1 << 10, ok
	case "timeout":
		r.Timeout, ok = p.Float()
		return 1 << 11, ok
	case "max_retries":
		r.MaxRetries, ok = p.Int()
		return 1 << 12, ok
	case "idempotency_key":
		r.IdempotencyKey, ok = p.PlainString()
		*set |= setIdempotencyKey
		return 1 << 13, ok
	case "node_selector":
		r.NodeSelector, ok = p.stringMap()
		return 1 << 14, ok
	case "gang_id":
		r.GangID, ok = p.PlainString()
		*set |= setGangID
		return 1 << 15, ok
	case "gang_size":
		r.GangSize, ok = p.Int()
		*set |= setGangSize
		return 1 << 16, ok
	case "provider":
		r.Provider, ok = p.PlainString()
		*set |= setProvider
		return 1 << 18, ok
	case "placement":
		r.Placement, ok = p.PlainString()
		*set |= setPlacement
		return 1 << 19, ok
	case "payload":
		start := p.Pos
		if !p.value(1) {
			return 0, false
		}
		r.Payload = []byte(p.Src[start:p.Pos]) // a copy, as json.RawMessage.UnmarshalJSON makes
		return 1 << 17, true
	}
	return 0, false
}

// resources reads resource_requirements, an object.
func (p *fparser) resources(res *Resources, set *fieldSet) bool {
	if !p.Eat('{') {
		return false
	}
	var seen uint32
	p.WS()
	if p.Eat('}') {
		return true
	}
	for {
		key, ok := p.Key()
		if !ok {
			return false
		}
		var bit uint32
		switch key {
		case "cpu_cores":
			res.CPUCores, ok = p.Float()
			*set |= setCPUCores
			bit = 1 << 0
		case "memory":
			res.MemoryGB, ok = p.Float()
			*set |= setMemory
			bit = 1 << 1
		case "gpu_count":
			res.GPUCount, ok = p.Int()
			bit = 1 << 2
		case "gpu_memory":
			res.GPUMemoryGB, ok = p.Float()
			bit = 1 << 3
		case "gpu_model":
			res.GPUModel, ok = p.PlainString()
			bit = 1 << 4
		case "mig_profile":
			res.MIGProfile, ok = p.PlainString()
			bit = 1 << 5
		case "storage":
			res.StorageGB, ok = p.Float()
			bit = 1 << 6
		case "storage_tier":
			res.StorageTier, ok = p.PlainString()
			bit = 1 << 7
		case "network_bandwidth":
			res.NetworkMbps, ok = p.Float()
			bit = 1 << 8
		case "numa_local":
			res.NUMALocal, ok = p.Bool()
			bit = 1 << 9
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		p.WS()
		if p.Eat(',') {
			continue
		}
		return p.Eat('}')
	}
}

// fparser reads a request with jsonscan's primitives over a string
// already known to be valid UTF-8 (so a plain string needs no UTF-8
// check). Its methods report false rather than guess.
type fparser struct {
	jsonscan.Scanner
}

// stringArray reads an array of plain strings; [] gives an empty, non-nil
// slice, as encoding/json does.
func (p *fparser) stringArray() ([]string, bool) {
	if !p.Eat('[') {
		return nil, false
	}
	out := []string{}
	p.WS()
	if p.Eat(']') {
		return out, true
	}
	for {
		p.WS()
		s, ok := p.PlainString()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		p.WS()
		if p.Eat(',') {
			continue
		}
		return out, p.Eat(']')
	}
}

// stringMap reads an object of plain strings with plain, distinct keys;
// {} gives an empty, non-nil map, as encoding/json does.
func (p *fparser) stringMap() (map[string]string, bool) {
	if !p.Eat('{') {
		return nil, false
	}
	out := map[string]string{}
	p.WS()
	if p.Eat('}') {
		return out, true
	}
	for {
		k, ok := p.Key()
		if !ok {
			return nil, false
		}
		v, ok := p.PlainString()
		if !ok {
			return nil, false
		}
		if _, dup := out[k]; dup {
			return nil, false
		}
		out[k] = v
		p.WS()
		if p.Eat(',') {
			continue
		}
		return out, p.Eat('}')
	}
}

// value validates and skips a payload value (no leading whitespace) at
// nesting depth (payload itself is 1). An object key with an escape, a
// duplicate key or nesting deeper than fastMaxDepth is not taken.
func (p *fparser) value(depth int) bool {
	if p.Pos >= len(p.Src) {
		return false
	}
	switch c := p.Src[p.Pos]; {
	case c == '"':
		return p.SkipString()
	case c == '{':
		if depth > fastMaxDepth {
			return false
		}
		p.Pos++
		p.WS()
		if p.Eat('}') {
			return true
		}
		var keys []string
		for {
			p.WS()
			k, ok := p.PlainString()
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
			p.WS()
			if !p.Eat(':') {
				return false
			}
			p.WS()
			if !p.value(depth + 1) {
				return false
			}
			p.WS()
			if p.Eat(',') {
				continue
			}
			return p.Eat('}')
		}
	case c == '[':
		if depth > fastMaxDepth {
			return false
		}
		p.Pos++
		p.WS()
		if p.Eat(']') {
			return true
		}
		for {
			p.WS()
			if !p.value(depth + 1) {
				return false
			}
			p.WS()
			if p.Eat(',') {
				continue
			}
			return p.Eat(']')
		}
	case c == '-' || '0' <= c && c <= '9':
		_, _, ok := p.Number()
		return ok
	}
	return p.Lit("true") || p.Lit("false") || p.Lit("null")
}
