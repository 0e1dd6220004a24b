package blackboard

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// sweepBatch is how many expiry-index members one sweep.lua call handles.
const sweepBatch = 256

// SweepResult counts what one Sweep did.
type SweepResult struct {
	Expired int // entries marked expired
	Evicted int // entries evicted for capacity
	Active  int // entries with status active afterwards
}

type sweepPayload struct {
	ExpiredCount int `json:"expired_count"`
	ActiveCount  int `json:"active_count"`
}

// Sweep marks every ACTIVE entry whose TTL has lapsed at now as expired
// (emitting blackboard.entry.expired for each), evicts down to MaxEntries
// (emitting blackboard.entry.removed {reason: "evicted"}), then emits
// blackboard.sweep.complete {expired_count, active_count}. Expired entries
// are kept, as in the original.
func (s *Store) Sweep(ctx context.Context, now time.Time) (SweepResult, error) {
	var res SweepResult
	for {
		ids, err := s.rdb.ZRangeByScore(ctx, s.keys.Expiry(), &redis.ZRangeBy{
			Min: "-inf", Max: formatFloat(epoch(now)), Count: sweepBatch,
		}).Result()
		if err != nil {
			return res, fmt.Errorf("blackboard: sweep: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		expired, dropped, err := s.sweep(ctx, now, ids)
		if err != nil {
			return res, fmt.Errorf("blackboard: sweep: %w", err)
		}
		res.Expired += int(expired)
		// Members at the boundary (score <= now but not strictly lapsed)
		// stay; stop rather than reread them.
		if len(ids) < sweepBatch || expired+dropped == 0 {
			break
		}
	}
	if s.maxEntries > 0 {
		n, err := s.rdb.ZCard(ctx, s.keys.All()).Result()
		if err != nil {
			return res, fmt.Errorf("blackboard: sweep: %w", err)
		}
		if n > int64(s.maxEntries) {
			res.Evicted, err = s.evict(ctx, now, nil)
			if err != nil {
				return res, fmt.Errorf("blackboard: sweep: evict: %w", err)
			}
		}
	}
	active := 0
	err := s.scan(ctx, []string{"status"}, func(_ string, f []any) {
		if st, ok := f[0].(string); !ok || st == string(StatusActive) {
			active++
		}
	})
	if err != nil {
		return res, fmt.Errorf("blackboard: sweep: %w", err)
	}
	res.Active = active
	payload, _ := marshal(sweepPayload{res.Expired, res.Active})
	if _, err := s.emit(ctx, Event{Type: EventSweepComplete, Source: lifecycleSource, Payload: payload}, now); err != nil {
		return res, fmt.Errorf("blackboard: sweep: %w", err)
	}
	return res, nil
}

// Run sweeps every SweepInterval until ctx is done, then returns nil. Sweep
// errors are logged and the loop goes on.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.step(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweep failed", "err", err)
			}
		}
	}
}

// step is one iteration of Run.
func (s *Store) step(ctx context.Context) error {
	_, err := s.Sweep(ctx, s.clock.Now())
	return err
}

// scan calls fn with the given HASH fields of every entry in P:all, a page
// at a time. It is not a snapshot: entries added or removed meanwhile may be
// seen or missed.
func (s *Store) scan(ctx context.Context, fields []string, fn func(id string, vals []any)) error {
	const page = 500
	for start := int64(0); ; start += page {
		ids, err := s.rdb.ZRange(ctx, s.keys.All(), start, start+page-1).Result()
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(ids))
		for i, id := range ids {
			cmds[i] = pipe.HMGet(ctx, s.keys.Entry(id), fields...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for i, c := range cmds {
			vals := c.Val()
			if allNil(vals) {
				continue // removed meanwhile
			}
			fn(ids[i], vals)
		}
		if len(ids) < page {
			return nil
		}
	}
}

func allNil(v []any) bool {
	for _, x := range v {
		if x != nil {
			return false
		}
	}
	return true
}
