package wire

import "testing"

func TestLane(t *testing.T) {
	tests := map[string]struct {
		data          string
		entryPriority int
		want          int
	}{
		"explicit 0":                     {`{"priority":0}`, EntryPriorityCritical, 0},
		"explicit 9":                     {`{"priority":9}`, EntryPriorityLow, 9},
		"explicit -0 is 0, as in Python": {`{"priority":-0}`, EntryPriorityHigh, 0},
		"absent, LOW":                    {`{"template":"x"}`, EntryPriorityLow, 2},
		"absent, NORMAL":                 {`{"template":"x"}`, EntryPriorityNormal, 4},
		"absent, HIGH":                   {`{"template":"x"}`, EntryPriorityHigh, 6},
		"absent, CRITICAL":               {`{"template":"x"}`, EntryPriorityCritical, 8},
		"out of range high":              {`{"priority":10}`, EntryPriorityNormal, 4},
		"out of range low":               {`{"priority":-1}`, EntryPriorityNormal, 4},
		"float is not an int":            {`{"priority":5.0}`, EntryPriorityNormal, 4},
		"exponent is not an int":         {`{"priority":5e0}`, EntryPriorityNormal, 4},
		"string":                         {`{"priority":"5"}`, EntryPriorityNormal, 4},
		"bool is not an int":             {`{"priority":true}`, EntryPriorityNormal, 4},
		"null":                           {`{"priority":null}`, EntryPriorityNormal, 4},
		"huge":                           {`{"priority":99999999999999999999}`, EntryPriorityNormal, 4},
		"nested priority is ignored":     {`{"payload":{"priority":9}}`, EntryPriorityNormal, 4},
		"wrong case is ignored":          {`{"Priority":9}`, EntryPriorityNormal, 4},
		"last duplicate wins":            {`{"priority":1,"priority":7}`, EntryPriorityNormal, 7},
		"malformed data":                 {`{"priority":7`, EntryPriorityHigh, 6},
		"not an object":                  {`[7]`, EntryPriorityLow, 2},
		"empty":                          {``, EntryPriorityNormal, 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Lane([]byte(tc.data), tc.entryPriority); got != tc.want {
				t.Errorf("Lane(%s, %d) = %d, want %d", tc.data, tc.entryPriority, got, tc.want)
			}
		})
	}
}

func TestJobID(t *testing.T) {
	tests := map[string]struct {
		requestEntryID string
		want           string // hashlib.sha256(("compute.job:" + id).encode()).hexdigest()[:32]
	}{
		"entry id": {"0123456789abcdef0123456789abcdef", "e4948e21da6913daf8d6921080e285fc"},
		"empty":    {"", "1837cb1638298470656d34848bd8f64e"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := JobID(tc.requestEntryID); got != tc.want {
				t.Errorf("JobID(%q) = %q, want %q", tc.requestEntryID, got, tc.want)
			}
		})
	}
}
