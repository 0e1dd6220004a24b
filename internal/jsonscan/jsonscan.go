// Package jsonscan holds the scanning primitives shared by computeboard's
// hand-written one-pass JSON parsers (broker's intake entries and wire's
// requests). Those parsers are fast paths: they take the common shapes
// themselves and fall back to an encoding/json-based decoder on anything
// unusual, so every primitive here follows encoding/json's grammar
// (RFC 8259) exactly and reports false rather than guess.
//
// The package imports only the standard library, because wire imports it.
package jsonscan

import (
	"strconv"
	"unicode/utf8"
)

// Scanner reads JSON from Src starting at Pos.
//
// The input is a string, not a []byte: the values a parser takes from it
// (keys, plain strings, raw sub-documents) are substrings of Src, shared
// with it rather than copied. A caller holding a string (broker) scans it
// as is; a caller holding a []byte (wire) converts it once, which is the
// only copy, and is the one the decoded strings need anyway since they
// must not alias a buffer the caller may reuse.
//
// Parsers embed a Scanner and build their grammar on its methods; they
// read Src[start:Pos] for raw values and may move Pos themselves. What
// differs between callers (which shapes to take, duplicate keys, payload
// depth and key limits) stays in the parsers.
type Scanner struct {
	Src string
	Pos int
}

// Done reports whether the whole input has been read.
func (p *Scanner) Done() bool { return p.Pos == len(p.Src) }

// WS skips whitespace (space, tab, newline, carriage return).
func (p *Scanner) WS() {
	for p.Pos < len(p.Src) {
		switch p.Src[p.Pos] {
		case ' ', '\t', '\n', '\r':
			p.Pos++
		default:
			return
		}
	}
}

// Eat consumes c if it is the next byte.
func (p *Scanner) Eat(c byte) bool {
	if p.Pos < len(p.Src) && p.Src[p.Pos] == c {
		p.Pos++
		return true
	}
	return false
}

// Lit consumes l if the input continues with it.
func (p *Scanner) Lit(l string) bool {
	if len(p.Src)-p.Pos >= len(l) && p.Src[p.Pos:p.Pos+len(l)] == l {
		p.Pos += len(l)
		return true
	}
	return false
}

// PlainString reads a string without escapes or control characters, whose
// decoded value is then its raw content provided the input is valid UTF-8;
// it does not check that (see ValidPlainString). On false, Pos is left
// somewhere inside the string.
func (p *Scanner) PlainString() (string, bool) {
	if !p.Eat('"') {
		return "", false
	}
	start := p.Pos
	for p.Pos < len(p.Src) {
		switch c := p.Src[p.Pos]; {
		case c == '"':
			v := p.Src[start:p.Pos]
			p.Pos++
			return v, true
		case c == '\\' || c < 0x20:
			return "", false
		}
		p.Pos++
	}
	return "", false
}

// Key reads an object member's key and its colon, with the whitespace
// around them, leaving the scanner at the value: `"name" :` → "name". The
// key is a plain string (see PlainString).
func (p *Scanner) Key() (string, bool) {
	p.WS()
	k, ok := p.PlainString()
	if !ok {
		return "", false
	}
	p.WS()
	if !p.Eat(':') {
		return "", false
	}
	p.WS()
	return k, true
}

// ValidPlainString is PlainString for input not known to be valid UTF-8:
// it also refuses a string that is not valid UTF-8 (encoding/json would
// replace the bad bytes), but still consumes it.
func (p *Scanner) ValidPlainString() (string, bool) {
	if !p.Eat('"') {
		return "", false
	}
	start := p.Pos
	ascii := true
	for p.Pos < len(p.Src) {
		c := p.Src[p.Pos]
		switch {
		case c == '"':
			v := p.Src[start:p.Pos]
			p.Pos++
			return v, ascii || utf8.ValidString(v)
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.Pos++
	}
	return "", false
}

// SkipString validates and skips any string, escapes included (it does
// not check UTF-8, which encoding/json does not require).
func (p *Scanner) SkipString() bool {
	if !p.Eat('"') {
		return false
	}
	for p.Pos < len(p.Src) {
		c := p.Src[p.Pos]
		p.Pos++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if p.Pos >= len(p.Src) {
				return false
			}
			switch p.Src[p.Pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.Pos++
			case 'u':
				if len(p.Src)-p.Pos < 5 {
					return false
				}
				for k := p.Pos + 1; k < p.Pos+5; k++ {
					if !IsHex(p.Src[k]) {
						return false
					}
				}
				p.Pos += 5
			default:
				return false
			}
		}
	}
	return false
}

// IsHex reports whether c is a hexadecimal digit.
func IsHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// Number reads a number literal: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// and reports whether it is an integer literal (no fraction, no exponent).
func (p *Scanner) Number() (lit string, integer, ok bool) {
	start := p.Pos
	p.Eat('-')
	switch {
	case p.Eat('0'):
	case p.Pos < len(p.Src) && '1' <= p.Src[p.Pos] && p.Src[p.Pos] <= '9':
		p.Digits()
	default:
		return "", false, false
	}
	integer = true
	if p.Eat('.') {
		integer = false
		if p.Digits() == 0 {
			return "", false, false
		}
	}
	if p.Eat('e') || p.Eat('E') {
		integer = false
		if !p.Eat('+') {
			p.Eat('-')
		}
		if p.Digits() == 0 {
			return "", false, false
		}
	}
	return p.Src[start:p.Pos], integer, true
}

// Digits skips decimal digits and returns how many.
func (p *Scanner) Digits() int {
	n := 0
	for p.Pos < len(p.Src) && '0' <= p.Src[p.Pos] && p.Src[p.Pos] <= '9' {
		p.Pos++
		n++
	}
	return n
}

// Int reads an integer literal into an int, as encoding/json does; a
// fraction, an exponent or an overflow is not taken.
func (p *Scanner) Int() (int, bool) {
	lit, integer, ok := p.Number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	return int(n), err == nil
}

// Float reads a number into a float64, as encoding/json does; a number out
// of range is not taken.
func (p *Scanner) Float() (float64, bool) {
	lit, _, ok := p.Number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(lit, 64)
	return f, err == nil
}

// Bool reads true or false.
func (p *Scanner) Bool() (v, ok bool) {
	switch {
	case p.Lit("true"):
		return true, true
	case p.Lit("false"):
		return false, true
	}
	return false, false
}

// SkipValue validates and skips any JSON value (no leading whitespace) at
// nesting depth, where a value deeper than maxDepth is not taken (the
// check applies to every value, scalars included). Object keys may have
// escapes and repeat, as encoding/json accepts.
func (p *Scanner) SkipValue(depth, maxDepth int) bool {
	if p.Pos >= len(p.Src) || depth > maxDepth {
		return false
	}
	switch c := p.Src[p.Pos]; {
	case c == '"':
		return p.SkipString()
	case c == '{':
		p.Pos++
		p.WS()
		if p.Eat('}') {
			return true
		}
		for {
			p.WS()
			if !p.SkipString() {
				return false
			}
			p.WS()
			if !p.Eat(':') {
				return false
			}
			p.WS()
			if !p.SkipValue(depth+1, maxDepth) {
				return false
			}
			p.WS()
			if p.Eat(',') {
				continue
			}
			return p.Eat('}')
		}
	case c == '[':
		p.Pos++
		p.WS()
		if p.Eat(']') {
			return true
		}
		for {
			p.WS()
			if !p.SkipValue(depth+1, maxDepth) {
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
