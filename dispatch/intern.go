package dispatch

import (
	"strings"
)

// internLimit bounds each intern table: past it new values are kept as
// they are (correct, just not shared), so a flood of distinct accounts or
// selectors cannot grow the tables without bound.
const internLimit = 4096

// internTable shares the strings and node selectors that many pending
// jobs repeat (account, GPU model, MIG profile, storage tier, selector):
// each decoded record brings its own copies, which the engine's Job would
// otherwise keep for as long as the job waits. Owned by the Run goroutine.
type internTable struct {
	strs   map[string]string
	sels   map[string]map[string]string // canonical "k=v\x00…" → one shared selector (never modified)
	shapes map[shapeKey]*jobShape       // tracked jobs' shared shapes (compactJob)
}

// str returns the shared copy of v.
func (it *internTable) str(v string) string {
	if v == "" {
		return ""
	}
	if s, ok := it.strs[v]; ok {
		return s
	}
	if it.strs == nil {
		it.strs = map[string]string{}
	}
	if len(it.strs) < internLimit {
		v = strings.Clone(v)
		it.strs[v] = v
	}
	return v
}

// selector returns a shared selector equal to m.
func (it *internTable) selector(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	key := selectorKey(m)
	if s, ok := it.sels[key]; ok {
		return s
	}
	if it.sels == nil {
		it.sels = map[string]map[string]string{}
	}
	if len(it.sels) < internLimit {
		s := make(map[string]string, len(m))
		for k, v := range m {
			s[it.str(k)] = it.str(v)
		}
		it.sels[key] = s
		return s
	}
	return m
}
