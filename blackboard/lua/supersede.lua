-- supersede.lua: mark an entry superseded and post its replacement, in one
-- step (the original did these under two separate lock acquisitions).
--
-- KEYS[1..11]  the common keys, laid out as in post.lua
-- KEYS[12]     P:entry:<old_id>            HASH
-- KEYS[13]     P:entry:<new_id>            HASH
-- KEYS[14]     P:topic:<new topic>         ZSET
-- KEYS[15]     P:source:<new source>       ZSET
-- KEYS[16]     the new entry's intake lane, as in post.lua
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] old_id
-- ARGV[5] retention (seconds; negative = keep forever), as in post.lua
-- ARGV[6..21] the new entry, as one entry in post.lua (parent_id = old_id)
--
-- Returns {1, ZCARD P:all}; {NOT_FOUND, 0} if the old entry is missing;
-- {CONFLICT, 0} if the new id already exists. Nothing is written on error.
-- A superseded entry that was expired stays in P:retire until retire.lua
-- drops it (its status is no longer expired).

local now, prefix, maxlen, old_id, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local c = common_keys(1)

if redis.call('EXISTS', KEYS[12]) == 0 then
  return { NOT_FOUND, 0 }
end
if redis.call('EXISTS', KEYS[13]) == 1 then
  return { CONFLICT, 0 }
end
set_status(KEYS[12], c.expiry, old_id, 'superseded', c.events, maxlen, prefix, now)
post_entry(c, KEYS[13], KEYS[14], KEYS[15], KEYS[16], 6, now, prefix, maxlen, retention)
return { 1, redis.call('ZCARD', c.all) }
