-- supersede.lua: mark an entry superseded and post its replacement, in one
-- step (the original did these under two separate lock acquisitions).
--
-- KEYS[1..19]  the common keys, laid out as in post.lua
-- KEYS[20]     P:entry:<old_id>            HASH
-- KEYS[21]     P:entry:<new_id>            HASH
-- KEYS[22]     P:topic:<new topic>         ZSET
-- KEYS[23]     P:source:<new source>       ZSET
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] old_id
-- ARGV[5..19] the new entry, as one entry in post.lua (parent_id = old_id)
--
-- Returns {1, ZCARD P:all}; {NOT_FOUND, 0} if the old entry is missing;
-- {CONFLICT, 0} if the new id already exists. Nothing is written on error.

local now, prefix, maxlen, old_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local c = common_keys(1)

if redis.call('EXISTS', KEYS[20]) == 0 then
  return { NOT_FOUND, 0 }
end
if redis.call('EXISTS', KEYS[21]) == 1 then
  return { CONFLICT, 0 }
end
set_status(KEYS[20], c.expiry, old_id, 'superseded', c.events, maxlen, prefix, now)
post_entry(c, KEYS[21], KEYS[22], KEYS[23], 5, now, prefix, maxlen)
return { 1, redis.call('ZCARD', c.all) }
