package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each atomic step is one Lua script: common.lua (record layout and shared
// helpers) followed by the step's body. Script.Run sends EVALSHA and falls
// back to EVAL when the server's script cache lacks the script.
var (
	//go:embed lua/common.lua
	commonLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/complete.lua
	completeLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/mark_unknown.lua
	markUnknownLua string
	//go:embed lua/get.lua
	getLua string

	claimScript       = redis.NewScript(commonLua + claimLua)
	completeScript    = redis.NewScript(commonLua + completeLua)
	releaseScript     = redis.NewScript(commonLua + releaseLua)
	extendScript      = redis.NewScript(commonLua + extendLua)
	markUnknownScript = redis.NewScript(commonLua + markUnknownLua)
	getScript         = redis.NewScript(commonLua + getLua)
)
