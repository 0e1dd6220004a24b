package blackboard

import "testing"

// The expectations are Python's fnmatch.fnmatchcase(name, pattern).
func TestFnmatch(t *testing.T) {
	tests := map[string]struct {
		pattern, name string
		want          bool
	}{
		"literal":                   {"a.b", "a.b", true},
		"literal mismatch":          {"a.b", "a.c", false},
		"star crosses dots":         {"reasoning.*", "reasoning.inference.completed", true},
		"star alone":                {"*", "anything.at.all", true},
		"star empty":                {"a*", "a", true},
		"star needs prefix":         {"reasoning.*", "reasoning", false},
		"star middle":               {"blackboard.*.added", "blackboard.entry.added", true},
		"star middle deep":          {"blackboard.*.added", "blackboard.x.y.added", true},
		"star middle miss":          {"blackboard.*.added", "blackboard.entry.removed", false},
		"two stars":                 {"*.*", "a.b", true},
		"two stars need dot":        {"*.*", "ab", false},
		"backtracking":              {"*ab*abc", "xabyabzabc", true},
		"question":                  {"a?c", "abc", true},
		"question is one char":      {"a?c", "ac", false},
		"question matches dot":      {"a?c", "a.c", true},
		"case sensitive":            {"Blackboard.*", "blackboard.entry", false},
		"set":                       {"[abc]x", "bx", true},
		"set miss":                  {"[abc]x", "dx", false},
		"negated set":               {"[!abc]x", "dx", true},
		"negated set miss":          {"[!abc]x", "ax", false},
		"range":                     {"job[0-9]", "job7", true},
		"range miss":                {"job[0-9]", "jobx", false},
		"caret is literal":          {"[^a]", "^", true},
		"caret not negation":        {"[^a]", "b", false},
		"close bracket first":       {"[]]", "]", true},
		"negated close first":       {"[!]]", "a", true},
		"negated close first miss":  {"[!]]", "]", false},
		"unclosed bracket literal":  {"a[b", "a[b", true},
		"unclosed negated literal":  {"[!", "[!", true},
		"empty brackets literal":    {"[]", "[]", true},
		"leading hyphen literal":    {"[-a]", "-", true},
		"trailing hyphen literal":   {"[a-]", "-", true},
		"trailing hyphen range end": {"[a-]", "b", false},
		"reversed range empty":      {"[z-a]", "m", false},
		"reversed range keeps rest": {"[xz-ay]", "y", true},
		"hyphen after range":        {"[a-c-e]", "-", true},
		"hyphen after range e":      {"[a-c-e]", "e", true},
		"hyphen after range d":      {"[a-c-e]", "d", false},
		"backslash literal":         {`a\*`, `a\bc`, true},
		"backslash no escape":       {`\*`, `*`, false},
		"star in set literal":       {"[*]", "*", true},
		"unicode":                   {"é?*", "éxyz", true},
		"empty pattern":             {"", "", true},
		"empty pattern name":        {"", "a", false},
		"trailing stars":            {"a**", "a", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Fnmatch(tc.pattern, tc.name); got != tc.want {
				t.Errorf("Fnmatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
			}
		})
	}
}
