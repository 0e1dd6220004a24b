-- read.lua: plan a read of new intake messages for one consumer, lanes in
-- KEYS order (the caller passes the most urgent lane first), at most
-- ARGV[3] in all. Redis applies XREADGROUP's COUNT per stream; this script
-- is how the feed bounds a whole read by the free room in its inbox.
--
-- For a lane whose number of undelivered messages Redis knows (the group's
-- lag, XINFO GROUPS, Redis 7+), the script only plans: the caller reads
-- that many with XREADGROUP, all planned lanes in one pipeline. Copying
-- messages through Lua costs Redis about twice what a plain XREADGROUP
-- does, so messages are read here only for a lane whose lag is unknown
-- (older Redis, or a missing lane or group, where XREADGROUP raises the
-- error the caller acts on).
--
-- KEYS[i]  intake lane streams, most urgent first
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  maximum number of messages in all (> 0)
--
-- Returns {{i, n, ...}, {{i, id, {field, value, ...}}, ...}}: the plan, as
-- lane index (into KEYS), count pairs, then the messages read here, with
-- their lane index. New messages have been delivered once.
-- Errors: NOGROUP when a lane or the group does not exist.
local group, consumer = ARGV[1], ARGV[2]
local left = tonumber(ARGV[3])
local plan, out = {}, {}
for i, key in ipairs(KEYS) do
  if left <= 0 then
    break
  end
  local lag = group_lag(key, group)
  if lag then
    if lag > 0 then
      local n = math.min(lag, left)
      plan[#plan + 1] = i
      plan[#plan + 1] = n
      left = left - n
    end
  else
    local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', left, 'STREAMS', key, '>')
    if r then
      for _, m in ipairs(r[1][2]) do
        out[#out + 1] = { i, m[1], m[2] }
        left = left - 1
      end
    end
  end
end
return { plan, out }
