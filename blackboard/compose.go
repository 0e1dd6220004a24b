package blackboard

import (
	"context"
	"fmt"
	"time"
)

// Composing scripts: a package that must write blackboard entries in the
// same atomic step as its own keys (package jobs' record with its job
// entry, the broker's intake) does not copy this package's Lua. Its script
// is LuaLib() followed by its own Lua, and it calls the lib's entry points:
//
//   - post_one(kb, ab) posts one entry as Post would (HASH, indexes,
//     blackboard.entry.added, stats, the intake lane of a request), from
//     PostStep's KEYS at KEYS[kb] and ARGV at ARGV[ab]; it returns the entry
//     count, or false when the id exists (nothing written);
//   - consume_entry(ek, expiry, id, events, maxlen, prefix, now) is
//     Consume's status change (1 consumed now, 0 already consumed,
//     NOT_FOUND, or CONFLICT and the status).
//
// This package owns what those functions write and PostStep's layout; the
// composing package owns its script, its KEYS and ARGV around PostStep's,
// and calls Posted after a post, as Post does, so capacity holds.

// PostStepKeys and PostStepArgs are the lengths of PostStep's keys and
// args (post_one's POST_KEYS and POST_ARGS).
const (
	PostStepKeys = 15
	PostStepArgs = 21
)

// LuaLib returns the source of lua/lib.lua: the helpers every script of
// this package starts with, for scripts of other packages composed with
// it. It defines Lua locals only.
func LuaLib() string { return libLua }

// PostStep prepares e as Post does (it fills e.ID, e.Timestamp and
// e.Status when empty, normalizes and validates it) and appends the KEYS
// and ARGV of post_one for it (PostStepKeys and PostStepArgs of them) to
// keys and args. The events of the script that runs it share one event id
// prefix: post_one's ARGV[ab+1].
func (s *Store) PostStep(keys []string, args []any, e *Entry, now time.Time) ([]string, []any, error) {
	it, err := s.prepare(e, now)
	if err != nil {
		return keys, args, fmt.Errorf("blackboard: post %s: %w", idOf(e), err)
	}
	keys = append(append(keys, s.common...), s.keys.entryKeys(it)...)
	args = append(s.appendHead(args, now), 1, s.retentionArg())
	return keys, append(args, it.args...), nil
}

// Posted is what Post does after its script: when the board holds more than
// MaxEntries (count, as post_one returned it), older entries are evicted,
// sparing ids. Failures are logged (the sweeper retries).
func (s *Store) Posted(ctx context.Context, count int64, ids ...string) {
	s.enforceCapacity(ctx, s.clock.Now(), count, ids...)
}
