package dispatch

import (
	"maps"
	"slices"
	"strings"

	"github.com/computeboard/computeboard/engine"
)

// internLimit bounds each intern table: past it new values are kept as
// they are (correct, just not shared), so a flood of distinct accounts or
// shapes cannot grow the tables without bound.
const internLimit = 4096

// internTable shares what many pending jobs repeat: the account, and the
// shape (jobShape: GPU model, MIG profile, storage tier, selector, …).
// Each decoded record brings its own copies, which the scheduler would
// otherwise keep for as long as the job waits. Owned by the Run goroutine.
type internTable struct {
	strs   map[string]string
	shapes map[shapeKey]*jobShape
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

// shapeKey is a jobShape as a map key: its selector as canonical text.
type shapeKey struct {
	shapeFields
	selector string
}

// shape returns the shared shape of j (nil when all of it is zero).
func (it *internTable) shape(j *engine.Job) *jobShape {
	k := shapeKey{
		shapeFields: shapeFields{
			gpuModel: j.GPUModel, migProfile: j.MIGProfile, storageTier: j.StorageTier,
			strategy: j.Strategy, preemptMode: j.PreemptMode, numaLocal: j.NUMALocal, nonPreemptible: j.NonPreemptible,
		},
		selector: selectorKey(j.NodeSelector),
	}
	if k == (shapeKey{}) {
		return nil
	}
	if sh, ok := it.shapes[k]; ok {
		return sh
	}
	sh := &jobShape{shapeFields: k.shapeFields, nodeSelector: maps.Clone(j.NodeSelector)}
	if it.shapes == nil {
		it.shapes = map[shapeKey]*jobShape{}
	}
	if len(it.shapes) < internLimit {
		it.shapes[k] = sh
	}
	return sh
}

// selectorKey is m's canonical text: its sorted k=v pairs, each ended by
// a NUL ("" for an empty selector).
func selectorKey(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}
