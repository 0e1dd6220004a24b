package jobs

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The job store's Lua scripts, one file per atomic step, each with a header
// listing its KEYS, ARGV and returns. lib.lua is prepended to each. A
// Fenced view passes its fence key as one more KEYS entry (of the same
// board, so the same Cluster slot) and its epoch as an ARGV; an unfenced
// call passes no fence key and an empty epoch.
var (
	//go:embed lua/lib.lua
	luaLib string
	//go:embed lua/accept.lua
	luaAccept string
	//go:embed lua/transition.lua
	luaTransition string
	//go:embed lua/handle.lua
	luaHandle string
	//go:embed lua/withdrawn.lua
	luaWithdrawn string
)

var (
	scriptAccept     = redis.NewScript(luaLib + luaAccept)
	scriptTransition = redis.NewScript(luaLib + luaTransition)
	scriptHandle     = redis.NewScript(luaHandle)
	scriptWithdrawn  = redis.NewScript(luaWithdrawn)
)
