package blackboard

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// sweepBatch is how many index members one sweep.lua or retire.lua call
// handles.
const sweepBatch = 256

// SweepResult counts what one Sweep did.
type SweepResult struct {
	Expired int // entries marked expired
	Retired int // expired entries removed after Retention
	Evicted int // entries evicted for capacity
	// Active is the number of entries with status active afterwards when
	// the sweep changed something (Changed), and -1 when it did not: the
	// count reads every entry, so a quiet sweep skips it.
	Active int
}

// Changed reports whether the sweep expired, retired or evicted an entry,
// that is, whether it emitted blackboard.sweep.complete.
func (r SweepResult) Changed() bool { return r.Expired+r.Retired+r.Evicted > 0 }

type sweepPayload struct {
	ExpiredCount int `json:"expired_count"`
	ActiveCount  int `json:"active_count"`
}

// Sweep marks every ACTIVE entry whose TTL has lapsed at now as expired
// (emitting blackboard.entry.expired for each), removes the entries that
// have been expired for longer than Retention (emitting
// blackboard.entry.removed {reason: "retention"}), evicts down to
// MaxEntries (emitting blackboard.entry.removed {reason: "evicted"}) and,
// only if it did any of that, emits blackboard.sweep.complete
// {expired_count, active_count}. The original emitted it on every sweep,
// once a second, which flooded the capped stream on an idle board.
//
// active_count is counted by reading every entry's status (O(n)), and only
// for a sweep that changed something. A counter kept up to date by every
// script would be O(1), but any writer that does not keep it (a Python
// process, a board written before it existed) would make it drift for good
// with nothing to repair it; the count is always right and no longer paid
// on quiet sweeps.
func (s *Store) Sweep(ctx context.Context, now time.Time) (SweepResult, error) {
	res := SweepResult{Active: -1}
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
	if s.retention >= 0 {
		n, err := s.retireDue(ctx, now)
		res.Retired = n
		if err != nil {
			return res, fmt.Errorf("blackboard: sweep: retire: %w", err)
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
	if !res.Changed() {
		return res, nil
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

// retireDue removes the entries of the retire index that are due at now
// (expired for longer than Retention: score < now), sweepBatch at a time,
// and returns how many it removed. Only the index is
// read, never the keyspace: an entry enters it when it becomes expired.
func (s *Store) retireDue(ctx context.Context, now time.Time) (int, error) {
	retired := 0
	for {
		ids, err := s.rdb.ZRangeByScore(ctx, s.keys.Retire(), &redis.ZRangeBy{
			Min: "-inf", Max: "(" + formatFloat(epoch(now)), Count: sweepBatch,
		}).Result()
		if err != nil {
			return retired, err
		}
		if len(ids) == 0 {
			return retired, nil
		}
		vs, err := s.lookupMany(ctx, ids)
		if err != nil {
			return retired, err
		}
		n, dropped, err := s.retire(ctx, now, vs)
		retired += int(n)
		if err != nil {
			return retired, err
		}
		// Members left by retire.lua (topic or source changed under us)
		// would come back first; stop rather than reread them.
		if len(ids) < sweepBatch || n+dropped == 0 {
			return retired, nil
		}
	}
}

// lookupMany reads, in one round trip, the topic and source retire.lua
// needs to name each entry's index keys; an entry found gone gets empty
// ones (retire.lua then only drops it from the indexes).
func (s *Store) lookupMany(ctx context.Context, ids []string) ([]victim, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.keys.Entry(id), "topic", "source_module")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	vs := make([]victim, len(ids))
	for i, c := range cmds {
		f := c.Val()
		vs[i].id = ids[i]
		vs[i].topic, _ = f[0].(string)
		vs[i].source, _ = f[1].(string)
	}
	return vs, nil
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
