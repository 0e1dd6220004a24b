package blackboard

import (
	"context"
	"fmt"
	"strconv"
)

// Stats is the board's introspection, like the original's get_stats (the
// event_bus part is replaced by the length of the events stream).
type Stats struct {
	TotalEntries       int64            `json:"total_entries"`  // stored, any status
	ActiveEntries      int64            `json:"active_entries"` // ACTIVE and TTL not lapsed
	MaxEntries         int              `json:"max_entries"`    // -1 = unlimited
	TotalPosted        int64            `json:"total_posted"`
	TotalRemoved       int64            `json:"total_removed"` // explicit, evicted and retired
	TotalEvicted       int64            `json:"total_evicted"`
	TotalRetired       int64            `json:"total_retired"` // removed after Retention in status expired
	TotalExpired       int64            `json:"total_expired"`
	RegisteredModules  int64            `json:"registered_modules"`
	StatusDistribution map[Status]int64 `json:"status_distribution"`
	EntriesByTopic     map[string]int64 `json:"entries_by_topic"`
	EntriesBySource    map[string]int64 `json:"entries_by_source"`
	EventsLength       int64            `json:"events_length"`
}

// Stats reads the counters and walks every entry for the distributions
// (O(n), like the original, but without blocking writers).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	st := Stats{
		MaxEntries:         s.maxEntries,
		StatusDistribution: map[Status]int64{},
		EntriesByTopic:     map[string]int64{},
		EntriesBySource:    map[string]int64{},
	}
	pipe := s.rdb.Pipeline()
	counters := pipe.HGetAll(ctx, s.keys.Stats())
	modules := pipe.HLen(ctx, s.keys.Modules())
	events := pipe.XLen(ctx, s.keys.Events())
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, fmt.Errorf("blackboard: stats: %w", err)
	}
	c := counters.Val()
	n := func(k string) int64 { v, _ := strconv.ParseInt(c[k], 10, 64); return v }
	st.TotalPosted, st.TotalRemoved = n("total_posted"), n("total_removed")
	st.TotalEvicted, st.TotalExpired = n("total_evicted"), n("total_expired")
	st.TotalRetired = n("total_retired")
	st.RegisteredModules, st.EventsLength = modules.Val(), events.Val()

	now := s.clock.Now()
	err := s.scan(ctx, []string{"status", "topic", "source_module", "timestamp", "ttl_seconds"}, func(_ string, f []any) {
		e := Entry{Status: StatusActive}
		if v, ok := f[0].(string); ok {
			e.Status = Status(v)
		}
		e.Topic, _ = f[1].(string)
		e.SourceModule, _ = f[2].(string)
		if v, ok := f[3].(string); ok {
			e.Timestamp, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := f[4].(string); ok {
			ttl, _ := strconv.ParseFloat(v, 64)
			e.TTLSeconds = &ttl
		}
		st.TotalEntries++
		st.StatusDistribution[e.Status]++
		st.EntriesByTopic[e.Topic]++
		st.EntriesBySource[e.SourceModule]++
		if e.Status == StatusActive && !e.IsExpired(now) {
			st.ActiveEntries++
		}
	})
	if err != nil {
		return Stats{}, fmt.Errorf("blackboard: stats: %w", err)
	}
	return st, nil
}
