package blackboard

// Fnmatch reports whether name matches the shell-style pattern with
// Python's fnmatch.fnmatchcase semantics, which subscription patterns use:
//
//   - '*' matches any run of characters, dots included ("a.*" matches "a.b.c");
//   - '?' matches one character;
//   - "[seq]" matches one character in seq, "[!seq]" one not in it; ranges
//     like a-z work, a ']' right after '[' or "[!" is literal, and a '[' with
//     no closing ']' is literal;
//   - there is no escape character, and matching is case-sensitive.
//
// Unlike path.Match, '*' crosses separators and a bad pattern is never an
// error. It works on runes.
func Fnmatch(pattern, name string) bool {
	p, s := []rune(pattern), []rune(name)
	pi, si := 0, 0
	star, mark := -1, 0 // last '*' seen, and where in s it began matching
	for si < len(s) {
		if pi < len(p) {
			if p[pi] == '*' {
				star, mark = pi, si
				pi++
				continue
			}
			if ok, width := matchOne(p[pi:], s[si]); ok {
				pi += width
				si++
				continue
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' swallow one more character and retry.
		mark++
		pi, si = star+1, mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchOne matches the single-character token at the start of p ('?', a
// bracket set or a literal) against c, returning whether it matched and
// the token's width in p.
func matchOne(p []rune, c rune) (bool, int) {
	switch p[0] {
	case '?':
		return true, 1
	case '[':
		if set, negate, width, ok := parseSet(p); ok {
			in := false
			for i := 0; i < len(set); {
				if i+2 < len(set) && set[i+1] == '-' {
					in = in || set[i] <= c && c <= set[i+2]
					i += 3
				} else {
					in = in || set[i] == c
					i++
				}
			}
			return in != negate, width
		}
	}
	return p[0] == c, 1
}

// parseSet reads the bracket expression at the start of p (p[0] == '['),
// following Python's fnmatch.translate: an optional '!', then a literal ']'
// if it comes first, then up to the next ']'. ok is false when there is no
// closing ']' (the '[' is then a literal).
func parseSet(p []rune) (set []rune, negate bool, width int, ok bool) {
	j := 1
	if j < len(p) && p[j] == '!' {
		j++
	}
	if j < len(p) && p[j] == ']' {
		j++
	}
	for j < len(p) && p[j] != ']' {
		j++
	}
	if j >= len(p) {
		return nil, false, 0, false
	}
	set = p[1:j]
	if len(set) > 0 && set[0] == '!' {
		negate, set = true, set[1:]
	}
	return set, negate, j + 1, true
}
