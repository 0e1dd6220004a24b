package blackboard

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Query selects entries, as the original's BlackboardQuery: every set
// constraint must hold. Zero values constrain nothing.
type Query struct {
	// Topics: an entry matches topic t if its topic is t or starts with
	// "t."; "t.*" matches only the subtopics of t.
	Topics         []string
	SourceModules  []string
	MinConfidence  float64  // confidence >= MinConfidence
	MinPriority    Priority // priority >= MinPriority
	TagsAny        []string // has at least one of these
	TagsAll        []string // has all of these
	Statuses       []Status // empty: any status
	Since          float64  // timestamp >= Since
	Limit          int      // <= 0: no limit
	IncludeExpired bool     // also return entries whose TTL has lapsed
}

// topicMatches reports whether topic is selected by query topic q.
func topicMatches(q, topic string) bool {
	if base, ok := strings.CutSuffix(q, ".*"); ok {
		return strings.HasPrefix(topic, base+".")
	}
	return topic == q || strings.HasPrefix(topic, q+".")
}

// view is how an entry looks to readers at now: an ACTIVE entry whose TTL
// has lapsed reads as expired even before the sweeper has marked it, which
// is what the original showed after its sweep-on-read.
func view(e Entry, now time.Time) Entry {
	if e.Status == StatusActive && e.IsExpired(now) {
		e.Status = StatusExpired
	}
	return e
}

func (q Query) matches(e Entry, now time.Time) bool {
	switch {
	case !q.IncludeExpired && e.IsExpired(now):
		return false
	case len(q.Statuses) > 0 && !slices.Contains(q.Statuses, e.Status):
		return false
	case len(q.Topics) > 0 && !slices.ContainsFunc(q.Topics, func(t string) bool { return topicMatches(t, e.Topic) }):
		return false
	case len(q.SourceModules) > 0 && !slices.Contains(q.SourceModules, e.SourceModule):
		return false
	case e.Confidence < q.MinConfidence, e.Priority < q.MinPriority, e.Timestamp < q.Since:
		return false
	case len(q.TagsAny) > 0 && !slices.ContainsFunc(q.TagsAny, func(t string) bool { return slices.Contains(e.Tags, t) }):
		return false
	case !allIn(q.TagsAll, e.Tags):
		return false
	}
	return true
}

func allIn(want, have []string) bool {
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	return true
}

