-- unlist.lua: take a job off P:jobs:unmirrored once its change is mirrored
-- (Store.unlist, where the mirror's own update step could not), only while
-- the record is still at the version that was mirrored: a newer change,
-- listed by its own transition, stays listed until its own mirror.
--
-- KEYS[1] P:job:<id>   HASH (the record)
-- KEYS[2] P:jobs:unmirrored   ZSET
-- ARGV[1] job id   ARGV[2] the record's version that was mirrored
--
-- Returns 1 (taken off) or 0 (not listed, or the record moved on).
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[2] then
  return 0
end
return redis.call('ZREM', KEYS[2], ARGV[1])
