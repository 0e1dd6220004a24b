package jobs

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The job store's Lua scripts, one file per atomic step, each with a header
// listing its KEYS, ARGV and returns. lib.lua is prepended to each, after
// the one constant it takes from Go (SIDE_FIELDS: sideFields). A
// Fenced view passes its fence key as one more KEYS entry (of the same
// board, so the same Cluster slot) and its epoch as an ARGV; an unfenced
// call passes no fence key and an empty epoch.
var (
	//go:embed lua/lib.lua
	luaLibSrc string
	//go:embed lua/accept.lua
	luaAccept string
	//go:embed lua/transition.lua
	luaTransition string
	//go:embed lua/handle.lua
	luaHandle string
	//go:embed lua/withdrawn.lua
	luaWithdrawn string
	//go:embed lua/unlist.lua
	luaUnlist string
)

// sideFields are the record's fields kept beside its HASH, each in a
// STRING of its own (blackboard.Keys.JobField), when their value is longer
// than Redis's default hash-max-listpack-value (64 bytes): the long ones a
// waiting job has, so that its HASH stays a listpack. A shorter value, and
// any value of a record written before, is in the HASH, and a value there
// wins (lua/lib.lua's set_fields).
var sideFields = []string{"request_data", "explanation"}

// luaLib is lib.lua after the one constant it takes from Go, SIDE_FIELDS.
var luaLib = luaSideFields() + luaLibSrc

func luaSideFields() string {
	var b strings.Builder
	b.WriteString("local SIDE_FIELDS = {")
	for i, f := range sideFields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(f))
	}
	b.WriteString("}\n")
	return b.String()
}

var (
	scriptAccept     = redis.NewScript(luaLib + luaAccept)
	scriptTransition = redis.NewScript(luaLib + luaTransition)
	scriptHandle     = redis.NewScript(luaHandle)
	scriptWithdrawn  = redis.NewScript(luaWithdrawn)
	scriptUnlist     = redis.NewScript(luaUnlist)
)
