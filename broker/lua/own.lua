-- own.lua: re-read this consumer's own pending intake messages (after a
-- restart under the same consumer name), without waiting for the idle limit.
--
-- KEYS[1]  one intake lane stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  read messages after this id ("0-0" for the beginning)
-- ARGV[4]  maximum number of messages
-- ARGV[5]  optional: the per-field byte cap (see with_counts)
-- ARGV[6]  optional: the prefix kept of a longer field
--
-- Returns {{id, {field, value, ...}, deliveries}, ...}; deliveries counts
-- this read. Messages deleted from the stream are skipped.
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[4], 'STREAMS', KEYS[1], ARGV[3])
if not r then
  return {}
end
return with_counts(KEYS[1], ARGV[1], r[1][2], tonumber(ARGV[5]), tonumber(ARGV[6]))
