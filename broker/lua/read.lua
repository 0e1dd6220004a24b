-- read.lua: plan a read of new intake messages for one consumer, at most
-- ARGV[3] in all. Redis applies XREADGROUP's COUNT per stream; this script
-- is how the feed bounds a whole read by the free room in its inbox, and
-- how it shares that room out:
--
--  * by priority level, most urgent first: a level's lanes are served
--    before any lane of a less urgent level is looked at;
--  * within a level, fairly across its lanes (one per module, plus the
--    legacy shared lane on a trusted board), by water-filling on their
--    backlogs: a lane with fewer unread messages than an equal share gets
--    them all and the rest is split among the others. One module's flood
--    therefore never sits ahead of another module's request: both are
--    read in the same read.
--
-- For a lane whose number of undelivered messages Redis knows (the group's
-- lag, XINFO GROUPS, Redis 7+), the script only plans: the caller reads
-- that many with XREADGROUP, all planned lanes in one pipeline. Copying
-- messages through Lua costs Redis about twice what a plain XREADGROUP
-- does, so messages are read here only for a lane whose lag is unknown
-- (older Redis, or a missing lane or group, where XREADGROUP raises the
-- error the caller acts on); such a lane is given a fair share.
--
-- KEYS[1..n]  intake lane streams, grouped by level, most urgent first
-- KEYS[n+1]   P:inbox:compute:lanes, the per-module lane registry (SET)
-- ARGV[1]     consumer group
-- ARGV[2]     consumer name
-- ARGV[3]     maximum number of messages in all (> 0)
-- ARGV[4..13] number of lanes at each level, most urgent (p9) first; they
--             add up to n
--
-- Returns {{i, n, ...}, {{i, id, {field, value, ...}}, ...}, registry_size}:
-- the plan, as lane index (into KEYS), count pairs, then the messages read
-- here, with their lane index, then SCARD of the registry (the caller
-- looks for new lanes when it changes). New messages have been delivered
-- once.
-- Errors: NOGROUP when a lane or the group does not exist.
local group, consumer = ARGV[1], ARGV[2]
local left = tonumber(ARGV[3])
local plan, out = {}, {}
local first = 1
for level = 0, 9 do
  local count = tonumber(ARGV[4 + level])
  if left > 0 and count > 0 then
    local lanes = {}
    for i = first, first + count - 1 do
      -- An empty lane (finished messages are deleted, so most lanes are
      -- empty once the feed keeps up) has nothing to deliver: XLEN is O(1)
      -- and spares XINFO GROUPS, which costs Redis far more from Lua. A
      -- missing lane is empty too; its first message makes it non-empty,
      -- and a missing group then raises NOGROUP below as before.
      if redis.call('XLEN', KEYS[i]) > 0 then
        local lag = group_lag(KEYS[i], group)
        if lag == nil then
          lanes[#lanes + 1] = { i, math.huge, true }
        elseif lag > 0 then
          lanes[#lanes + 1] = { i, lag, false }
        end
      end
    end
    table.sort(lanes, function(a, b)
      if a[2] ~= b[2] then
        return a[2] < b[2]
      end
      return a[1] < b[1]
    end)
    for j, l in ipairs(lanes) do
      if left <= 0 then
        break
      end
      local n = math.min(l[2], math.ceil(left / (#lanes - j + 1)))
      if l[3] then
        local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n, 'STREAMS', KEYS[l[1]], '>')
        if r then
          for _, m in ipairs(r[1][2]) do
            out[#out + 1] = { l[1], m[1], m[2] }
            left = left - 1
          end
        end
      else
        plan[#plan + 1] = l[1]
        plan[#plan + 1] = n
        left = left - n
      end
    end
  end
  first = first + count
end
return { plan, out, redis.call('SCARD', KEYS[#KEYS]) }
