-- post.lua: write one or more new entries atomically (Post, PostIfAbsent,
-- PostMany). All or nothing: if any entry id already exists nothing is written.
--
-- KEYS[1]      P:topics                    SET
-- KEYS[2]      P:all                       ZSET
-- KEYS[3]      P:expiry                    ZSET
-- KEYS[4]      P:events                    STREAM
-- KEYS[5]      P:stats                     HASH
-- KEYS[6..9]   P:prio:0 .. P:prio:3        ZSET
-- KEYS[10..19] P:inbox:compute:p0 .. p9    STREAM
-- KEYS[20]     P:retire                    ZSET
-- then for entry i (i = 1..n), at b = 20 + 3*(i-1):
-- KEYS[b+1]    P:entry:<id>                HASH
-- KEYS[b+2]    P:topic:<topic>             ZSET
-- KEYS[b+3]    P:source:<source_module>    ZSET
--
-- ARGV[1] now (epoch s)   ARGV[2] event id prefix (24 hex)
-- ARGV[3] events MAXLEN   ARGV[4] n (number of entries)
-- ARGV[5] retention (seconds; negative = keep forever), for entries posted
--   with status expired
-- then for entry i, 15 values from o = 6 + 15*(i-1) (see post_entry in lib.lua):
--   id, topic, source_module, status, parent_id ('' = none), timestamp,
--   confidence, ttl_seconds ('' = none), priority (0..3), data JSON,
--   metadata JSON, tags JSON, intake lane (-1 = none), canonical entry JSON
--   ('' unless lane >= 0), added-event payload JSON
--
-- Returns {1, ZCARD P:all} when written, or {0, i} when entry i already exists.

local now, prefix, maxlen, n, retention = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local c = common_keys(1)

for i = 1, n do
  if redis.call('EXISTS', KEYS[COMMON_KEYS + 3 * (i - 1) + 1]) == 1 then
    return { 0, i }
  end
end

for i = 1, n do
  local b = COMMON_KEYS + 3 * (i - 1)
  post_entry(c, KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], 6 + ENTRY_ARGS * (i - 1), now, prefix, maxlen, retention)
end
return { 1, redis.call('ZCARD', c.all) }
