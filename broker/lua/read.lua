-- read.lua: read new intake messages for one consumer, lanes in KEYS order
-- (the caller passes the most urgent lane first), at most ARGV[3] in all.
-- Redis applies XREADGROUP's COUNT per stream; this script is how the feed
-- bounds a whole read by the free room in its inbox, in one round trip.
--
-- KEYS[i]  intake lane streams, most urgent first
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  maximum number of messages in all (> 0)
--
-- Returns {{i, id, {field, value, ...}}, ...}: i is the KEYS index of the
-- message's lane. New messages have been delivered once.
-- Errors: NOGROUP when a lane or the group does not exist.
local group, consumer = ARGV[1], ARGV[2]
local left = tonumber(ARGV[3])
local out = {}
for i, key in ipairs(KEYS) do
  if left <= 0 then
    break
  end
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', left, 'STREAMS', key, '>')
  if r then
    for _, m in ipairs(r[1][2]) do
      out[#out + 1] = { i, m[1], m[2] }
      left = left - 1
    end
  end
end
return out
