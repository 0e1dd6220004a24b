package broker

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/jobs"
)

// The broker's Lua scripts, one file per atomic step, each with a header
// listing its KEYS, ARGV and returns. lib.lua is prepended to each. (The
// job record's scripts, accept and transition, are package jobs';
// intake.lua is composed with jobs' and blackboard's Lua: jobs.LuaIntake.)
var (
	//go:embed lua/lib.lua
	luaLib string
	//go:embed lua/read.lua
	luaRead string
	//go:embed lua/claim.lua
	luaClaim string
	//go:embed lua/own.lua
	luaOwn string
	//go:embed lua/refresh.lua
	luaRefresh string
	//go:embed lua/ack.lua
	luaAck string
	//go:embed lua/deadletter.lua
	luaDeadLetter string
	//go:embed lua/replay.lua
	luaReplay string
	//go:embed lua/intake.lua
	luaIntake string
)

var (
	scriptRead       = redis.NewScript(luaLib + luaRead)
	scriptClaim      = redis.NewScript(luaLib + luaClaim)
	scriptOwn        = redis.NewScript(luaLib + luaOwn)
	scriptRefresh    = redis.NewScript(luaLib + luaRefresh)
	scriptAck        = redis.NewScript(luaLib + luaAck)
	scriptReplay     = redis.NewScript(luaLib + luaReplay)
	scriptDeadLetter = redis.NewScript(luaLib + luaDeadLetter)
	// scriptIntake is composed: blackboard's and jobs' Lua (jobs.LuaIntake:
	// the record, the job entry, the consume), then ours (the ack).
	scriptIntake = redis.NewScript(jobs.LuaIntake() + luaLib + luaIntake)
)
