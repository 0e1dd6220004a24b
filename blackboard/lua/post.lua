-- post.lua: write one or more new entries atomically (Post, PostIfAbsent,
-- PostMany). All or nothing: if any entry id already exists nothing is written.
--
-- KEYS[1]      P:topics                    SET
-- KEYS[2]      P:all                       ZSET
-- KEYS[3]      P:expiry                    ZSET
-- KEYS[4]      P:events                    STREAM
-- KEYS[5]      P:stats                     HASH
-- KEYS[6..9]   P:prio:0 .. P:prio:3        ZSET
-- KEYS[10]     P:retire                    ZSET
-- KEYS[11]     P:inbox:compute:lanes       SET   per-module intake lane registry
-- then for entry i (i = 1..n), at b = 11 + 4*(i-1):
-- KEYS[b+1]    P:entry:<id>                HASH
-- KEYS[b+2]    P:topic:<topic>             ZSET
-- KEYS[b+3]    P:source:<source_module>    ZSET
-- KEYS[b+4]    the entry's intake lane     STREAM (a compute request's
--              P:inbox:compute:m:<module>:p<lane> or legacy
--              P:inbox:compute:p<lane>; any board key for other topics)
--
-- ARGV[1] now (epoch s)   ARGV[2] event id prefix (24 hex)
-- ARGV[3] events MAXLEN   ARGV[4] n (number of entries)
-- ARGV[5] retention (seconds; negative = keep forever), for entries posted
--   with status expired
-- then for entry i, 16 values from o = 6 + 16*(i-1) (see post_entry in lib.lua):
--   id, topic, source_module, status, parent_id ('' = none), timestamp,
--   confidence, ttl_seconds ('' = none), priority (0..3), data JSON,
--   metadata JSON, tags JSON, intake lane (-1 = none), canonical entry JSON
--   ('' unless lane >= 0), added-event payload JSON, lane registry member
--   ('<module>:p<lane>' for a per-module lane, '' for a legacy lane)
--
-- Returns {1, ZCARD P:all} when written, or {0, i} when entry i already exists.

local now, prefix, maxlen, n, retention = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local c = common_keys(1)

for i = 1, n do
  if redis.call('EXISTS', KEYS[COMMON_KEYS + ENTRY_KEYS * (i - 1) + 1]) == 1 then
    return { 0, i }
  end
end

for i = 1, n do
  local b = COMMON_KEYS + ENTRY_KEYS * (i - 1)
  post_entry(c, KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], 6 + ENTRY_ARGS * (i - 1), now, prefix, maxlen, retention)
end
return { 1, redis.call('ZCARD', c.all) }
