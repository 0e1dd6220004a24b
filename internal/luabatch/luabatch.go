// Package luabatch runs one Lua script many times in one pipeline: the
// batch steps of the broker, the job store and the pool share it.
package luabatch

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Call is one run of a script: its KEYS and ARGV. A Call with nil Keys is
// skipped (its result is nil).
type Call struct {
	Keys []string
	Args []any
}

// Eval runs sc once per call, in one pipeline of EVALSHA; result i is
// call i's. Calls that meet NOSCRIPT (the script is not loaded yet, or
// Redis restarted) did not run: the script is loaded and they are sent
// again, once.
func Eval(ctx context.Context, rdb redis.UniversalClient, sc *redis.Script, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	send := func(idx []int) {
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				cmds[i] = sc.EvalSha(ctx, p, calls[i].Keys, calls[i].Args...)
			}
			return nil
		})
	}
	var all []int
	for i, c := range calls {
		if c.Keys != nil {
			all = append(all, i)
		}
	}
	if len(all) == 0 {
		return cmds
	}
	send(all)
	var again []int
	for _, i := range all {
		if err := cmds[i].Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return cmds // the NOSCRIPT errors stand
		}
		send(again)
	}
	return cmds
}
