package blackboard

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Persistence is how the Redis server keeps what it acknowledged, and what
// that means for computeboard's guarantees, in plain words.
type Persistence struct {
	AOF       bool   // appendonly yes
	Fsync     string // appendfsync: always, everysec, no ("" when unknown)
	Snapshots string // save: the RDB snapshot schedule ("" = none)
	Guarantee string // what a crash of the Redis host can cost
	Safe      bool   // acknowledged writes survive a host crash
}

// ReadPersistence asks the server (CONFIG GET) how it persists writes. A
// server that refuses CONFIG (a managed Redis, an ACL user without it, the
// embedded blackboard) gives an error; the caller says it cannot tell.
func ReadPersistence(ctx context.Context, rdb redis.UniversalClient) (Persistence, error) {
	var p Persistence
	get := func(k string) (string, error) {
		m, err := rdb.ConfigGet(ctx, k).Result()
		if err != nil {
			return "", fmt.Errorf("blackboard: config get %s: %w", k, err)
		}
		return m[k], nil
	}
	aof, err := get("appendonly")
	if err != nil {
		return p, err
	}
	p.AOF = aof == "yes"
	if p.Fsync, err = get("appendfsync"); err != nil {
		return p, err
	}
	if p.Snapshots, err = get("save"); err != nil {
		return p, err
	}
	switch {
	case p.AOF && p.Fsync == "always":
		p.Safe = true
		p.Guarantee = "every acknowledged write is on disk (AOF, appendfsync always): a Redis or host crash loses nothing that was acknowledged"
	case p.AOF && p.Fsync == "everysec":
		p.Guarantee = "AOF with appendfsync everysec: a host crash can lose the last second of acknowledged writes, and a job whose record is rolled back can run twice; set appendfsync always (or use replicas with WAIT) where that matters"
	case p.AOF:
		p.Guarantee = "AOF with appendfsync " + p.Fsync + ": the kernel decides when writes reach disk; a host crash can lose acknowledged writes, and a job whose record is rolled back can run twice"
	case p.Snapshots != "":
		p.Guarantee = "RDB snapshots only (save " + p.Snapshots + "): a Redis restart loses every write since the last snapshot — requests, job records, the lease; jobs may run twice or be forgotten"
	default:
		p.Guarantee = "no persistence: a Redis restart loses the whole board (requests, job records, the lease)"
	}
	return p, nil
}
