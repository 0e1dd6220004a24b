-- retire.lua: remove a batch of expired entries whose retention has run out
-- (Sweep), ids the caller read from P:retire with the topic and source it
-- then read from each entry to name its index keys. An entry is due when
-- its P:retire score (expired_at + retention) is below now, strictly. Each
-- id is re-checked here: one no longer due (it expired again since, or left
-- the index) is skipped; one that is gone or no longer
-- expired just leaves P:retire (a gone one also every index named here); one
-- whose topic or source no longer match is left for the next sweep. The
-- others are deleted with every index entry remove.lua cleans, counted in
-- total_removed and total_retired, and emit blackboard.entry.removed
-- {reason: "retention"}.
--
-- KEYS[1]      P:retire                    ZSET
-- KEYS[2]      P:all                       ZSET
-- KEYS[3]      P:expiry                    ZSET
-- KEYS[4]      P:events                    STREAM
-- KEYS[5]      P:stats                     HASH
-- KEYS[6..9]   P:prio:0 .. P:prio:3        ZSET
-- then for entry i (i = 1..n), at b = 9 + 3*(i-1):
-- KEYS[b+1]    P:entry:<id>                HASH
-- KEYS[b+2]    P:topic:<topic>             ZSET (P:topic: when the caller found no entry)
-- KEYS[b+3]    P:source:<source_module>    ZSET (P:source: likewise)
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- then for entry i, at o = 3 + 3*(i-1): ARGV[o+1] id, ARGV[o+2] expected
-- topic, ARGV[o+3] expected source_module
--
-- Returns {retired, dropped}: dropped counts ids skipped or dropped from the
-- index without a removal; the rest of the batch was left (topic or source
-- changed).

local now, prefix, maxlen = ARGV[1], ARGV[2], ARGV[3]
local retire, all, expiry, events, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- unindex drops id from every index remove.lua cleans (all four priority
-- indexes, so no priority needs to be named).
local function unindex(id, tk, sk)
  for k = 2, 3 do
    redis.call('ZREM', KEYS[k], id)
  end
  for k = 6, 9 do
    redis.call('ZREM', KEYS[k], id)
  end
  redis.call('ZREM', tk, id)
  redis.call('ZREM', sk, id)
  redis.call('ZREM', retire, id)
end

local retired, dropped = 0, 0
local n = (#KEYS - 9) / 3
for i = 1, n do
  local b, o = 9 + 3 * (i - 1), 3 + 3 * (i - 1)
  local ek, tk, sk = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3]
  local id, want_topic, want_source = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  local score = redis.call('ZSCORE', retire, id)
  if not score or tonumber(score) >= tonumber(now) then
    dropped = dropped + 1
  else
    local f = redis.call('HMGET', ek, 'status', 'topic', 'source_module')
    local status, topic, source = f[1] or 'active', f[2], f[3] or ''
    if not topic then
      -- Removed by a writer that does not know P:retire: clean what is left.
      unindex(id, tk, sk)
      dropped = dropped + 1
    elseif status ~= 'expired' then
      redis.call('ZREM', retire, id)
      dropped = dropped + 1
    elseif topic == want_topic and source == want_source then
      redis.call('DEL', ek)
      unindex(id, tk, sk)
      redis.call('HINCRBY', stats, 'total_removed', 1)
      redis.call('HINCRBY', stats, 'total_retired', 1)
      emit(events, maxlen, prefix, now, 'blackboard.entry.removed',
        '{"entry_id":' .. jstr(id) .. ',"topic":' .. jstr(topic) .. ',"reason":"retention"}')
      retired = retired + 1
    end
  end
end
return { retired, dropped }
