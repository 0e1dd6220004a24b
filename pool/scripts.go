package pool

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The pool's Lua scripts, one file per atomic step, each with a header
// listing its KEYS, ARGV and replies.
var (
	//go:embed lua/acquire.lua
	luaAcquire string
	//go:embed lua/renew.lua
	luaRenew string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/assign.lua
	luaAssign string
	//go:embed lua/order.lua
	luaOrder string
	//go:embed lua/beat.lua
	luaBeat string
	//go:embed lua/reconciled.lua
	luaReconciled string
	//go:embed lua/round_open.lua
	luaRoundOpen string
	// round.lua is prepended to the scripts that take part in
	// reconciliation rounds.
	//go:embed lua/round.lua
	luaRound string
)

var (
	scriptAcquire = redis.NewScript(luaAcquire)
	scriptRenew   = redis.NewScript(luaRenew)
	scriptRelease = redis.NewScript(luaRelease)
	scriptAssign  = redis.NewScript(luaRound + luaAssign)
	scriptOrder   = redis.NewScript(luaOrder)
	scriptBeat    = redis.NewScript(luaRound + luaBeat)

	scriptReconciled = redis.NewScript(luaRound + luaReconciled)
	scriptRoundOpen  = redis.NewScript(luaRound + luaRoundOpen)
)
