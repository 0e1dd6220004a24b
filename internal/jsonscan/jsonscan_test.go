package jsonscan

import (
	"fmt"
	"testing"
)

// TestPrimitives runs each primitive on an input and checks what it
// returns and where it leaves Pos.
func TestPrimitives(t *testing.T) {
	run := map[string]func(p *Scanner) string{
		"WS":   func(p *Scanner) string { p.WS(); return "" },
		"Eat{": func(p *Scanner) string { return fmt.Sprint(p.Eat('{')) },
		"Lit":  func(p *Scanner) string { return fmt.Sprint(p.Lit("true")) },
		"Plain": func(p *Scanner) string {
			v, ok := p.PlainString()
			return fmt.Sprintf("%q %v", v, ok)
		},
		"ValidPlain": func(p *Scanner) string {
			v, ok := p.ValidPlainString()
			return fmt.Sprintf("%q %v", v, ok)
		},
		"SkipString": func(p *Scanner) string { return fmt.Sprint(p.SkipString()) },
		"Number": func(p *Scanner) string {
			lit, integer, ok := p.Number()
			return fmt.Sprintf("%q %v %v", lit, integer, ok)
		},
		"Digits": func(p *Scanner) string { return fmt.Sprint(p.Digits()) },
		"Int": func(p *Scanner) string {
			n, ok := p.Int()
			return fmt.Sprint(n, ok)
		},
		"Float": func(p *Scanner) string {
			f, ok := p.Float()
			return fmt.Sprint(f, ok)
		},
		"Bool": func(p *Scanner) string {
			v, ok := p.Bool()
			return fmt.Sprint(v, ok)
		},
		"Skip":  func(p *Scanner) string { return fmt.Sprint(p.SkipValue(0, 3)) },
		"Skip0": func(p *Scanner) string { return fmt.Sprint(p.SkipValue(1, 0)) },
	}
	for _, c := range []struct {
		op, in, want string
		pos          int
	}{
		{"WS", " \t\r\n x", "", 5},
		{"WS", "\v", "", 0}, // not JSON whitespace
		{"WS", "", "", 0},
		{"Eat{", "{}", "true", 1},
		{"Eat{", "[", "false", 0},
		{"Eat{", "", "false", 0},
		{"Lit", "true,", "true", 4},
		{"Lit", "tru", "false", 0},
		{"Lit", "True", "false", 0},
		{"Lit", "", "false", 0},
		{"Plain", `"abc" `, `"abc" true`, 5},
		{"Plain", `""`, `"" true`, 2},
		{"Plain", `"a\"b"`, `"" false`, 2},
		{"Plain", "\"a\tb\"", `"" false`, 2},
		{"Plain", `"abc`, `"" false`, 4},
		{"Plain", `abc"`, `"" false`, 0},
		{"Plain", "\"\xff\"", `"\xff" true`, 3}, // UTF-8 is not checked
		{"ValidPlain", "\"\xff\"", `"\xff" false`, 3},
		{"ValidPlain", `"héllo"`, `"héllo" true`, 8},
		{"ValidPlain", `"a\nb"`, `"" false`, 2},
		{"SkipString", `"a\"\\\/\b\f\n\r\t\u00e9" `, "true", 25},
		{"SkipString", `"\uD83D\uDE00"`, "true", 14},
		{"SkipString", `"\u00g9"`, "false", 2},
		{"SkipString", `"\u00e"`, "false", 2},
		{"SkipString", `"\x"`, "false", 2},
		{"SkipString", `"\`, "false", 2},
		{"SkipString", "\"\x01\"", "false", 2},
		{"SkipString", `"abc`, "false", 4},
		{"Number", "0", `"0" true true`, 1},
		{"Number", "-12,", `"-12" true true`, 3},
		{"Number", "1.5e+3]", `"1.5e+3" false true`, 6},
		{"Number", "2E-7", `"2E-7" false true`, 4},
		{"Number", "01", `"0" true true`, 1}, // the caller rejects what follows
		{"Number", "-", `"" false false`, 1},
		{"Number", "1.", `"" false false`, 2},
		{"Number", "1e", `"" false false`, 2},
		{"Number", "+1", `"" false false`, 0},
		{"Number", ".5", `"" false false`, 0},
		{"Digits", "123a", "3", 3},
		{"Digits", "a", "0", 0},
		{"Int", "42", "42 true", 2},
		{"Int", "-9223372036854775808", "-9223372036854775808 true", 20},
		{"Int", "9223372036854775808", "9223372036854775807 false", 19},
		{"Int", "1.0", "0 false", 3},
		{"Int", "1e2", "0 false", 3},
		{"Float", "1.25", "1.25 true", 4},
		{"Float", "-0", "-0 true", 2},
		{"Float", "1e400", "+Inf false", 5},
		{"Bool", "true", "true true", 4},
		{"Bool", "false", "false true", 5},
		{"Bool", "null", "false false", 0},
		{"Skip", `{"a":[1,{"b\"":null}],"a":true} `, "true", 31},
		{"Skip", `[ ]`, "true", 3},
		{"Skip", `{ }`, "true", 3},
		{"Skip", `[[[[1]]]]`, "false", 4}, // deeper than 3
		{"Skip", `[[[1]]]`, "true", 7},
		{"Skip", `{"a" 1}`, "false", 5},
		{"Skip", `[1,]`, "false", 3},
		{"Skip", `[1 2]`, "false", 3},
		{"Skip", `{"a":1,}`, "false", 7},
		{"Skip", `{1:2}`, "false", 1},
		{"Skip", `nul`, "false", 0},
		{"Skip", `false`, "true", 5},
		{"Skip", ``, "false", 0},
		{"Skip0", `1`, "false", 0}, // the depth limit applies to scalars too
	} {
		p := &Scanner{Src: c.in}
		got := run[c.op](p)
		if got != c.want || p.Pos != c.pos {
			t.Errorf("%s(%q) = %s, Pos %d; want %s, Pos %d", c.op, c.in, got, p.Pos, c.want, c.pos)
		}
	}
}

func TestDone(t *testing.T) {
	p := &Scanner{Src: " 1 "}
	p.WS()
	p.Number()
	if p.Done() {
		t.Error("Done before the trailing space")
	}
	p.WS()
	if !p.Done() {
		t.Error("not Done at the end")
	}
}

func TestIsHex(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
		if IsHex(byte(c)) != want {
			t.Errorf("IsHex(%q) = %v", byte(c), !want)
		}
	}
}

func TestKey(t *testing.T) {
	tests := map[string]struct {
		src     string
		wantKey string
		wantOK  bool
		wantPos int // where the scanner stops when ok
	}{
		"plain":         {`"a":1`, "a", true, 4},
		"spaces":        {` "name" :  true`, "name", true, 11},
		"no colon":      {`"a" 1`, "", false, 0},
		"not a string":  {`a:1`, "", false, 0},
		"escaped key":   {`"a\"b":1`, "", false, 0},
		"colon missing": {`"a"`, "", false, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := Scanner{Src: tc.src}
			k, ok := s.Key()
			if k != tc.wantKey || ok != tc.wantOK {
				t.Fatalf("Key() = %q, %v; want %q, %v", k, ok, tc.wantKey, tc.wantOK)
			}
			if ok && s.Pos != tc.wantPos {
				t.Errorf("stopped at %d, want %d", s.Pos, tc.wantPos)
			}
		})
	}
}