// Query returns the entries matching q, ordered by priority (highest first)
// then timestamp (newest first), at most q.Limit of them. It works one
// priority level at a time and loads only as many entries as the limit
// needs. Unlike the original it does not write: lapsed entries are filtered
// (or shown as expired); the sweeper marks them.
func (s *Store) Query(ctx context.Context, q Query) ([]Entry, error) {
	now := s.clock.Now()
	drivers, err := s.drivers(ctx, q.Topics, q.SourceModules)
	if err != nil {
		return nil, fmt.Errorf("blackboard: query: %w", err)
	}
	if drivers != nil && len(drivers) == 0 {
		return nil, nil
	}
	walk, err := s.walkPriorities(ctx, drivers)
	if err != nil {
		return nil, fmt.Errorf("blackboard: query: %w", err)
	}
	var out []Entry
	seen := map[string]bool{}
	for p := Critical; p >= max(q.MinPriority, Low); p-- {
		next := s.levelIDs(ctx, drivers, walk, p, q.Since)
		for {
			n := 256 // entries to load next: what the limit still needs, plus slack for filters
			if q.Limit > 0 {
				need := q.Limit - len(out)
				n = min(n, max(need+need/4, 16))
			}
			ids, err := next(n)
			if err != nil {
				return nil, fmt.Errorf("blackboard: query: %w", err)
			}
			if len(ids) == 0 {
				break
			}
			entries, err := s.load(ctx, ids)
			if err != nil {
				return nil, fmt.Errorf("blackboard: query: %w", err)
			}
			for _, e := range entries {
				if e.Priority != p || seen[e.ID] {
					continue // changed priority while we read; counted at its level
				}
				e = view(e, now)
				if !q.matches(e, now) {
					continue
				}
				seen[e.ID] = true
				out = append(out, e)
				if q.Limit > 0 && len(out) == q.Limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// Query plans; tests force one with Store.queryPlan.
const (
	planAuto = iota
	planWalk
	planIntersect
)

// walkPriorities decides how Query finds a level's candidates. When the
// driver indexes hold a large share of the board (or there are none), it is
// cheaper to walk P:prio:<p> newest first and filter loaded entries; when
// they are selective, intersecting each with P:prio:<p> is.
func (s *Store) walkPriorities(ctx context.Context, drivers []string) (bool, error) {
	switch {
	case drivers == nil:
		return true, nil
	case s.queryPlan != planAuto:
		return s.queryPlan == planWalk, nil
	}
	pipe := s.rdb.Pipeline()
	all := pipe.ZCard(ctx, s.keys.All())
	cards := make([]*redis.IntCmd, len(drivers))
	for i, d := range drivers {
		cards[i] = pipe.ZCard(ctx, d)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	var sum int64
	for _, c := range cards {
		sum += c.Val()
	}
	return 4*sum >= all.Val(), nil
}

// levelIDs returns a function yielding, n at a time, the ids of priority p
// with timestamp >= since, newest first: from P:prio:<p> itself when walk
// is set (the caller filters by topic and source), else from the
// intersection of each driver index with it.
func (s *Store) levelIDs(ctx context.Context, drivers []string, walk bool, p Priority, since float64) func(n int) ([]string, error) {
	prio := s.keys.Prio(p)
	if walk {
		var offset int64
		return func(n int) ([]string, error) {
			ids, err := s.rdb.ZRevRangeByScore(ctx, prio, &redis.ZRangeBy{
				Min: formatFloat(since), Max: "+inf", Offset: offset, Count: int64(n),
			}).Result()
			offset += int64(len(ids))
			return ids, err
		}
	}
	var ids []string
	loaded := false
	return func(n int) ([]string, error) {
		if !loaded {
			var err error
			if ids, err = s.intersect(ctx, drivers, prio, since); err != nil {
				return nil, err
			}
			loaded = true
		}
		n = min(n, len(ids))
		out := ids[:n]
		ids = ids[n:]
		return out, nil
	}
}

// intersect returns the members of prio that are in any driver, with
// timestamp >= since, newest first. Both index scores are the timestamp,
// so ZINTER with weights 1,0 keeps it.
func (s *Store) intersect(ctx context.Context, drivers []string, prio string, since float64) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(drivers))
	for i, d := range drivers {
		cmds[i] = pipe.ZInterWithScores(ctx, &redis.ZStore{Keys: []string{d, prio}, Weights: []float64{1, 0}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	return mergeNewest(cmds, since), nil
}

// GetByTopic returns the ACTIVE, unexpired entries of topic and its
// subtopics, newest first.
func (s *Store) GetByTopic(ctx context.Context, topic string) ([]Entry, error) {
	out, err := s.active(ctx, []string{topic}, nil)
	if err != nil {
		return nil, fmt.Errorf("blackboard: get by topic %s: %w", topic, err)
	}
	return out, nil
}

// GetBySource returns the ACTIVE, unexpired entries posted by module,
// newest first.
func (s *Store) GetBySource(ctx context.Context, module string) ([]Entry, error) {
	out, err := s.active(ctx, nil, []string{module})
	if err != nil {
		return nil, fmt.Errorf("blackboard: get by source %s: %w", module, err)
	}
	return out, nil
}

func (s *Store) active(ctx context.Context, topics, sources []string) ([]Entry, error) {
	now := s.clock.Now()
	drivers, err := s.drivers(ctx, topics, sources)
	if err != nil || len(drivers) == 0 {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(drivers))
	for i, d := range drivers {
		cmds[i] = pipe.ZRevRangeWithScores(ctx, d, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	ids := mergeNewest(cmds, math.Inf(-1))
	var out []Entry
	for chunk := range slices.Chunk(ids, 256) {
		entries, err := s.load(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Status == StatusActive && !e.IsExpired(now) {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// Topics returns the topics that currently have entries, sorted.
func (s *Store) Topics(ctx context.Context) ([]string, error) {
	all, err := s.rdb.SMembers(ctx, s.keys.Topics()).Result()
	if err != nil {
		return nil, fmt.Errorf("blackboard: topics: %w", err)
	}
	pipe := s.rdb.Pipeline()
	cards := make([]*redis.IntCmd, len(all))
	for i, t := range all {
		cards[i] = pipe.ZCard(ctx, s.keys.Topic(t))
	}
	if len(all) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("blackboard: topics: %w", err)
		}
	}
	var out []string
	for i, t := range all {
		if cards[i].Val() > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// drivers returns the index keys a read walks: the topic indexes of every
// known topic matching topics, else the source indexes of sources, else nil
// (meaning every entry). An empty non-nil result means nothing can match.
func (s *Store) drivers(ctx context.Context, topics, sources []string) ([]string, error) {
	switch {
	case len(topics) > 0:
		known, err := s.rdb.SMembers(ctx, s.keys.Topics()).Result()
		if err != nil {
			return nil, err
		}
		slices.Sort(known)
		keys := []string{}
		for _, t := range known {
			if slices.ContainsFunc(topics, func(q string) bool { return topicMatches(q, t) }) {
				keys = append(keys, s.keys.Topic(t))
			}
		}
		return keys, nil
	case len(sources) > 0:
		keys := []string{}
		for _, m := range slices.Compact(slices.Sorted(slices.Values(sources))) {
			keys = append(keys, s.keys.Source(m))
		}
		return keys, nil
	}
	return nil, nil
}

// mergeNewest merges index replies into ids with score >= since, ordered by
// score descending, then id descending (as ZREVRANGE orders ties).
func mergeNewest(cmds []*redis.ZSliceCmd, since float64) []string {
	var zs []redis.Z
	for _, c := range cmds {
		for _, z := range c.Val() {
			if z.Score >= since {
				zs = append(zs, z)
			}
		}
	}
	slices.SortFunc(zs, func(a, b redis.Z) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(b.Member.(string), a.Member.(string)))
	})
	ids := make([]string, len(zs))
	for i, z := range zs {
		ids[i] = z.Member.(string)
	}
	return ids
}

// load reads entries by id in one pipeline, in order, skipping ids whose
// entry is gone. An entry that does not decode is logged and skipped.
func (s *Store) load(ctx context.Context, ids []string) ([]Entry, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.keys.Entry(id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(ids))
	for i, c := range cmds {
		h := c.Val()
		if len(h) == 0 {
			continue
		}
		e, err := DecodeHash(h)
		if err != nil {
			s.log.Warn("skipping undecodable entry", "entry_id", ids[i], "err", err)
			continue
		}
		out = append(out, e)
	}
	return out, nil
}
