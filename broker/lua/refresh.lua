-- refresh.lua: keep this consumer's claim on messages it still holds in
-- memory, so that no other broker reclaims a request that is merely waiting
-- in a deep inbox. XCLAIM ... JUSTID resets the idle time without counting
-- a delivery. A message is refreshed only while this consumer owns it; the
-- others are reported lost (acked, deleted, or claimed by another broker).
--
-- KEYS[1]  one intake lane stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3..] message ids
--
-- Returns {lost_id, ...}.
local key, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local owner = pending_info(key, group, id)
  if owner == consumer then
    redis.call('XCLAIM', key, group, consumer, 0, id, 'JUSTID')
  else
    lost[#lost + 1] = id
  end
end
return lost
