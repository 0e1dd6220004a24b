package engine_test

import (
	"encoding/json"
	"reflect"

	"github.com/computeboard/computeboard/engine"
)

// samePlan reports whether two plans are identical, field for field and as
// JSON bytes.
func samePlan(a, b engine.Plan) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb) && reflect.DeepEqual(a, b)
}
