// Package benchutil holds what the benchmark programs (cmd/cbbench,
// cmd/poolbench, cmd/e2ebench, cmd/providerbench, cmd/kubebench) share
// beyond the product's own packages: a run's fresh board and dropping it,
// posting spread over concurrent posters, percentiles (post.go), and an
// `adapter serve` child process (adapter.go).
package benchutil

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
)

// DropBoard deletes a benchmark run's board: every key under its prefix,
// unlinked 1,000 at a time.
func DropBoard(rdb redis.UniversalClient, k blackboard.Keys) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, k.Prefix()+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}
