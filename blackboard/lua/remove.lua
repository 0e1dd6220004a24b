-- remove.lua: delete an entry and its index entries (Remove, and capacity
-- eviction). The caller read the entry's topic, source and priority to name
-- the index keys; if they no longer match, nothing happens and the caller
-- reads again.
--
-- KEYS[1]      P:entry:<id>                HASH
-- KEYS[2]      P:topic:<topic>             ZSET
-- KEYS[3]      P:source:<source_module>    ZSET
-- KEYS[4]      P:prio:<priority>           ZSET
-- KEYS[5]      P:all                       ZSET
-- KEYS[6]      P:expiry                    ZSET
-- KEYS[7]      P:events                    STREAM
-- KEYS[8]      P:stats                     HASH
-- KEYS[9]      P:retire                    ZSET
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] id    ARGV[5] expected topic    ARGV[6] expected source_module
-- ARGV[7] expected priority (0..3)
-- ARGV[8] reason ('explicit', 'evicted', ...)
-- ARGV[9] capacity: when > 0, remove only while ZCARD P:all exceeds it
--
-- Returns {1} removed; {0} not needed (at or under capacity);
-- {NOT_FOUND} (after dropping id from the named indexes); {STALE} (topic,
-- source or priority changed).

local now, prefix, maxlen, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local reason, cap = ARGV[8], tonumber(ARGV[9])

if cap > 0 and redis.call('ZCARD', KEYS[5]) <= cap then
  return { 0 }
end
local f = redis.call('HMGET', KEYS[1], 'topic', 'source_module', 'priority')
if not f[1] then
  -- No entry: whatever index entries the caller named for id are dangling.
  for k = 2, 6 do
    redis.call('ZREM', KEYS[k], id)
  end
  redis.call('ZREM', KEYS[9], id)
  return { NOT_FOUND }
end
if f[1] ~= ARGV[5] or f[2] ~= ARGV[6] or (f[3] or '1') ~= ARGV[7] then
  return { STALE }
end
redis.call('DEL', KEYS[1])
for k = 2, 6 do
  redis.call('ZREM', KEYS[k], id)
end
redis.call('ZREM', KEYS[9], id)
redis.call('HINCRBY', KEYS[8], 'total_removed', 1)
if reason == 'evicted' then
  redis.call('HINCRBY', KEYS[8], 'total_evicted', 1)
end
emit(KEYS[7], maxlen, prefix, now, 'blackboard.entry.removed',
  '{"entry_id":' .. jstr(id) .. ',"topic":' .. jstr(f[1]) .. ',"reason":' .. jstr(reason) .. '}')
return { 1 }
