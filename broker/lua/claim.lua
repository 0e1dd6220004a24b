-- claim.lua: take over intake messages that another consumer (or a crashed
-- earlier run of this one) left pending for longer than the idle limit.
--
-- KEYS[1]  one intake lane stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name (the new owner)
-- ARGV[3]  minimum idle time, milliseconds
-- ARGV[4]  cursor (stream id to start at; "0-0" for the beginning)
-- ARGV[5]  maximum number of messages
-- ARGV[6]  optional: the per-field byte cap (see with_counts)
-- ARGV[7]  optional: the prefix kept of a longer field
--
-- Returns {next_cursor, {{id, {field, value, ...}, deliveries}, ...}, {deleted_id, ...}}.
-- deliveries already counts this claim. deleted ids were pending but gone
-- from the stream; Redis drops them from the pending list.
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
return { r[1], with_counts(KEYS[1], ARGV[1], r[2], tonumber(ARGV[6]), tonumber(ARGV[7])), r[3] or {} }
